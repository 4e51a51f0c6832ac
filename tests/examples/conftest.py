"""The example's end-to-end test runs on both backends, with the conformance fixtures."""

from tests.conformance.conftest import backend, dsn, postgres_database, sqlite_template

__all__ = ["backend", "dsn", "postgres_database", "sqlite_template"]
