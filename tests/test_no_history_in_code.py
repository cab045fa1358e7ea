"""History lives in ``docs/changes.md``, not in the code: no module of ``runner/`` names an issue number."""

from __future__ import annotations

import re
from pathlib import Path

RUNNER = Path(__file__).resolve().parent.parent / "runner"
ISSUE = re.compile(r"\b[Ii]ssues? \d+\b")


def test_no_module_of_runner_names_an_issue() -> None:
    modules = sorted(RUNNER.rglob("*.py"))
    assert len(modules) > 100  # the tree really is read: this test is not vacuous
    found = [
        f"{path.relative_to(RUNNER.parent)}:{n}: {line.strip()}"
        for path in modules
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE.search(line)
    ]
    assert not found, "history belongs in docs/changes.md:\n" + "\n".join(found)


def test_the_check_finds_an_issue_number() -> None:
    assert ISSUE.search("a fence (issue 24) checked") and not ISSUE.search("issues of a lease")
