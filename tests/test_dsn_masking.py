"""Every spelling of a DSN is shown without its secrets, in messages and on the command
line: a URL's password (with an unescaped '@' or '/' in it too), `?password=` in a query
string, a libpq conninfo string, and user names with unusual characters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import make_url

from queuecore.cli.main import main
from queuecore.core import dsn
from queuecore.core.dsn import masked, secrets_of, shown

SECRET = "Sekr1t"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"postgresql://app:{SECRET}@db/jobs", "postgresql://app:***@db/jobs"),
        (f"postgresql://app:{SECRET}@x@db/jobs", "postgresql://app:***@db/jobs"),  # '@' in it
        (f"postgresql://app:{SECRET}/x@db/jobs?a=1", "postgresql://app:***@db/jobs?a=1"),
        (f"postgresql://app@db/jobs?password={SECRET}", "postgresql://app@db/jobs?password=***"),
        (
            f"postgresql://app@db/jobs?sslmode=require&PASSWORD={SECRET}&application_name=x",
            "postgresql://app@db/jobs?sslmode=require&PASSWORD=***&application_name=x",
        ),
        (
            f"host=db user=app password={SECRET} dbname=jobs",
            "host=db user=app password=*** dbname=jobs",
        ),
        (f"host=db password = '{SECRET} x' port=5432", "host=db password = *** port=5432"),
        (f"postgresql://us%40er%20x:{SECRET}@db/jobs", "postgresql://us%40er%20x:***@db/jobs"),
        (f"postgresql://us@er:{SECRET}@db/jobs", "postgresql://us@er:***@db/jobs"),
        (f"mariadb+mysqldb://ünï cödé:{SECRET}@db/jobs", "mariadb+mysqldb://ünï cödé:***@db/jobs"),
        (
            f"said: cannot use mysql://root:{SECRET}@db/x.",
            "said: cannot use mysql://root:***@db/x.",
        ),
        ("sqlite:////var/lib/app/jobs.db", "sqlite:////var/lib/app/jobs.db"),
        ("postgresql://app@db/jobs", "postgresql://app@db/jobs"),
    ],
)
def test_every_dsn_form_is_masked(text, expected):
    assert masked(text) == expected
    assert masked(masked(text)) == expected  # masking twice changes nothing more
    assert SECRET not in masked(text)


def test_a_url_is_shown_without_its_password_or_a_secret_in_its_query():
    url = make_url(f"postgresql+psycopg://us%40er:{SECRET}@db/jobs?password={SECRET}&sslmode=1")
    assert shown(url) == "postgresql+psycopg://us%40er:***@db/jobs?password=***&sslmode=1"
    assert secrets_of(url) == [SECRET, SECRET]


UNREACHABLE = [
    f"postgresql+psycopg://app:{SECRET}@127.0.0.1:1/jobs",
    f"postgresql+psycopg://app@127.0.0.1:1/jobs?password={SECRET}",
    f"postgresql+psycopg://app:{SECRET}@part@127.0.0.1:1/jobs",
    f"postgresql+psycopg://us%40er%20x:{SECRET}@127.0.0.1:1/jobs",
    f"host=127.0.0.1 port=1 password={SECRET}",
    f"mariadb+mysqldb://root:{SECRET}@127.0.0.1:1/test",
]


@pytest.mark.parametrize("dsn", UNREACHABLE)
def test_the_command_line_never_prints_a_password_back(dsn, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("QUEUECORE_DSN", raising=False)
    assert main(["stats", "--dsn", dsn]) in (1, 2)
    err = capsys.readouterr().err
    assert SECRET not in err and "part@" not in err, err
    assert "warning: --dsn holds a password" in err  # and says where it belongs
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(dsn)
    assert main(["stats", "--dsn-file", str(dsn_file)]) in (1, 2)
    err = capsys.readouterr().err
    assert SECRET not in err and "warning" not in err, err
    assert len(err.splitlines()) == 1


def test_copy_reads_both_dsns_from_files(tmp_path, capsys):
    source, target = tmp_path / "from", tmp_path / "to"
    source.write_text(f"sqlite:///{tmp_path / 'a.db'}\n")
    target.write_text(f"sqlite:///{tmp_path / 'b.db'}\n")
    assert main(["copy", "--from-file", str(source), "--to-file", str(target)]) == 0
    assert capsys.readouterr().out.startswith("copied 0 job(s)")
    assert main(["copy", "--from-file", str(tmp_path / "missing"), "--to-file", str(target)]) == 2
    assert "cannot read the DSN file" in capsys.readouterr().err


# Pieces that make the patterns match, or nearly: keys in any case, a long s (U+017F, which
# the patterns' case-blind matching reads as an "s"), separators and URL marks.
PIECES = ["password", "PassWd", "pwd", "\u017fecret", "pa\u017f\u017fword", "TOKEN", "api_key"]
PIECES += ["apiKey", "://", "=", " = ", "?", "&", ";", " ", "@", ":", "'", "é", "x", "db", "***"]


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.lists(st.sampled_from(PIECES), max_size=12).map("".join)))
def test_text_passed_over_as_holding_no_secret_is_what_the_patterns_leave_alone(text):
    """`masked` skips its patterns for text that cannot match them (the worker's line
    per job): it must answer exactly what the patterns would."""
    assert masked(text) == dsn._masked(text)
    if not dsn.may_hold_secret(text):
        assert masked(text) is text


@pytest.mark.parametrize("text", ["pa\u017f\u017fword=x", "host=db PWD=x", "a://b:c@d", "ApiKey=1"])
def test_text_that_may_hold_a_secret_is_looked_at(text):
    assert dsn.may_hold_secret(text)
    assert masked(text) != text
