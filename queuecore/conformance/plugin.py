"""The conformance kit's pytest plugin, loaded by pytest itself (the `pytest11` entry point)
once queuecore is installed. It stays out of the way until a run names its backends:

    pytest --pyargs queuecore.conformance --queuecore-backends sqlite,mybackend

(or `queuecore_backends = ...` in the ini file). Then it registers the kit's fixtures
(`queuecore.conformance.fixtures`) and parametrizes `backend` over the named harnesses
(`queuecore.conformance.harness`), each started once for the session when a test first
needs it; a test for a capability (`@pytest.mark.requires("listen")`) is made only for
the harnesses that declare it. A harness that cannot run here skips its tests and says
so in a banner at the end, unless the run requires it (`--queuecore-require NAME,...`,
or `QUEUECORE_REQUIRE_BACKENDS`), which turns that into a failure.

Under pytest-xdist each worker process starts its own harnesses (each server harness
makes databases of its own), and tells the controller what they said, so the banner
still ends the run. Tests marked `slow` are handed out first, so that a parallel run does
not end waiting for one long test that started last.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from queuecore.conformance.harness import harness_classes
from queuecore.conformance.session import HARNESSES, Harnesses

ENV_REQUIRE = "QUEUECORE_REQUIRE_BACKENDS"
#: The one each CI has always set, kept: it requires the postgresql harness.
ENV_REQUIRE_POSTGRES = "QUEUECORE_REQUIRE_POSTGRES"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("queuecore", "queuecore's conformance kit")
    group.addoption(
        "--queuecore-backends",
        help="comma-separated harnesses to run the kit's fixtures on (entry points "
        "queuecore.harnesses); off unless given here or in the ini file",
    )
    group.addoption(
        "--queuecore-require",
        help="comma-separated harnesses that must run: unavailable, a failure, not a skip",
    )
    parser.addini("queuecore_backends", "the default of --queuecore-backends", default="")


def _names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requires(capability): the test needs what some databases cannot do"
    )
    config.addinivalue_line(
        "markers", "postgresql_only: the test checks something only PostgreSQL has"
    )
    config.addinivalue_line("markers", "mariadb_only: the test checks something only MariaDB has")
    config.addinivalue_line(
        "markers", "slow: a long test, started before the others so a parallel run ends sooner"
    )
    names = _names(config.getoption("--queuecore-backends") or config.getini("queuecore_backends"))
    if not names:
        if _runs_the_kit(config):
            raise pytest.UsageError(
                "the conformance kit runs on the backends you name: --queuecore-backends "
                f"NAME[,NAME] (installed: {', '.join(sorted(harness_classes())) or 'none'})"
            )
        return
    known = harness_classes()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise pytest.UsageError(
            f"no queuecore harness named {', '.join(unknown)} (installed: "
            f"{', '.join(sorted(known)) or 'none'})"
        )
    required = set(_names(config.getoption("--queuecore-require")))
    required |= set(_names(os.environ.get(ENV_REQUIRE)))
    if os.environ.get(ENV_REQUIRE_POSTGRES) == "1":
        required.add("postgresql")
    harnesses = Harnesses({name: known[name] for name in names}, required)
    config.stash[HARNESSES] = harnesses
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(WorkerRelay(harnesses), "queuecore-worker-relay")
    from queuecore.conformance import fixtures

    config.pluginmanager.register(fixtures, "queuecore-conformance-fixtures")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `slow` tests first, each group in the order it was collected in."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _runs_the_kit(config: pytest.Config) -> bool:
    """Whether the run collects the kit's suite (by `--pyargs` or by its folder)."""
    kit = Path(__file__).resolve().parent
    for arg in config.args:
        if arg.split("::")[0] == "queuecore.conformance":
            return True
        path = Path(arg.split("::")[0]).resolve()
        if path == kit or kit in path.parents:
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`backend`, over this run's harnesses that have what the test `requires`: a test
    for a capability no harness of the run declares is not made for it (nor skipped),
    as a test that parametrizes `backend` itself names the one backend it is about."""
    harnesses = metafunc.config.stash.get(HARNESSES, None)
    if harnesses is None or "backend" not in metafunc.fixturenames:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        named = marker.args[0]
        if "backend" in (named.replace(" ", "").split(",") if isinstance(named, str) else named):
            return
    needed = {c for marker in metafunc.definition.iter_markers("requires") for c in marker.args}
    names = [n for n, kind in harnesses.classes.items() if needed <= kind.capabilities]
    metafunc.parametrize("backend", names)


#: The key of what an xdist worker's harnesses said, in the output it hands its controller.
WORKER_OUTPUT = "queuecore_harnesses"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand the controller what this process's harnesses said."""
    harnesses = session.config.stash.get(HARNESSES, None)
    output = getattr(session.config, "workeroutput", None)
    if harnesses is not None and output is not None:
        output[WORKER_OUTPUT] = {
            "described": harnesses.described,
            "unavailable": harnesses.unavailable,
        }


class WorkerRelay:
    """On the xdist controller: what each worker's harnesses said joins the run's own
    summary (registered only where xdist runs)."""

    def __init__(self, harnesses: Harnesses) -> None:
        self.harnesses = harnesses

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        said = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
        if said is None:
            return
        described = self.harnesses.described
        described.extend(line for line in said["described"] if line not in described)
        self.harnesses.unavailable.update(said["unavailable"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Which servers ran; and a skipped backend must not pass unnoticed among the dots."""
    harnesses = terminalreporter.config.stash.get(HARNESSES, None)
    if harnesses is None:
        return
    for said in harnesses.described:
        terminalreporter.write_line(said)
    for name, why in harnesses.unavailable.items():
        terminalreporter.section(f"{name} did not run", sep="!", red=True, bold=True)
        terminalreporter.write_line(
            f"NO {name.upper()}: the {name} half of the suite cannot run: {why}",
            red=True,
            bold=True,
        )
