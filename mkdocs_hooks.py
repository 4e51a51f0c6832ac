"""MkDocs hook: the command-line reference is generated from the parser itself, so the
page can never drift from what `queuecore COMMAND --help` prints. A page line
`<!-- queuecore-cli -->` becomes every command's help, in order."""

from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- queuecore-cli -->"


def _commands(parser: argparse.ArgumentParser, prog: str) -> list[tuple[str, str]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"{prog} {name}", sub.format_help()))
                found.extend(_commands(sub, f"{prog} {name}"))
    return found


def cli_reference() -> str:
    """Markdown: a section per command holding its --help, wrapped at 88 columns."""
    os.environ["COLUMNS"] = "88"  # argparse wraps to the terminal; a fixed width here
    os.environ.pop("QUEUECORE_DSN", None)  # defaults never show the builder's DSN
    from queuecore.cli.main import build_parser

    parts = []
    for name, text in _commands(build_parser(), "queuecore"):
        parts.append(f"### `{name}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
