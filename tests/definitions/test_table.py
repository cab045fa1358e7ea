"""The transition table chooses as ``transitions`` itself would (issue 13: the renew path's CPU).

``TransitionTable.fire`` evaluates the candidates the ``transitions.Machine`` holds for a trigger and
a state without moving a model through the machine. These tests hold it to the library's own
answers: on every shipped machine (the candidates are the spec's), and on generated machines with
guards whose verdicts are drawn at random, against a plain ``transitions.Machine`` built in the test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transitions import EventData, Machine

from runner.context import Context, Instance, Rejection
from runner.definitions.library import Library
from runner.definitions.model import MachineSpec
from runner.definitions.table import TransitionTable
from runner.guards import GUARDS
from tests.support.examples import examples

GUARD_NAMES = ("test_table_a", "test_table_b", "test_table_c")
STATES = ("s0", "s1", "s2")
TRIGGERS = ("go", "stop")


def _verdict_guard(name: str) -> Any:
    def guard(ctx: Context) -> Rejection | None:
        """Passes when the test's verdicts say so."""
        return None if ctx.params["verdicts"][name] else Rejection(f"{name}_refused", f"{name} said no")

    return guard


for _name in GUARD_NAMES:
    GUARDS.add(_name, _verdict_guard(_name))


def _context(verdicts: dict[str, bool]) -> Context:
    instance = Instance("m/1", "m", "s0", 1, {})
    return Context(
        instance=instance,
        trigger="go",
        params={"verdicts": verdicts},
        secrets={},
        observations={},
        now=datetime.now(UTC),
        view=None,  # type: ignore[arg-type]  # the verdict guards read no store
        actor="test",
    )


def test_candidates_are_the_specs_on_every_shipped_machine() -> None:
    library = Library()
    for path in library.builtin_paths():
        spec = library.load(path)
        table = TransitionTable(spec)
        for trigger in spec.triggers():
            for state in spec.states:
                expected = tuple(spec.transitions_for(trigger, state))
                assert table.candidates(trigger, state) == expected, (spec.name, trigger, state)
                assert table.allows(trigger, state) == bool(expected)
        assert not table.allows("no_such_trigger", spec.initial)


transition_docs = st.lists(
    st.fixed_dictionaries(
        {
            "trigger": st.sampled_from(TRIGGERS),
            "source": st.lists(st.sampled_from(STATES), min_size=1, max_size=3, unique=True),
            "dest": st.sampled_from(STATES),
            "guards": st.lists(st.sampled_from(GUARD_NAMES), max_size=3),
        }
    ),
    min_size=1,
    max_size=6,
)


def _spec(transitions: list[dict[str, Any]]) -> MachineSpec:
    doc = {
        "machine": "m",
        "version": 1,
        "description": "generated",
        "initial": "s0",
        "states": {name: {"description": name} for name in STATES},
        "transitions": transitions,
    }
    return MachineSpec.from_document(doc, "generated.yaml", "0" * 64)


def _oracle(spec: MachineSpec, trigger: str, state: str, verdicts: dict[str, bool]) -> tuple[int | None, list[str]]:
    """What a plain ``transitions.Machine`` takes, and which guards refused on the way."""
    refused: list[str] = []
    taken: list[int] = []

    def condition(name: str) -> Any:
        def check(event: EventData) -> bool:
            if verdicts[name]:
                return True
            refused.append(name)
            return False

        return check

    def after(index: int) -> Any:
        return lambda event: taken.append(index)

    class Model:
        pass

    model = Model()
    machine = Machine(
        model=model,
        states=list(STATES),
        transitions=[
            {
                "trigger": t.trigger,
                "source": list(t.sources),
                "dest": t.dest,
                "conditions": [condition(ref.name) for ref in t.guards],
                "after": [after(t.index)],
            }
            for t in spec.transitions
        ],
        initial=state,
        auto_transitions=False,
        send_event=True,
    )
    machine.events[trigger].trigger(model)
    return (taken[0] if taken else None), refused


@settings(max_examples=examples(300), deadline=None)
@given(
    transitions=transition_docs,
    verdicts=st.fixed_dictionaries({name: st.booleans() for name in GUARD_NAMES}),
)
def test_fire_chooses_as_transitions_does(transitions: list[dict[str, Any]], verdicts: dict[str, bool]) -> None:
    spec = _spec(transitions)
    table = TransitionTable(spec)
    for trigger in {t.trigger for t in spec.transitions}:
        for state in STATES:
            if not table.allows(trigger, state):
                assert not spec.transitions_for(trigger, state)
                continue
            firing = table.fire(trigger, state, _context(verdicts))
            expected_index, expected_refused = _oracle(spec, trigger, state, verdicts)
            assert (firing.chosen.index if firing.chosen else None) == expected_index
            assert [name for name, _ in firing.rejections] == expected_refused
            assert [r.code for _, r in firing.rejections] == [f"{name}_refused" for name in expected_refused]


def test_the_machine_built_on_first_use_holds_the_tables_routes_and_the_outcome_edges() -> None:
    """The table's routes come from the spec, not from a ``transitions.Machine`` (a renew never imports
    transitions); the machine, built when first asked for, holds exactly those candidates per trigger
    and source, in the same order, and the outcome edges of two-phase transitions besides."""
    library = Library()
    for path in library.builtin_paths():
        spec = library.load(path)
        table = TransitionTable(spec)
        assert "machine" not in vars(table)  # not built by the table itself
        seen = set()
        for trigger, event in table.machine.events.items():
            for source, candidates in event.transitions.items():
                chosen = [a.spec for c in candidates for a in c.after if hasattr(a, "spec")]
                if ":" in trigger:
                    assert not chosen and trigger.split(":")[1] in ("success", "failure", "ambiguous")
                    continue
                seen.add((trigger, source))
                assert tuple(chosen) == table.candidates(trigger, source), (spec.name, trigger, source)
        expected = {(t.trigger, s) for t in spec.transitions for s in t.sources}
        assert seen == expected
        for t in spec.transitions:
            for outcome, dest in t.outcome_edges():
                if dest != t.dest:
                    edge = table.machine.events[f"{t.trigger}:{outcome}"].transitions[t.dest]
                    assert dest in [c.dest for c in edge]


def test_a_trigger_without_a_route_is_refused_by_the_machine_as_before() -> None:
    """``fire`` for a (trigger, state) the table holds no route for goes to the ``transitions.Machine``
    (built then), which refuses it as it always did."""
    from transitions import MachineError

    spec = _spec([{"trigger": "go", "source": ["s0"], "dest": "s1"}])
    table = TransitionTable(spec)
    assert "machine" not in vars(table)
    assert table.fire("go", "s0", _context({})).chosen is spec.transitions[0]
    assert "machine" not in vars(table), "a route fires without the machine"
    with pytest.raises(MachineError):
        table.fire("go", "s1", _context({}))
    assert "machine" in vars(table)
