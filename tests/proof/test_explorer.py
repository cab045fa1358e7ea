"""The explorer: every shipped machine keeps its invariants; broken copies are caught, minimally."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.data import data_dir
from runner.definitions.library import Library
from runner.definitions.model import MachineSpec
from runner.errors import InputError
from runner.guards import GUARDS
from runner.proof import FAULTS, CheckOptions, check_machine, result_document
from runner.proof.models import GUARD_MODELS, UPDATE_MODELS
from runner.proof.recipe import plan_of
from runner.registry import Registry
from runner.updates import UPDATES

SHIPPED = sorted(p.stem for p in data_dir("machines").glob("*.yaml"))


def spec_of(tmp_path: Path, name: str, old: str = "", new: str = "") -> MachineSpec:
    """The shipped machine ``name``, with ``old`` replaced by ``new``, loaded from a file of its own."""
    text = (data_dir("machines") / f"{name}.yaml").read_text()
    if old:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return Library().load(path)


def steps(spec: MachineSpec, invariant: str, **options: object) -> list[tuple[str, str, str]]:
    """(actor, action, trigger) of the counterexample of ``invariant``."""
    result = check_machine(spec, CheckOptions(**options))  # type: ignore[arg-type]
    doc = result_document(result, spec)
    broken = {v["invariant"]: v for v in doc["violations"]}
    assert invariant in broken, f"{invariant} not violated: {sorted(broken)}"
    return [(s["actor"], s["action"], s.get("trigger", "")) for s in broken[invariant]["steps"]]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_machine_keeps_its_invariants_with_three_actors_and_every_fault(name: str) -> None:
    spec = Library().builtin(name)
    result = check_machine(spec, CheckOptions(actors=3, faults=FAULTS))
    assert result.violations == [], [v.invariant.name for v in result.violations]
    assert result.stopped is None
    assert result.states > 10
    assert any(not i.builtin for i in result.invariants), "every shipped machine declares invariants"


def test_renew_without_its_fence_is_caught(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        "controller",
        "    guards:\n      - fence\n    updates:\n      - extend_lease",
        "    updates:\n      - extend_lease",
    )
    # A1 acquires; A2, holding nothing, renews A1's lease: two actors now think they hold it.
    assert steps(spec, "holder_only") == [("A1", "fire", "acquire"), ("A2", "fire", "renew")]
    assert steps(spec, "one_live_holder") == [("A1", "fire", "acquire"), ("A2", "fire", "renew")]


def test_a_takeover_of_a_live_lease_is_caught(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path, "controller", "      - lease_expired\n      - lease_predecessor", "      - lease_predecessor"
    )
    assert steps(spec, "one_live_holder") == [("A1", "fire", "acquire"), ("A2", "fire", "takeover")]


def test_the_shipped_takeover_needs_an_expiry_first() -> None:
    """With the expiry fault, a takeover is reachable, and still never makes two live holders."""
    spec = Library().builtin("controller")
    assert check_machine(spec, CheckOptions(faults=("expiry",))).violations == []


def test_a_relay_without_no_open_receipt_is_caught(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "receipt", "within_budget, no_open_receipt, agent_settled", "within_budget, agent_settled")
    trace = steps(spec, "one_open_receipt")
    # The lease, one relay, then a second relay while the first is unresolved.
    assert trace[0] == ("A1", "grant", "")
    assert [t for t in trace if t[1] == "fire"] == [("A1", "fire", "relay"), ("A1", "fire", "relay")]
    assert len(trace) == 4


def test_a_relay_without_its_recheck_fires_under_a_superseded_fence(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "receipt", "    recheck: [fence]\n", "")
    trace = steps(spec, "effects_fenced", faults=("pause", "expiry"))
    assert trace[-1][1:] == ("effect", "relay")
    assert ("clock", "expire", "") in trace
    # Without the pause fault the lease cannot expire between the intent and the effect.
    result = check_machine(spec, CheckOptions(faults=("expiry",)))
    assert "effects_fenced" not in [v.invariant.name for v in result.violations]


def test_a_retry_out_of_reserved_delivers_twice(tmp_path: Path) -> None:
    """An intermediate state must stay blocking: a machine that lets a reserved receipt go back and be
    relayed again delivers twice when the first delivery's outcome was never recorded."""
    redo = "  - trigger: redo\n    source: reserved\n    dest: absent\n    guards: [fence]\n  - trigger: relay\n"
    spec = spec_of(tmp_path, "receipt", "  - trigger: relay\n", redo)
    assert steps(spec, "delivered_once", faults=("crash",)) == [
        ("A1", "grant", ""),
        ("A1", "fire", "relay"),
        ("A1", "effect", "relay"),  # delivered; the outcome is ambiguous (or the process died): still reserved
        ("A1", "fire", "redo"),
        ("A1", "fire", "relay"),
        ("A1", "effect", "relay"),
    ]


