"""The conformance kit as a backend of another package runs it: from a folder of its own,
`pytest --pyargs queuecore.conformance`, its harness found through the
`queuecore.harnesses` entry point of an installed distribution (a real dist-info folder
on the path, as pip would leave it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HARNESS = '''
from queuecore.backends.sqlite_harness import SQLiteHarness


class ElsewhereHarness(SQLiteHarness):
    """A third party's harness (here SQLite again, under a name of its own)."""

    name = "elsewhere"
'''


def installed_elsewhere(folder: Path) -> None:
    """A distribution `elsewhere` that registers its harness, as `pip install` would."""
    (folder / "elsewhere_harness.py").write_text(HARNESS)
    info = folder / "elsewhere-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: elsewhere\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[queuecore.harnesses]\nelsewhere = elsewhere_harness:ElsewhereHarness\n"
    )


def kit(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(folder)}
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs"]
    return subprocess.run(
        [*pytest, "--pyargs", "queuecore.conformance", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_another_package_s_harness_runs_the_suite(tmp_path: Path) -> None:
    installed_elsewhere(tmp_path)
    result = kit(tmp_path, "--queuecore-backends", "elsewhere", "-k", "r01 or r09", "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[elsewhere-sync] PASSED" in result.stdout
    assert "[elsewhere-async] PASSED" in result.stdout
    assert "[sqlite-" not in result.stdout  # only the named backends run


def test_the_kit_asks_for_its_backends(tmp_path: Path) -> None:
    installed_elsewhere(tmp_path)
    result = kit(tmp_path, "-k", "r01")
    assert result.returncode != 0
    assert "--queuecore-backends" in result.stderr and "elsewhere" in result.stderr
    unknown = kit(tmp_path, "--queuecore-backends", "nowhere")
    assert unknown.returncode != 0 and "no queuecore harness named nowhere" in unknown.stderr
