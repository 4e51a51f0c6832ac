"""docs/contract.md and the test suite name the same rules: every rule of the contract has
a test named after it (`test_r09_…`, `test_w4_…`), and no test names a rule the contract
does not have. A rule added to one side only, or a test renamed away from its rule, fails
here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTRACT = REPO / "docs" / "contract.md"

RULE_ROW = re.compile(r"^\| (R\d\d|W\d+) \|", re.MULTILINE)
TEST_NAME = re.compile(r"^\s*(?:async )?def test_([rw])(\d+)_", re.MULTILINE)


def contract_rules() -> list[str]:
    return RULE_ROW.findall(CONTRACT.read_text(encoding="utf-8"))


def rules_named_by_tests() -> dict[str, list[str]]:
    """Rule id -> the test files that name it, in the contract's spelling (R09, W4)."""
    named: dict[str, list[str]] = {}
    suites = [REPO / "tests", REPO / "queuecore" / "conformance"]  # the kit's suite too
    for path in sorted(p for suite in suites for p in suite.rglob("test_*.py")):
        for letter, number in TEST_NAME.findall(path.read_text(encoding="utf-8")):
            width = 2 if letter == "r" else 1
            rule = f"{letter.upper()}{int(number):0{width}d}"
            named.setdefault(rule, []).append(str(path.relative_to(REPO)))
    return named


def test_the_contract_has_every_rule_once() -> None:
    rules = contract_rules()
    expected = [f"R{n:02d}" for n in range(1, 37)] + [f"W{n}" for n in range(1, 11)]
    assert sorted(rules) == sorted(expected)


def test_every_rule_has_a_test_named_after_it() -> None:
    untested = set(contract_rules()) - set(rules_named_by_tests())
    assert not untested, f"no test_<rule>_… for {sorted(untested)}"


def test_no_test_names_a_rule_the_contract_lacks() -> None:
    unknown = {
        rule: files
        for rule, files in rules_named_by_tests().items()
        if rule not in set(contract_rules())
    }
    assert not unknown, f"tests name rules docs/contract.md does not have: {unknown}"
