"""The explorer never fails on a machine lint accepts: every shipped machine with any one transition's
guards (or recheck) removed is explored to a verdict, never an exception."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner.data import data_dir
from runner.definitions.library import Library
from runner.proof import CheckOptions, check_machine

SHIPPED = sorted(p.stem for p in data_dir("machines").glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_a_machine_without_any_one_guard_list_is_explored_to_a_verdict(name: str) -> None:
    spec = Library().builtin(name)
    caught = 0
    for t in spec.transitions:
        for loosened in (replace(t, guards=()), replace(t, recheck=())):
            if loosened == t:
                continue
            mutant = replace(spec, transitions=tuple(loosened if x is t else x for x in spec.transitions))
            result = check_machine(mutant, CheckOptions(actors=2, budget=20_000))
            caught += bool(result.violations)
            for violation in result.violations:
                assert violation.path, violation.invariant.name  # a trace, replayed to the end
    assert caught > 0, f"no loosened {name} broke any invariant: the invariants say too little"
