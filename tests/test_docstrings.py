"""Every public function, class and method of the public API says what it does in a
docstring (issue 31): the API reference on the docs site is built from them, and a
method documented by a rule id alone tells a user nothing."""

from __future__ import annotations

import inspect
import re

import queuecore

#: Type aliases: documented where they are defined, not on the object itself.
ALIASES = {"Effect", "AsyncEffect", "Handler"}
RULE_ONLY = re.compile(r"^\W*(R\d\d|W\d+)\b")


def public_callables():
    for name in sorted(set(queuecore.__all__) - ALIASES - {"__version__"}):
        obj = getattr(queuecore, name)
        yield name, obj
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if member.startswith("_"):
                    continue
                function = value.fget if isinstance(value, property) else value
                function = getattr(function, "__func__", function)
                if inspect.isfunction(function):
                    yield f"{name}.{member}", function


def test_every_public_function_and_method_has_a_docstring_in_words():
    lacking = [
        name
        for name, obj in public_callables()
        if len((inspect.getdoc(obj) or "").split()) < 4
        or RULE_ONLY.match(inspect.getdoc(obj) or "")
    ]
    assert lacking == []
