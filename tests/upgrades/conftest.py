"""Upgrade tests reuse the conformance fixtures: every test on every backend, each on
databases of its own (`empty_dsn`), migrated by the test as far as it needs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.upgrades.old_release import Release, export, make_venv


@pytest.fixture(scope="session")
def old_release(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Release | None]:
    """Old queuecores by commit, exported once each, all run by one venv of the session;
    None for a commit whose command line does not import."""
    python = make_venv(tmp_path_factory.mktemp("old-venv"))
    exported: dict[str, Release | None] = {}

    def release(commit: str) -> Release | None:
        if commit not in exported:
            folder = tmp_path_factory.mktemp(f"release-{commit[:10]}")
            made = Release(commit, python, export(commit, folder))
            exported[commit] = made if made.runs(folder) else None
        return exported[commit]

    return release
