"""The testing helpers test themselves with the conformance fixtures, as the worker tests
do: every test on both backends, its own migrated database, a fake clock."""

from tests.conformance.conftest import app_table as app_table
from tests.conformance.conftest import db as db
from tests.worker.conftest import *  # noqa: F403 (pytest finds fixtures by their names)
