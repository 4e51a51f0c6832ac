"""Upgrade tests reuse the conformance fixtures: every test on every backend, each on
databases of its own (`empty_dsn`), migrated by the test as far as it needs."""
