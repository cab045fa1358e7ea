"""The transition protocol: guards, updates, compare-and-set, and two-phase effects."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from runner.context import Context, EffectResult, Rejection, Update
from runner.definitions.library import Library
from runner.definitions.model import MachineSpec
from runner.effects import EFFECTS
from runner.engine import Engine, Request
from runner.errors import (
    AuthorityMovedError,
    ConflictError,
    CorralError,
    InvalidError,
    NotFoundError,
    OutcomeUnrecordedError,
    RefusedError,
    TransitionNotAllowedError,
)
from runner.guards import GUARDS
from runner.sql.store_sqlite import SQLiteStore
from runner.updates import UPDATES

# Test-only registry entries: the real registries, extended the way a plugin would.
calls: list[str] = []


def _effect(ctx: Context, outcome: str = "success") -> EffectResult:
    """Report whatever the request asks for (or raise), recording that it ran."""
    calls.append(f"effect:{ctx.instance.id}")
    wanted = ctx.params.get("outcome", outcome)
    if wanted == "raise":
        raise OSError("the world fell over")
    return EffectResult(wanted, data={"note": f"effect said {wanted}"}, reply={"handle": "h-1"})


def _needs_ok(ctx: Context) -> Rejection | None:
    """Pass only when the request says ok."""
    calls.append(f"guard:{ctx.trigger}")
    if ctx.params.get("fail_recheck") and calls.count(f"guard:{ctx.trigger}") > 1:
        return Rejection("not_ok", "changed my mind")
    return (
        None if ctx.params.get("ok") else Rejection("not_ok", "the request is not ok", {"seen": ctx.params.get("ok")})
    )


def _needs_flag(ctx: Context) -> Rejection | None:
    """Pass only when the instance data has flag set."""
    return None if ctx.data.get("flag") else Rejection("no_flag", "flag is not set")


def _count(ctx: Context, by: int = 1) -> Update:
    """Add ``by`` to count."""
    return Update(data={"count": int(ctx.data.get("count") or 0) + by}, reply={"secret": "s3cr3t"})


def _bad_write(ctx: Context) -> Update:
    """Write a field the machine does not declare."""
    return Update(data={"undeclared": 1})


EFFECTS.add("test_probe", _effect)
GUARDS.add("test_needs_ok", _needs_ok)
GUARDS.add("test_needs_flag", _needs_flag)
UPDATES.add("test_count", _count)
UPDATES.add("test_bad_write", _bad_write)

MACHINE = """\
# yaml-language-server: $schema=../schemas/machine.schema.json
machine: gadget
version: 1
description: A machine with a two-phase transition, for engine tests.
initial: off
states:
  off: {description: not started}
  starting: {description: start requested, intermediate: true}
  on: {description: running}
  broken: {description: the start failed, terminal: true}
  unsure: {description: nobody knows, terminal: true}
transitions:
  - trigger: start
    source: off
    dest: starting
    guards: [test_needs_ok]
    updates: [test_count]
    effects: [test_probe]
    recheck: [test_needs_ok]
    outcomes: {success: on, failure: broken}
  - trigger: poke
    source: on
    dest: on
    guards: [test_needs_flag]
    updates: [{name: test_count, with: {by: 10}}]
  - trigger: poke
    source: on
    dest: on
    guards: [test_needs_ok]
    updates: [test_count]
  - trigger: corrupt
    source: on
    dest: on
    updates: [test_bad_write]
  - trigger: gamble
    source: on
    dest: starting
    effects: [test_probe]
    outcomes: {success: on, failure: broken, ambiguous: unsure}
data:
  count: {type: integer}
  note: {type: string}
  flag: {type: boolean}