def test_the_budget_stops_the_search_short() -> None:
    result = check_machine(Library().builtin("writer"), CheckOptions(budget=50))
    assert result.stopped == "budget"
    assert result.states == 50


def test_the_depth_stops_the_search_short() -> None:
    result = check_machine(Library().builtin("writer"), CheckOptions(depth=3))
    assert (result.stopped, result.depth) == ("depth", 3)


@pytest.mark.parametrize(
    ("options", "field", "code"),
    [
        ({"actors": 7}, "--actors", "check_limit"),
        ({"actors": 0}, "--actors", "check_limit"),
        ({"depth": 65}, "--depth", "check_limit"),
        ({"budget": 0}, "--budget", "check_limit"),
        ({"faults": ("crash", "meteor")}, "--faults", "fault_unknown"),
    ],
)
def test_limits_that_would_explode_are_refused(options: dict[str, object], field: str, code: str) -> None:
    with pytest.raises(InputError) as caught:
        CheckOptions(**options)  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.details["field"]) == (code, field)


def test_symmetric_actors_are_explored_once() -> None:
    """Sorting interchangeable actors keeps three actors close to two."""
    spec = Library().builtin("receipt")
    two = check_machine(spec, CheckOptions(actors=2)).states
    three = check_machine(spec, CheckOptions(actors=3)).states
    assert three < two * 3


def _builtin(registry: Registry[Any]) -> set[str]:
    return {n for n in registry.names() if _module(registry, n).startswith("runner.")}


def _module(registry: Registry[Any], name: str) -> str:
    entry = registry.get(name)
    assert entry is not None
    return str(getattr(entry.fn, "target", None) or entry.fn.__module__)


def test_every_built_in_guard_and_update_has_a_model() -> None:
    """A guard or update added to corral without an abstract model would be a silent free choice."""
    assert len(_builtin(GUARDS)) > 30
    assert sorted(_builtin(GUARDS) - set(GUARD_MODELS)) == []
    assert sorted(_builtin(UPDATES) - set(UPDATE_MODELS)) == []


def test_a_recipes_plan_records_each_step_in_order_by_its_runner() -> None:
    plan = plan_of(Library().builtin("plan"), "two", ["first", "second"])
    assert plan.name == "plan@two"
    steps = {t.trigger: (t.sources, t.dest) for t in plan.transitions if t.trigger.startswith("step:")}
    assert steps == {"step:first": (("running_0",), "running_1"), "step:second": (("running_1",), "running_2")}
    assert [t.sources for t in plan.transitions if t.trigger == "finish"] == [("running_2",)]
    result = check_machine(plan, CheckOptions())
    assert (result.violations, result.stopped) == ([], None)


def test_a_plan_whose_steps_need_no_runner_is_caught() -> None:
    plan = Library().builtin("plan")
    loose = replace(
        plan, transitions=tuple(replace(t, guards=()) if t.trigger == "step" else t for t in plan.transitions)
    )
    trace = steps(plan_of(loose, "two", ["first", "second"]), "steps_by_the_runner")
    # A1 runs the plan; A2, which never took it, records its first step.
    assert trace == [("A1", "fire", "submit"), ("A1", "fire", "start"), ("A2", "fire", "step:first")]


def test_a_plugin_guard_is_a_free_choice(tmp_path: Path) -> None:
    """A guard corral has no model of (a plugin's) may pass or fail: it cannot stand in for the fence."""
    from runner.guards import GUARDS

    plugin = next((n for n in GUARDS.names() if n not in GUARD_MODELS), None)
    if plugin is None:
        pytest.skip("no plugin guard is installed")
    spec = spec_of(tmp_path, "controller", "    guards:\n      - fence\n    updates:\n      - extend_lease",
                   f"    guards:\n      - {plugin}\n    updates:\n      - extend_lease")  # fmt: skip
    result = check_machine(spec, CheckOptions())
    doc = result_document(result, spec)
    broken = {v["invariant"]: v for v in doc["violations"]}
    assert broken["holder_only"]["steps"][1]["guards"] == [{"name": plugin, "outcome": "free"}]
