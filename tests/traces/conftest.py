"""Trace tests use the conformance fixtures: every test on both backends."""

from tests.dashboard.conftest import *  # noqa: F403 (pytest finds fixtures by their names)
