"""Text from the queue, made safe to print on a terminal.

A kind, a queue name or an error text is whatever a producer or a handler wrote (R29
refuses control characters in new names, but a database may hold older ones, and an
error text may hold anything). Printed raw, an escape sequence in it could restyle the
terminal, move the cursor over earlier lines, retitle the window, or forge a log line
after a newline. Every line queuecore prints for a person goes through `printable`;
`--json` and the dashboard escape in their own formats.
"""

from __future__ import annotations

import re

# C0 but tab, DEL, C1; and the Unicode characters that reorder or break a line on screen.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_BUT_NEWLINE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` on one line with every control character written as an escape (ESC as
    \\x1b, a newline as \\x0a); tabs are kept."""
    if text.isprintable():  # holds none of them (each is unprintable to Python)
        return text
    return _UNSAFE.sub(_escape, text)


def printable_lines(text: str) -> str:
    """`printable`, keeping newlines: for a traceback, whose lines are its shape."""
    return _UNSAFE_BUT_NEWLINE.sub(_escape, text)
