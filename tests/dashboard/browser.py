"""A real dashboard process and a real browser for the tests: Debian's chromium, headless,
driven by Selenium through Debian's chromium-driver (.ci/run installs both; nothing is
downloaded: both paths are given, so Selenium Manager never runs)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.worker.processes import REPO, queuecore_env, queuecore_process, reaped

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def dashboard(dsn: str, log: Path, *options: str) -> Iterator[str]:
    """`queuecore dashboard` on a free loopback port; yields its base URL once it answers."""
    port = free_port()
    args = ("dashboard", "--dsn", dsn, "--port", str(port), "--log-level", "warning", *options)
    with queuecore_process(*args, log=log) as proc:
        yield from _answering(proc, f"http://127.0.0.1:{port}", "/static/style.css", log)


@contextmanager
def mounted(dsn: str, log: Path) -> Iterator[str]:
    """tests/dashboard/mounted_app.py (the dashboard under `/queue` in a FastAPI app) in
    uvicorn on a free loopback port; yields the application's base URL once it answers."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "tests.dashboard.mounted_app:app"]
    command += ["--port", str(port), "--log-level", "warning"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env={**queuecore_env(), "QUEUECORE_DSN": dsn},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    with reaped(proc):
        yield from _answering(proc, f"http://127.0.0.1:{port}", "/queue/static/style.css", log)


def _answering(proc: subprocess.Popen[bytes], base: str, probe: str, log: Path) -> Iterator[str]:
    """`base` once `probe` answers there, until the caller is done; then the server ends."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"the server ended early:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no answer; it said:\n{log.read_text()}"
        try:
            urllib.request.urlopen(base + probe, timeout=2).close()
            break
        except urllib.error.HTTPError:  # it answers (asking for its token, say)
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    try:
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def post(url: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> int:
    """A form POST as another site (or a script) would send it: the status it got."""
    body = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def get(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def start_chromium():  # -> selenium.webdriver.Chrome
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(str(p)) is None]
    assert not missing, (
        f"the browser tests need Debian's chromium and chromium-driver (missing: {missing}): "
        "apt-get install -y chromium chromium-driver"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
