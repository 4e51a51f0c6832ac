"""The previous schema revision's queuecore, taken from git, run in processes of its own.

For a chain whose head revision was added by commit C, the previous release is C's parent:
the newest code that knew only the revision before head. A head that opens its chain (no
revision before it, MariaDB's today) has no older schema; its release is then C itself,
the oldest code at today's head. A head revision not committed yet (written in this tree
beside the test) makes HEAD the previous release.

Not every commit ran: a branch rebased onto main lands as a series whose middle commits
may not even import (the three before 0004's: two read `ready_at`, which only 0004 adds,
one a module its successor adds). So the previous release is the newest commit, from C's
parent back to the one that added the revision before head, whose command line imports;
the test then shows whether that release works.

The old tree is exported with `git archive` and laid out as pyproject's package-dir says
(`backends/` as `queuecore.backends`, ...), beside a dist-info of its own so that its
entry points (backends) are the ones found. It runs on one venv per session, made without
pip, that borrows today's dependencies: a `.pth` names today's site-packages (whose own
`.pth` files, today's editable queuecore among them, are not read from there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before the standard library took it in
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def git(*args: str) -> str:
    """`git ARGS...` in the repository; the test fails, saying why, when git cannot answer."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        pytest.fail("the rolling-deploy test needs git, to take the previous release from history")
    if done.returncode != 0:
        pytest.fail(
            f"git {' '.join(args)} failed: {done.stderr.strip()}. The rolling-deploy test takes "
            "the previous release from the repository's history: run it in a git clone"
        )
    return done.stdout.strip()


def candidates(head_file: Path, previous_file: Path | None) -> list[str]:
    """The commits that may be the release before the revision in `head_file`, newest
    first (see the module); `previous_file` holds the revision before it, if any."""
    if git("rev-parse", "--is-shallow-repository") == "true":
        pytest.fail(
            "this clone is shallow: the rolling-deploy test needs the commits that added "
            "each migration (git fetch --unshallow)"
        )
    added = added_by(head_file)
    if not added:
        return [git("rev-parse", "HEAD")]
    if previous_file is None:
        return [added]
    since = added_by(previous_file)
    return git("rev-list", "--first-parent", f"{since}..{added}^").split()


def added_by(file: Path) -> str:
    """The commit that added `file` (empty when none has yet)."""
    path = file.resolve()
    if not path.is_relative_to(REPO):
        pytest.fail(f"{path} is not in {REPO}: install queuecore editable (pip install -e)")
    return git("log", "-1", "--format=%H", "--diff-filter=A", "--", str(path.relative_to(REPO)))


@dataclass(frozen=True)
class Release:
    """An old queuecore: `python` runs it with `env()`."""

    commit: str
    python: Path
    site: Path

    def runs(self, folder: Path) -> bool:
        """Whether its command line imports at all (see the module on broken commits)."""
        done = subprocess.run(
            [str(self.python), "-c", "import queuecore.cli"],
            env=self.env("", folder),
            cwd=folder,
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def env(self, dsn: str, *paths: Path) -> dict[str, str]:
        """The environment of its processes: the DSN in QUEUECORE_DSN (never in argv), the
        old tree first on the path, then `paths` (the application's modules)."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["QUEUECORE_DSN"] = dsn
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (self.site, *paths))
        return env


def make_venv(folder: Path) -> Path:
    """A venv without pip whose site-packages reaches today's; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    today = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "today.pth").write_text("".join(f"{p}\n" for p in sorted(today)))
    return python


def export(commit: str, folder: Path) -> Path:
    """The tree of `commit` laid out as installed, with a dist-info; returns the folder to
    put first on the path."""
    source, site = folder / "source", folder / "site"
    source.mkdir(parents=True)
    archive = folder / "tree.tar"
    git("archive", "--format=tar", "-o", str(archive), commit)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(source)], check=True)
    project = tomllib.loads((source / "pyproject.toml").read_text())
    layout = project["tool"]["setuptools"]["package-dir"]
    for package in sorted(layout, key=lambda name: name.count(".")):
        target = site.joinpath(*package.split("."))
        shutil.copytree(source / layout[package], target, dirs_exist_ok=True)
    meta = project["project"]
    info = site / f"queuecore-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: queuecore\nVersion: {meta['version']}\n"
    )
    groups = {**meta.get("entry-points", {}), "console_scripts": meta.get("scripts", {})}
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items())
            for group, points in groups.items()
        )
    )
    return site
