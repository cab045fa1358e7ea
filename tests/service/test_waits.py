"""Waits (component ``service.waits``): the first of a controller's agents to settle, with its output."""

from __future__ import annotations

import time

import anyio

from runner.service import (
    WaitAnyInput,
)
from tests.service.agents_world import World, refused


def test_wait_any_returns_the_first_to_settle(world: World) -> None:
    world.start("a")
    world.start("b")
    world.relay("sleep 2", target="a")
    world.relay("sleep 0.1", target="b")
    started = time.monotonic()
    result = anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("a", 1), ("b", 1)), 10))
    assert (result.target, result.observation.status, result.observation.seq) == ("b", "done", 2)
    assert time.monotonic() - started < 1.5, "the loser's wait was cancelled, not awaited"
    refused(
        "wait_timeout",
        lambda: anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("b", 2),), 0.2)),
    )


def test_wait_any_without_a_cursor_is_won_at_once_by_settled_agents_with_their_output(world: World) -> None:
    """Issue 10: agents already done win a cursor-less wait (it used to time out); --fresh waits."""
    world.start("a")
    world.start("b")
    world.start("c")
    for name in ("a", "b"):
        world.relay(f"echo from {name}", target=name)
    world.relay("sleep 30", target="c")
    anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("a", 1),), 10))
    anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("b", 1),), 10))
    started = time.monotonic()
    result = anyio.run(
        world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("c", None), ("a", None), ("b", None)), 10)
    )
    assert time.monotonic() - started < 1.0, "nothing was waited for"
    assert [(w.target, w.observation.status, w.observation.seq) for w in result.winners] == [
        ("a", "done", 2),
        ("b", "done", 2),
    ]
    assert [w.output.strip() for w in result.winners] == ["from a", "from b"]
    doc = result.to_dict()
    assert doc["target"] == "a" and doc["output"].strip() == "from a" and len(doc["winners"]) == 2
    refused(
        "wait_timeout",
        lambda: anyio.run(
            world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("a", None),), 0.2, fresh=True)
        ),
    )


def test_wait_any_output_is_bounded_by_lines(world: World) -> None:
    world.start("a")
    world.relay("echo l1\necho l2\necho l3\necho l4", target="a")
    result = anyio.run(world.service.waits.wait_any, WaitAnyInput("ctl", world.credential, (("a", 1),), 10, lines=2))
    assert result.winners[0].output.strip().splitlines() == ["l3", "l4"]