"""


@pytest.fixture
def gadget(tmp_path: Path) -> MachineSpec:
    path = tmp_path / "gadget.yaml"
    path.write_text(textwrap.dedent(MACHINE))
    return Library().load(path)


@pytest.fixture
def engine(store: SQLiteStore, library: Library) -> Engine:
    calls.clear()
    return Engine(store, library)


def fire(engine: Engine, spec: MachineSpec, trigger: str, **params: Any) -> Any:
    return engine.fire(spec, Request("gadget/1", trigger, params=params, actor="tester"))


def test_two_phase_success_records_intent_then_outcome(engine: Engine, gadget: MachineSpec, store: SQLiteStore) -> None:
    result = fire(engine, gadget, "start", ok=True)
    assert result.outcome == "success"
    assert result.instance.state == "on" and result.instance.version == 2
    assert dict(result.reply) == {"secret": "s3cr3t", "handle": "h-1"}
    assert calls == ["guard:start", "guard:start", "effect:gadget/1"]  # guard, recheck, effect
    events = store.events()
    assert [(e.trigger, e.from_state, e.to_state) for e in events] == [
        ("start", "off", "starting"),
        ("start:success", "starting", "on"),
    ]
    assert events[0].payload["phase"] == "intent" and events[1].payload["outcome"] == "success"
    assert "s3cr3t" not in str([e.to_dict() for e in events]), "reply values never reach the event log"
    assert result.instance.data == {"count": 1, "note": "effect said success"}


def test_two_phase_failure_goes_to_the_failure_state(engine: Engine, gadget: MachineSpec) -> None:
    result = fire(engine, gadget, "start", ok=True, outcome="failure")
    assert (result.outcome, result.instance.state) == ("failure", "broken")


@pytest.mark.parametrize("outcome", ["ambiguous", "raise", "nonsense"])
def test_ambiguous_effect_stays_in_the_intermediate_state(
    engine: Engine, gadget: MachineSpec, store: SQLiteStore, outcome: str
) -> None:
    result = fire(engine, gadget, "start", ok=True, outcome=outcome)
    assert result.outcome == "ambiguous"
    assert result.instance.state == "starting", "nothing is retried: reconcile decides"
    assert [e.trigger for e in store.events()] == ["start", "start:ambiguous"]


def test_ambiguous_outcome_can_name_its_own_state(engine: Engine, gadget: MachineSpec) -> None:
    fire(engine, gadget, "start", ok=True)
    result = fire(engine, gadget, "gamble", outcome="ambiguous")
    assert result.instance.state == "unsure"


def test_guard_refusal_writes_nothing(engine: Engine, gadget: MachineSpec, store: SQLiteStore) -> None:
    with pytest.raises(RefusedError) as caught:
        fire(engine, gadget, "start", ok=False)
    assert caught.value.code == "not_ok"
    assert caught.value.details["guard"] == "test_needs_ok" and caught.value.details["seen"] is False
    assert store.get("gadget/1") is None and store.events() == []
    assert "effect:gadget/1" not in calls


def test_recheck_failure_records_that_nothing_was_started(
    engine: Engine, gadget: MachineSpec, store: SQLiteStore
) -> None:
    with pytest.raises(AuthorityMovedError) as caught:
        fire(engine, gadget, "start", ok=True, fail_recheck=True)
    assert caught.value.code == "not_ok" and caught.value.details["started"] is False
    stored = store.get("gadget/1")
    assert stored is not None and stored.state == "broken", "certainly not started: the failure outcome"
    assert "effect:gadget/1" not in calls
    outcome = store.events()[-1]
    assert outcome.trigger == "start:failure" and outcome.payload["not_started"] == "not_ok"


def _gated_probe(ctx: Context) -> EffectResult:
    """Let the test move the world between the engine's check and the effect's own gate call."""
    calls.append("gated:before")
    hook = ctx.resources.get("between")
    if hook is not None:
        hook()
    assert ctx.gate is not None
    ctx.gate()
    calls.append("gated:acted")
    return EffectResult("success", data={"note": "acted"})


EFFECTS.add("test_gated_probe", _gated_probe)


@pytest.fixture
def gated(tmp_path: Path) -> MachineSpec:
    path = tmp_path / "gated.yaml"
    text = (
        textwrap.dedent(MACHINE)
        .replace("machine: gadget", "machine: gated")
        .replace("effects: [test_probe]\n    recheck", "effects: [test_gated_probe]\n    recheck")
    )
    path.write_text(text)
    return Library().load(path)


def test_the_gate_at_the_effect_sees_the_instance_moved(engine: Engine, gated: MachineSpec, store: SQLiteStore) -> None:
    """An instance moved between intent and effect (an abandon): the effect does not act, and the caller
    is told nothing was done, never a bare version conflict."""

    def move() -> None:
        with store.write() as tx:
            current = tx.get("gated/1")
            assert current is not None
            moved = tx.put(current, "unsure", current.data)
            tx.append(moved, "meddle", current.state, "other", {})

    request = Request("gated/1", "start", params={"ok": True}, actor="t", resources={"between": move})
    with pytest.raises(AuthorityMovedError) as caught:
        engine.fire(gated, request)
    assert caught.value.code == "instance_moved" and caught.value.details["state"] == "unsure"
    assert "gated:acted" not in calls
    stored = store.get("gated/1")
    assert stored is not None and stored.state == "unsure", "the outcome is never applied to a moved instance"
    late = store.events()[-1]
    assert late.payload["phase"] == "late_outcome" and late.payload["outcome"] == "failure"


def test_an_effect_that_acted_on_a_moved_instance_reports_what_it_did(
    engine: Engine, gadget: MachineSpec, store: SQLiteStore
) -> None:
    """Where the hand-over cannot be atomic, an effect may act and then find its instance moved: the
    reply says it acted (outcome_unrecorded, effect_outcome success), and the log keeps the fact."""

    def effect(ctx: Context) -> EffectResult:
        with store.write() as tx:
            current = tx.get("gadget/1")
            assert current is not None
            moved = tx.put(current, "unsure", current.data)
            tx.append(moved, "meddle", current.state, "other", {})
        return EffectResult("success", data={"note": "acted"})

    EFFECTS.add("test_meddling_probe", effect)
    path = Path(gadget.path).with_name("meddle.yaml")
    path.write_text(
        textwrap.dedent(MACHINE).replace(
            "effects: [test_probe]\n    recheck", "effects: [test_meddling_probe]\n    recheck"
        )
    )
    spec = Library().load(path)
    with pytest.raises(OutcomeUnrecordedError) as caught:
        fire(engine, spec, "start", ok=True)
    assert caught.value.details["effect_outcome"] == "success" and caught.value.details["state"] == "unsure"
    assert caught.value.status.exit == 5


def test_first_candidate_whose_guards_pass_wins(engine: Engine, gadget: MachineSpec) -> None:
    fire(engine, gadget, "start", ok=True)
    # 'flag' is unset: the first 'poke' is refused, the second (needs ok) is taken.
    assert fire(engine, gadget, "poke", ok=True).instance.data["count"] == 2
    with pytest.raises(RefusedError) as caught:
        fire(engine, gadget, "poke", ok=False)
    assert caught.value.code == "no_flag"
    assert [r["code"] for r in caught.value.details["other_rejections"]] == ["not_ok"]


def test_update_arguments_come_from_the_definition(engine: Engine, gadget: MachineSpec, store: SQLiteStore) -> None:
    fire(engine, gadget, "start", ok=True)
    current = store.get("gadget/1")
    assert current is not None
    with store.write() as tx:
        tx.put(current, "on", {**current.data, "flag": True})
    assert fire(engine, gadget, "poke").instance.data["count"] == 11


def test_undeclared_data_is_refused_before_writing(engine: Engine, gadget: MachineSpec, store: SQLiteStore) -> None:
    fire(engine, gadget, "start", ok=True)
    with pytest.raises(CorralError) as caught:
        fire(engine, gadget, "corrupt")
    assert caught.value.code == "data_invalid"
    stored = store.get("gadget/1")
    assert stored is not None and "undeclared" not in stored.data and stored.version == 2


def test_trigger_not_allowed_unknown_and_missing_instance(engine: Engine, gadget: MachineSpec) -> None:
    with pytest.raises(NotFoundError) as missing:
        fire(engine, gadget, "poke", ok=True)
    assert missing.value.code == "instance_unknown"
    with pytest.raises(InvalidError) as unknown:
        fire(engine, gadget, "fly")
    assert unknown.value.code == "trigger_unknown"
    fire(engine, gadget, "start", ok=True)
    with pytest.raises(TransitionNotAllowedError) as caught:
        fire(engine, gadget, "start", ok=True)
    assert caught.value.details["state"] == "on"
    assert caught.value.details["allowed"] == ["corrupt", "gamble", "poke"]


def test_expected_version_is_compared_and_set(engine: Engine, gadget: MachineSpec) -> None:
    fire(engine, gadget, "start", ok=True)
    with pytest.raises(ConflictError):
        engine.fire(gadget, Request("gadget/1", "poke", params={"ok": True}, expected_version=1))
    result = engine.fire(gadget, Request("gadget/1", "poke", params={"ok": True}, expected_version=2))
    assert result.instance.version == 3


def test_instance_of_another_machine_is_refused(engine: Engine, gadget: MachineSpec, library: Library) -> None:
    controller = library.builtin("controller")
    with pytest.raises(InvalidError) as caught:
        engine.fire(controller, Request("gadget/1", "acquire")) if fire(engine, gadget, "start", ok=True) else None
    assert caught.value.code == "instance_machine_mismatch"


def test_transition_table_never_resolves_names(gadget: MachineSpec, library: Library) -> None:
    table = library.table(gadget)
    with pytest.raises(TypeError, match="never resolves"):
        table.machine.resolve_callable("os.system", None)
