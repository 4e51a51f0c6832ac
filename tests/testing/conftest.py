"""The testing helpers test themselves with the conformance fixtures, as the worker tests
do: every test on both backends, its own migrated database, a fake clock."""

from tests.worker.conftest import *  # noqa: F403 (pytest finds fixtures by their names)
