"""Adopted pane leases (machine ``adopted``, issue 10): a cleanup-only hold on an agent corral did not start.

Every transition edge of the machine is driven here through the real service and engine, on a real
SQLite store, with the real process host (faults only at its boundary, as in
:mod:`tests.test_transition_coverage`). An agent "created outside corral" is a process-host slot made
with ``ProcessHost.start`` directly, with no lease.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agents.abc import Expect, StartOptions
from runner.agents.process import ProcessHost
from runner.engine import Request
from runner.errors import InvalidError
from runner.service import (
    AdoptedCloseInput,
    AdoptedListInput,
    AdoptedReleaseInput,
    AdoptInput,
    ControllerInput,
    PaneCloseInput,
    ResumeInput,
    WaitAnyInput,
)
from runner.service.adopted import protected_panes
from tests.test_transition_coverage import RunnerDied, World, refused


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.delenv("CORRAL_PROTECTED_PANES", raising=False)
    monkeypatch.delenv("HERDR_PANE_ID", raising=False)
    w = World(tmp_path)
    yield w
    w.shutdown()


def outside(world: World, name: str = "stray") -> str:
    """An agent made outside corral: a slot of the process host no lease records."""
    return ProcessHost.start(world.host, name, "script", str(world.cwd.resolve()), StartOptions()).pane_id


def adopt(world: World, pane: str, **changes: Any) -> Any:
    fields: dict[str, Any] = {
        "expected_name": "stray",
        "expected_kind": "script",
        "expected_cwd": str(world.cwd.resolve()),
        "expected_state_change_seq": 0,
        **changes,
    }
    return world.service.adopted.adopt(AdoptInput("ctl", world.credential, pane, **fields))


def close(world: World, target: str = "stray", seq: int = 0) -> Any:
    return world.service.adopted.close(AdoptedCloseInput("ctl", world.credential, target, seq))


def release(world: World, target: str = "stray") -> Any:
    return world.service.adopted.release(AdoptedReleaseInput("ctl", world.credential, target))


def reconcile(world: World, apply: bool = True) -> list[tuple[Any, ...]]:
    done = world.service.adopted.reconcile(ControllerInput("ctl", world.credential, apply))
    assert done.applied is apply
    return [(a["state"], a["action"], a.get("to")) for a in done.actions]


def panes(world: World) -> list[str]:
    return [o.pane_id for o in world.host.list()]


def test_adopt_then_close_captures_and_closes_the_pane(world: World) -> None:
    """adopted adopt absent -> active, close active -> closing, close:success closing -> closed."""
    pane = outside(world)
    lease = adopt(world, pane)
    assert (lease.state, lease.data["pane_id"], lease.data["adopted_seq"]) == ("active", pane, 0)
    assert [v.id for v in world.service.adopted.leases(AdoptedListInput("ctl"))] == [lease.id]
    closed = close(world, pane)  # by pane id as well as by name
    assert closed.lease.state == "closed" and closed.lease.data["closing_seq"] == 0
    assert closed.lease.data["capture_sha256"] == hashlib.sha256(closed.output.encode()).hexdigest()
    assert panes(world) == []
    assert world.edges("adopted") == [
        ("adopt", "absent", "active"),
        ("close", "active", "closing"),
        ("close:success", "closing", "closed"),
    ]
    assert world.service.adopted.leases(AdoptedListInput("ctl")) == []
    assert [v.state for v in world.service.adopted.leases(AdoptedListInput("ctl", include_ended=True))] == ["closed"]


def test_adopt_refuses_anything_but_the_exact_settled_agent_seen(world: World) -> None:
    pane = outside(world)
    refused("agent_gone", lambda: adopt(world, "p999"))
    refused("identity_changed", lambda: adopt(world, pane, expected_name="other"))
    refused("identity_changed", lambda: adopt(world, pane, expected_kind="claude"))
    refused("identity_changed", lambda: adopt(world, pane, expected_cwd="/"))
    refused("cursor_mismatch", lambda: adopt(world, pane, expected_state_change_seq=2))
    ProcessHost.prompt(world.host, pane, "sleep 30", Expect((pane, "stray", "script", str(world.cwd.resolve())), 0))
    refused("agent_not_settled", lambda: adopt(world, pane, expected_state_change_seq=1))
    assert world.store.find("adopted") == [], "nothing was written"


def test_a_pane_a_live_lease_holds_cannot_be_adopted_nor_its_name_reused(world: World) -> None:
    reviewer = world.start("rev")
    refused("pane_leased", lambda: adopt(world, reviewer.data["pane_id"], expected_name="rev"))
    pane = outside(world)
    adopt(world, pane)
    refused("pane_leased", lambda: adopt(world, pane))
    refused("agent_name_taken", lambda: world.start("stray"))
    # The operator's close of a pane corral started goes through the adoption, never around it.
    refused(
        "pane_leased",
        lambda: world.service.inventory.pane_close(
            PaneCloseInput("ctl", world.credential, pane, "stray", "script", str(world.cwd.resolve()), 0)
        ),
    )


def test_an_adopted_lease_is_never_a_prompt_or_wait_target(world: World) -> None:
    pane = outside(world)
    lease = adopt(world, pane)
    refused("lease_adopted", lambda: world.relay("echo never", target="stray"))
    refused(
        "lease_adopted",
        lambda: anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("stray", None),), 1)),
    )
    refused("lease_adopted", lambda: world.close("stray"))  # nor a reviewer verb
    # Even fired straight at the engine, a receipt cannot name an adopted lease.
    request = Request(
        "receipt/00000000-0000-4000-8000-000000000000",
        "relay",
        params={
            **world.service.core.credential_params(world.credential),
            "target": lease.id,
            "token": "corral-receipt-v1.00000000-0000-4000-8000-000000000000",
            "prompt_sha256": "0" * 64,
        },
        secrets={"token": world.credential.token, "prompt": "echo never"},
        observations={"agent": world.host.get(pane).to_dict()},
        resources={"agents": world.host},
    )
    refused("target_not_leased", lambda: world.service.engine.fire(world.service.library.builtin("receipt"), request))
    assert world.host.get(pane).seq == 0 and world.store.find("receipt") == [], "nothing was delivered"


def test_reviewer_reconcile_never_takes_an_adopted_pane_for_a_dead_start(world: World) -> None:
    """A start that died before recording its pane is matched by name, kind and cwd among panes no live
    lease holds: an adopted pane with that identity is held, so reconcile leaves it alone."""
    pane = outside(world, "rev")
    adopt(world, pane, expected_name="rev")
    world.host.die_on_start = True
    with pytest.raises(RunnerDied):
        world.service.core.fire_on(  # a start that recorded its intent and died before the host acted
            "reviewer",
            "reviewer/00000000-0000-4000-8000-000000000001",
            "start",
            world.credential,
            {"name": "rev2", "kind": "script", "cwd": str(world.cwd), "host": "process", **world._dead_starter()},
            {"cwd": {"given": str(world.cwd), "real": str(world.cwd.resolve()), "is_dir": True}, "kinds": ["script"]},
            host=world.host,
        )
    world.host.die_on_start = False
    lease = world.only("reviewer")
    # Names are unique among live leases, so this cannot arise through corral's own verbs; forge it (the
    # dead start looking for exactly the adopted agent's name, kind and cwd, with no nonce) to prove that
    # the held-pane rule alone keeps reconcile off an adopted pane.
    with world.store.write() as tx:
        tx.put(lease, lease.state, {**lease.data, "name": "rev", "start_nonce": None})
    assert [(a["state"], a["to"]) for a in world.reconcile()] == [("provisioning", "failed_closed")]
    assert pane in panes(world), "the adopted pane was not taken for the dead start's"
    assert world.store.find("adopted")[0].state == "active"


def test_release_ends_the_adoption_and_leaves_the_pane_running(world: World) -> None:
    """adopted release active -> released."""
    pane = outside(world)
    adopt(world, pane)
    released = release(world, "stray")
    assert released.state == "released" and released.data["released_at"]
    assert world.host.get(pane).status == "idle", "the pane keeps running"
    assert world.edges("adopted")[-1] == ("release", "active", "released")
    refused("target_unknown", lambda: close(world))
    assert adopt(world, pane).state == "active", "released, the pane can be adopted again"


def test_a_failed_close_can_be_closed_again_released_or_reconciled(world: World) -> None:
    """adopted close:failure closing -> close_failed, close close_failed -> closing, release close_failed ->
    released, reconcile close_failed -> closed."""
    pane = outside(world)
    adopt(world, pane)
    world.host.close_fault = "error"
    error = refused("agent_close_failed", lambda: close(world))
    assert error.details["lease"]["state"] == "close_failed"
    assert reconcile(world) == [("close_failed", "skip", None)], "its pane is still open: close it again"
    world.host.close_fault = None
    assert close(world).lease.state == "closed"

    pane = outside(world, "second")
    adopt(world, pane, expected_name="second")
    world.host.close_fault = "error"
    refused("agent_close_failed", lambda: close(world, "second"))
    world.host.close_fault = None
    assert release(world, "second").state == "released"
    assert pane in panes(world)

    adopt(world, pane, expected_name="second")
    world.host.close_fault = "error"
    refused("agent_close_failed", lambda: close(world, "second"))
    world.host.close_fault = None
    ProcessHost.close(world.host, pane)  # closed by other means
    assert reconcile(world, apply=False) == [("close_failed", "would_reconcile", None)]
    assert reconcile(world) == [("close_failed", "reconciled", "closed")]
    edges = world.edges("adopted")
    for edge in (
        ("close:failure", "closing", "close_failed"),
        ("close", "close_failed", "closing"),
        ("release", "close_failed", "released"),
        ("reconcile", "close_failed", "closed"),
    ):
        assert edge in edges, edge


def test_an_adopted_pane_that_vanished_is_reconciled_closed(world: World) -> None:
    """adopted reconcile active -> closed (nothing captured); a dry run changes nothing."""
    pane = outside(world)
    lease = adopt(world, pane)
    assert reconcile(world) == [], "a held pane that exists needs nothing"
    ProcessHost.close(world.host, pane)
    assert reconcile(world, apply=False) == [("active", "would_reconcile", None)]
    assert world.store.get(lease.id).state == "active", "the dry run changed nothing"
    assert reconcile(world) == [("active", "reconciled", "closed")]
    after = world.store.get(lease.id)
    assert after.data.get("capture_sha256") is None and "vanished" in after.data["failure"]
    assert world.edges("adopted")[-1] == ("reconcile", "active", "closed")


def test_an_unsure_close_stays_closing_until_reconcile_settles_it(world: World) -> None:
    """adopted close:ambiguous closing -> closing, reconcile closing -> closed (pane gone)."""
    pane = outside(world)
    adopt(world, pane)
    world.host.close_fault = "unexpected"
    error = refused("agent_close_failed", lambda: close(world))
    assert error.details["lease"]["state"] == "closing"
    world.host.close_fault = None
    ProcessHost.close(world.host, pane)
    assert reconcile(world) == [("closing", "reconciled", "closed")]
    assert world.edges("adopted")[-2:] == [
        ("close:ambiguous", "closing", "closing"),
        ("reconcile", "closing", "closed"),
    ]


def test_a_close_killed_before_its_effect_is_finished_by_reconcile_at_its_cursor(world: World) -> None:
    """adopted reconcile closing -> closing with reconcile:success / :failure / :ambiguous."""
    pane = outside(world)
    adopt(world, pane)
    world.host.close_fault = "die"
    with pytest.raises(RunnerDied):
        close(world)
    for fault, expected in (("unexpected", "closing"), ("error", "close_failed")):
        world.host.close_fault = fault
        assert reconcile(world)[0][1:] == ("reconciled", expected)
    world.host.close_fault = None
    assert pane in panes(world)
    assert close(world).lease.state == "closed"

    pane = outside(world, "third")
    adopt(world, pane, expected_name="third")
    world.host.close_fault = "die"
    with pytest.raises(RunnerDied):
        close(world, "third")
    world.host.close_fault = None
    ProcessHost.prompt(world.host, pane, "echo moved", Expect((pane, "third", "script", str(world.cwd.resolve())), 0))
    anyio.run(world.host.wait, pane, 1, 30)
    (action,) = world.service.adopted.reconcile(ControllerInput("ctl", world.credential, True)).actions
    # Neither candidate applies: the pane is there (agent_present) and the agent ran past closing_seq
    # (cursor_mismatch): it is never closed blind.
    assert (action["state"], action["action"], action["code"]) == ("closing", "skip", "agent_present")
    assert pane in panes(world)
    assert [a.state for a in world.store.find("adopted") if a.data["name"] == "third"] == ["closing"]
    edges = world.edges("adopted")
    for edge in (
        ("reconcile", "closing", "closing"),
        ("reconcile:ambiguous", "closing", "closing"),
        ("reconcile:failure", "closing", "close_failed"),
        ("close:success", "closing", "closed"),
    ):
        assert edge in edges, edge

    pane = outside(world, "fourth")
    adopt(world, pane, expected_name="fourth")
    world.host.close_fault = "die"
    with pytest.raises(RunnerDied):
        close(world, "fourth")
    world.host.close_fault = None
    done = world.service.adopted.reconcile(ControllerInput("ctl", world.credential, True)).actions
    assert [(a["action"], a.get("to")) for a in done if a["name"] == "fourth"] == [("reconciled", "closed")]
    assert ("reconcile:success", "closing", "closed") in world.edges("adopted")
    assert pane not in panes(world)


def test_close_is_bound_to_the_cursor_and_the_adopted_identity(world: World) -> None:
    pane = outside(world)
    adopt(world, pane)
    identity = (pane, "stray", "script", str(world.cwd.resolve()))
    ProcessHost.prompt(world.host, pane, "wait-file go\necho moved", Expect(identity, 0))
    refused("agent_not_settled", lambda: close(world, seq=1))  # held until released just below
    (world.cwd / "go").write_text("")
    anyio.run(world.host.wait, pane, 1, 30)
    refused("cursor_mismatch", lambda: close(world, seq=0))
    assert pane in panes(world) and world.store.find("adopted")[0].state == "active"
    assert close(world, seq=2).output.strip() == "moved", "the capture is the output at the bound cursor"


def test_protected_panes_are_never_adopted_or_closed(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    pane = outside(world)
    monkeypatch.setenv("CORRAL_PROTECTED_PANES", f"w9:p3, {pane}")
    refused("pane_protected", lambda: adopt(world, pane))
    monkeypatch.setenv("CORRAL_PROTECTED_PANES", "")
    adopt(world, pane)
    monkeypatch.setenv("CORRAL_PROTECTED_PANES", pane)  # protected after the adoption: still never closed
    refused("pane_protected", lambda: close(world))
    assert pane in panes(world)
    assert release(world).state == "released", "giving it up is always allowed"


def test_the_coordinators_own_herdr_pane_is_protected_and_a_bad_list_is_refused() -> None:
    env = {"HERDR_PANE_ID": "w1:p2", "CORRAL_PROTECTED_PANES": "w1:p5,,w1:p5 "}
    assert protected_panes("herdr", env) == ["w1:p2", "w1:p5"]
    assert protected_panes("process", env) == ["w1:p5"], "a Herdr pane id means nothing on the process host"
    with pytest.raises(InvalidError) as caught:
        protected_panes("process", {"CORRAL_PROTECTED_PANES": "p1;rm -rf"})
    assert caught.value.code == "config_invalid"


def test_a_stale_fence_adopts_closes_and_releases_nothing(world: World) -> None:
    pane = outside(world)
    adopt(world, pane)
    other = outside(world, "other")
    stale = world.credential
    world.credential = world.service.controller.resume(ResumeInput("ctl", stale)).credential  # a new generation
    fresh = world.credential
    world.credential = stale
    refused("fence_stale", lambda: adopt(world, other, expected_name="other"))
    refused("fence_stale", lambda: close(world))
    refused("fence_stale", lambda: release(world))
    refused("fence_stale", lambda: reconcile(world))
    assert sorted(panes(world)) == sorted([pane, other])
    world.credential = fresh
    assert release(world).state == "released"
