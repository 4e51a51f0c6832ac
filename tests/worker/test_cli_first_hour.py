"""The command line a new user meets in the first hour (issue 31): `--version`, `show`,
`enqueue --file`, "did you mean" for a mistyped option, help and a default for every
option, plain ranges, the same common options on every command, and the worker's one
line about ready jobs it will never claim."""

from __future__ import annotations

import argparse
import json
import time
from importlib.metadata import version

import pytest

import queuecore
from queuecore.cli.main import HelpFormatter, build_parser, main
from queuecore.conformance.helpers import all_rows
from tests.worker.processes import run_queuecore


@pytest.fixture(autouse=True)
def no_dsn_from_the_shell(monkeypatch):
    monkeypatch.delenv("QUEUECORE_DSN", raising=False)


def commands(parser: argparse.ArgumentParser, prog: str = "queuecore"):
    """(name, parser) of every command and subcommand, leaves and groups alike."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prog} {name}", sub
                yield from commands(sub, f"{prog} {name}")


def test_version_is_the_installed_release(capsys):
    assert queuecore.__version__ == version("queuecore")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"queuecore {queuecore.__version__}"


def test_a_mistyped_option_gets_a_did_you_mean_from_its_command(capsys):
    assert main(["worker", "m:R", "--concurency", "4"]) == 2
    err = capsys.readouterr().err
    assert "did you mean --concurrency?" in err
    assert err.startswith("usage: queuecore worker")  # the command's usage, not the top's
    assert main(["dead", "list", "--limt", "3"]) == 2
    assert "did you mean --limit?" in capsys.readouterr().err
    assert main(["stat"]) == 2  # a mistyped command too
    assert "did you mean 'stats'?" in capsys.readouterr().err
    assert main(["stats", "--xyzzy"]) == 2  # nothing close: no guess
    err = capsys.readouterr().err
    assert "unrecognized arguments: --xyzzy" in err and "did you mean" not in err


def test_every_option_has_help_and_says_its_default():
    formatter = HelpFormatter("queuecore")
    missing = []
    for name, parser in commands(build_parser()):
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            text = formatter._get_help_string(action)
            flag = isinstance(action, (argparse._StoreTrueAction, argparse._VersionAction))
            if not text or (not flag and "default" not in text.lower()):
                missing.append(f"{name} {action.option_strings[-1]}: {text!r}")
    assert missing == []


def test_every_command_that_opens_a_queue_takes_the_common_options():
    common = {"--dsn", "--dsn-file", "--sqlite-driver"}
    # copy names its two databases --from and --to; demo makes a database of its own.
    ask = {"queuecore copy": {"--from", "--from-file", "--to", "--to-file", "--sqlite-driver"}}
    lacking = {}
    for name, parser in commands(build_parser()):
        if name == "queuecore demo" or any(
            isinstance(a, argparse._SubParsersAction) for a in parser._actions
        ):
            continue
        options = {o for a in parser._actions for o in a.option_strings}
        if not ask.get(name, common) <= options:
            lacking[name] = sorted(ask.get(name, common) - options)
    assert lacking == {}


def test_a_range_error_says_the_bound_in_plain_words(capsys, dsn):
    args = ["worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn, "--concurrency", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--concurrency must be an integer of at least 1, got 0" in err
    assert "9223372036854775807" not in err
    assert main(["enqueue", "k", "--dsn", dsn, "--max-attempts", "3000000000"]) == 2
    assert "no greater than 2,147,483,647" in capsys.readouterr().err


def test_show_prints_state_attempts_errors_and_result(capsys, queue, dsn):
    job_id = queue.enqueue("report", {"month": "2026-11"}, max_attempts=3).id
    [job] = queue.claim("w1")
    assert queue.fail(job, "ValueError: no sales yet", retry_in=0) == "queued"
    [job] = queue.claim("w1")
    assert queue.complete(job, result={"rows": 12})

    assert main(["show", str(job_id), "--dsn", dsn, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["state"], shown["attempts"], shown["result"]) == ("done", 2, {"rows": 12})
    assert [(e["attempt"], e["error"]) for e in shown["errors"]] == [
        (1, "ValueError: no sales yet")
    ]
    assert shown["payload"] == {"month": "2026-11"} and shown["finished_at"]

    assert main(["show", str(job_id), "--dsn", dsn]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"job {job_id}: done")
    assert "attempts    2 of 3" in text and '{"rows": 12}' in text
    assert "attempt 1 at" in text and "ValueError: no sales yet" in text

    assert main(["show", "999999", "--dsn", dsn]) == 1
    assert "no job 999999" in capsys.readouterr().err


def test_show_says_what_the_jobs_time_means_in_its_state(capsys, queue, dsn):
    """visible_at is when a queued job may run and when a running one's lease ends; a
    finished job's still holds its last lease's end, which `show` leaves out."""
    queued = queue.enqueue("report", {}).id
    assert main(["show", str(queued), "--dsn", dsn]) == 0
    text = capsys.readouterr().out
    assert "runs from" in text and "lease ends" not in text
    [job] = queue.claim("w1")
    assert main(["show", str(queued), "--dsn", dsn]) == 0
    text = capsys.readouterr().out
    assert "lease ends" in text and "runs from" not in text
    assert queue.complete(job)
    assert main(["show", str(queued), "--dsn", dsn]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"job {queued}: done")
    assert "runs from" not in text and "lease ends" not in text


def test_enqueue_file_takes_2000_payloads_in_batches(capsys, tmp_path, queue, dsn):
    lines = [json.dumps({"n": n}) for n in range(2000)]
    path = tmp_path / "payloads.jsonl"
    path.write_text("\n".join(lines[:1000]) + "\n\n" + "\n".join(lines[1000:]) + "\n")
    began = time.monotonic()
    args = ["enqueue", "tally", "--dsn", dsn, "--file", str(path), "--queue", "bulk"]
    assert main(args) == 0
    took = time.monotonic() - began
    out = capsys.readouterr()
    ids = [int(line) for line in out.out.split()]
    assert len(ids) == len(set(ids)) == 2000
    assert "enqueued 2000 job(s)" in out.err
    assert [queue.get(i).payload["n"] for i in (ids[0], ids[999], ids[-1])] == [0, 999, 1999]
    assert queue.stats("bulk")["queued"] == 2000
    print(f"2000 payloads through enqueue --file in {took:.2f} s")  # shown with -s


@pytest.mark.parametrize(
    ("content", "extra", "says"),
    [
        ('{"a": 1}\n{not json\n', [], "line 2 is not JSON"),
        ('{"a": 1}\n[1]\n', [], "line 2 is not a JSON object"),
        ('{"a": 1}\n', ["--dedupe-key", "k"], "not with --file"),
        ('{"a": 1}\n', ["--payload", "{}"], "not allowed with argument --file"),
    ],
)
def test_a_bad_file_writes_nothing_and_exits_2(capsys, tmp_path, dsn, content, extra, says):
    import sqlalchemy as sa

    path = tmp_path / "payloads.jsonl"
    path.write_text(content)
    assert main(["enqueue", "k", "--dsn", dsn, "--file", str(path), *extra]) == 2
    assert says in capsys.readouterr().err
    engine = sa.create_engine(dsn)
    try:
        assert all_rows(engine) == {}
    finally:
        engine.dispose()


def test_enqueue_file_reads_stdin(queue, dsn):
    done = run_queuecore(
        "enqueue", "tally", "--dsn", dsn, "--file", "-", input='{"n": 1}\n{"n": 2}\n'
    )
    assert done.returncode == 0, done.stderr
    assert [queue.get(int(i)).payload for i in done.stdout.split()] == [{"n": 1}, {"n": 2}]


@pytest.mark.parametrize(
    "registry",
    ["tests.worker.handlers:REGISTRY", "tests.worker.async_handlers:REGISTRY"],
    ids=["sync", "async"],
)
def test_an_idle_worker_names_the_ready_jobs_it_will_not_claim(make_queue, dsn, registry):
    queue = make_queue(clock=None)
    queue.enqueue("quick", {}, queue="reports")
    queue.enqueue("quick", {}, queue="reports")
    queue.enqueue("build_pdf", {}, queue="default")  # no handler in this registry
    done = run_queuecore(
        "worker",
        registry,
        "--dsn",
        dsn,
        "--queues",
        "default",
        "--exit-when-idle",
        "1.5",
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "ready jobs wait" in line]
    assert len(said) == 1, done.stderr  # once, not once per poll
    assert "queues it does not serve: reports (2)" in said[0]
    assert "kinds it has no handler for: build_pdf (1)" in said[0]


def test_a_worker_serving_everything_ready_says_nothing(make_queue, dsn):
    queue = make_queue(clock=None)
    queue.enqueue("quick", {})
    done = run_queuecore(
        "worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn, "--exit-when-idle", "0.5"
    )
    assert done.returncode == 0, done.stderr
    assert "ready jobs wait" not in done.stderr
