"""What a new user meets in the first hour, each message checked word for word where it
matters: a refused connection keeps the driver's hint, near-miss DSNs are told what to
write, command-line errors name options, the test run names its servers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import queuecore
from queuecore.cli.main import main

REPO = Path(__file__).resolve().parents[2]
REFUSED = "postgresql+psycopg://postgres@127.0.0.1:1/queuecore"


@pytest.fixture(autouse=True)
def no_dsn_from_the_shell(monkeypatch):
    monkeypatch.delenv("QUEUECORE_DSN", raising=False)


def test_a_refused_connection_keeps_the_drivers_hint_on_one_line(capsys):
    assert main(["stats", "--dsn", REFUSED]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"queuecore stats: cannot open the database {REFUSED}: ")
    assert "Connection refused Is the server running on that host and accepting TCP/IP " in line
    assert line.endswith(
        "connections? Check that the server is running (or the file's "
        "folder exists) and the DSN is right."
    )


def test_a_refused_connection_from_python_says_the_same(capsys):
    with pytest.raises(queuecore.DatabaseUnreachableError, match="Is the server running"):
        queuecore.connect(REFUSED)


@pytest.mark.parametrize("driver", ["psycopg2", "asyncpg", "pg8000"])
def test_other_postgresql_drivers_are_told_which_one_queuecore_takes(driver):
    with pytest.raises(ValueError) as caught:
        queuecore.connect(f"postgresql+{driver}://app@db.internal/app")
    assert str(caught.value) == (
        f"postgresql+{driver}://app@db.internal/app: queuecore's PostgreSQL backend runs on "
        f"psycopg 3 only, not on {driver!r}; write the DSN as postgresql+psycopg://... "
        "(or postgresql://..., which means the same here)"
    )


def test_the_postgres_scheme_of_hosting_providers_is_taken(scratch_databases):
    dsn = scratch_databases.create()
    short = "postgres://" + dsn.split("://", 1)[1]
    assert main(["migrate", "--dsn", short]) == 0
    with queuecore.connect(short) as queue:
        assert queue.engine.url.drivername == "postgresql+psycopg"
        assert queue.get(queue.enqueue("a", {}).id).state == "queued"


def test_two_slashes_in_an_sqlite_dsn_are_explained(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as caught:
        queuecore.connect("sqlite://jobs.db")
    assert str(caught.value) == (
        "sqlite://jobs.db names no file: with two slashes 'jobs.db' is read as a host, and "
        "SQLite has none. A file in the working directory is sqlite:///jobs.db (three "
        "slashes); an absolute path is sqlite:////var/lib/app/jobs.db (four)"
    )
    assert list(tmp_path.iterdir()) == []


def test_command_line_errors_name_the_option_not_the_parameter(tmp_path, capsys):
    dsn = f"sqlite:///{tmp_path / 'jobs.db'}"
    worker = ["worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn]
    assert main([*worker, "--lease-seconds", "0"]) == 2
    assert capsys.readouterr().err.startswith(
        "queuecore worker: --lease-seconds must be a positive number of seconds"
    )
    assert main([*worker, "--backoff-cap", "-1"]) == 2
    assert "--backoff-cap must be a non-negative number" in capsys.readouterr().err
    assert main(["purge", "--dsn", dsn, "--older-than", "-5"]) == 2
    assert "--older-than must be a non-negative number" in capsys.readouterr().err


def test_the_license_file_is_the_one_pyproject_names():
    declared = re.search(r'^license = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)[1]
    text = (REPO / "LICENSE").read_text()
    assert declared == "MIT"
    assert text.startswith("MIT License\n\nCopyright (c) ")
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_the_test_run_says_which_postgresql_and_sqlite_it_used(postgres_server):
    """A run of one PostgreSQL test, in a pytest of its own: the header names the SQLite
    driver, the summary the PostgreSQL server (password hidden) and its version."""
    env = {**os.environ, "QUEUECORE_TEST_POSTGRES_DSN": postgres_server}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "tests/swap/test_options.py::test_a_queue_made_from_a_dsn_disposes_its_own_engine",
            "-k",
            "postgresql",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout
    assert re.search(
        r"^queuecore SQLite driver: \w+ \(SQLite \d+\.\d+\.\d+\)$", result.stdout, re.M
    )
    host = postgres_server.split("@", 1)[1]
    assert re.search(
        rf"^PostgreSQL used: postgresql\+psycopg://\S*{re.escape(host)} "
        r"\(server \d+",
        result.stdout,
        re.M,
    ), result.stdout
