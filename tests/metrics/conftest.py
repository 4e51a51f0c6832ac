"""Metrics tests use the conformance fixtures, as the worker tests do: every test on
both backends, its own migrated database."""

from tests.dashboard.conftest import *  # noqa: F403 (pytest finds fixtures by their names)
