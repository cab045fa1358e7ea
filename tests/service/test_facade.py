"""The service as a façade of components: every operation it had is still its own method, the
components share one core and inherit from nothing, inputs that act for a controller share one
fenced base, and the async operations never call the store, the engine or a host on the event loop."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import time
from typing import Any

import anyio
import pytest

import runner.service as service_module
from runner.agents.abc import AgentHost
from runner.errors import InputError
from runner.fence import Credential
from runner.service import (
    AdoptInput,
    CollectInput,
    EventsInput,
    FencedInput,
    ObservedPaneInput,
    PaneCloseInput,
    ReceiptsInput,
    ReviewerListInput,
    Service,
    WaitAnyInput,
    inputs,
)
from runner.service.core import Core, in_thread
from runner.service.events import Events
from runner.service.receipts import Receipts
from runner.service.reviewers import Reviewers
from runner.service.writers import Writers
from tests.service.agents_world import World

COMPONENTS = (
    "controller",
    "reviewers",
    "receipts",
    "writers",
    "waits",
    "inventory",
    "events",
    "adopted",
    "definitions",
)
EXPORTED_BEFORE = [
    "TTL_DEFAULT",
    "TTL_MAX",
    "TTL_MIN",
    "AbandonInput",
    "AcquireInput",
    "AdoptInput",
    "AdoptedCloseInput",
    "AdoptedListInput",
    "AdoptedReleaseInput",
    "AgentInput",
    "AgentLeaseView",
    "AgentWaitInput",
    "AskManyInput",
    "AskManyResult",
    "CloseResult",
    "CollectInput",
    "CollectResult",
    "ControllerInput",
    "DeliveryError",
    "EventsInput",
    "Grant",
    "Housekeeping",
    "LeaseView",
    "ListLeasesInput",
    "MachineSummary",
    "PaneCloseInput",
    "ReceiptView",
    "ReceiptsInput",
    "RelayInput",
    "ReleaseInput",
    "RenewInput",
    "ResumeInput",
    "ReviewerCloseInput",
    "ReviewerListInput",
    "ReviewerStartInput",
    "ScopesCheckInput",
    "Service",
    "TakeoverInput",
    "ValidateInput",
    "VerifyResult",
    "WaitAnyInput",
    "WaitAnyResult",
    "Winner",
    "WriterReleaseInput",
    "WriterStartInput",
    "WriterVerifyInput",
    "default_holder",
    "machines",
    "validate",
]


def test_the_service_adds_only_its_components_and_every_operation_is_a_component_method() -> None:
    """The façade keeps what it adds (the lazy components, what they run on); each operation of the
    table is a method of the component that owns it, and no method of the service only delegates."""
    import ast

    from runner.service.operations import OPERATIONS as TABLE

    methods = [op.method for op in TABLE if op.method is not None]
    assert len(methods) >= 30
    for method in methods:
        component = method.partition(".")[0]
        owner = getattr(Service, component)
        assert isinstance(owner, (property, functools.cached_property)), f"Service.{component} is a component"
    tree = ast.parse(inspect.getsource(Service))
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    for fn in cls.body:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not fn.decorator_list:
            body = [b for b in fn.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
            delegates = (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Attribute)
                and call.func.value.attr != "core"
            )
            assert not delegates, f"Service.{fn.name} only delegates: call the component"
    for cls_ in (Reviewers, Receipts, Writers, Events):
        assert "__call__" in vars(cls_), f"{cls_.__name__} is callable as the listing it replaced"
    assert not hasattr(Service, "__getattr__"), "no delegation by attribute magic"
    assert set(EXPORTED_BEFORE) <= set(service_module.__all__)
    for name in service_module.__all__:
        assert hasattr(service_module, name), name


def test_every_operation_of_the_table_resolves_on_a_service(world: World) -> None:
    from runner.service.operations import OPERATIONS as TABLE

    for op in TABLE:
        if op.method is None or op.method.startswith("plans"):
            continue
        target: Any = world.service
        for part in op.method.split("."):
            target = getattr(target, part)
        assert callable(target), op.method


def test_components_share_one_core_and_inherit_from_nothing(world: World) -> None:
    service = world.service
    for name in COMPONENTS:
        component = getattr(service, name)
        assert component.core is service.core, f"{name} holds the service's core"
        assert type(component).__mro__ == (type(component), object), f"{name} inherits from nothing"
    assert service.receipts.waits is service.waits, "receipts get the waits component passed in"
    assert service.store is service.core.store and service.engine is service.core.engine
    assert service.actor == "test" and service.kinds is service.core.kinds


def test_the_listing_spellings_of_before_and_the_components_agree(world: World) -> None:
    world.start("a")
    receipt = world.relay("echo hi", target="a")
    listed = world.service.reviewers(ReviewerListInput("ctl"))
    assert [lease.data["name"] for lease in listed] == ["a"]
    assert listed == world.service.reviewers.leases(ReviewerListInput("ctl"))
    assert world.service.receipts(ReceiptsInput("ctl")) == world.service.receipts.find(ReceiptsInput("ctl"))
    assert [r.token for r in world.service.receipts(ReceiptsInput("ctl"))] == [receipt.token]
    assert world.service.writers() == world.service.writers.leases() == []
    events = world.service.events(EventsInput(0))
    assert events == world.service.events.read(EventsInput(0)) and len(events) == 5
    assert world.service.receipts.receipt(receipt.token) == world.service.receipts.receipt(receipt.token)
    assert world.service.inventory.lease(listed[0].id) == listed[0]
    assert world.service.inventory.lease("controller/ctl") is None, "a controller lease is not an agent lease"


def fenced_inputs() -> list[type[Any]]:
    return [
        cls
        for _, cls in inspect.getmembers(inputs, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__name__.endswith("Input")
    ]


def test_every_input_acting_for_a_controller_is_fenced_and_refuses_another_controllers_credential() -> None:
    fenced = [cls for cls in fenced_inputs() if issubclass(cls, FencedInput) and cls is not FencedInput]
    for cls in fenced_inputs():
        names = [f.name for f in dataclasses.fields(cls)]
        if "credential" in names:
            assert cls in fenced or cls is FencedInput, f"{cls.__name__} takes a credential: it is a FencedInput"
            assert names[:2] == ["controller_id", "credential"], f"{cls.__name__} keeps its positional order"
    assert len(fenced) == 19  # 18 operations and the observed-pane base
    other = Credential("other", "00000000-0000-4000-8000-000000000000", 1, "t" * 43)
    with pytest.raises(InputError) as caught:
        FencedInput("ctl", other)
    assert caught.value.code == "credential_mismatch"
    with pytest.raises(InputError) as caught:
        CollectInput("ctl", other, ("corral-receipt-v1.00000000-0000-4000-8000-000000000000",))
    assert caught.value.code == "credential_mismatch"


def test_adopt_and_pane_close_share_their_observed_pane_fields_and_keep_their_field_names() -> None:
    credential = Credential("ctl", "00000000-0000-4000-8000-000000000000", 1, "t" * 43)
    shared = ["controller_id", "credential", "pane_id", "expected_name", "expected_kind", "expected_cwd"]
    for cls in (AdoptInput, PaneCloseInput):
        assert issubclass(cls, ObservedPaneInput)
        assert [f.name for f in dataclasses.fields(cls)][:6] == shared
    good = AdoptInput("ctl", credential, "p1", "rev", "script", "/tmp", 3, "process", None)
    assert (good.pane_id, good.expected_state_change_seq, good.host) == ("p1", 3, "process")
    assert PaneCloseInput("ctl", credential, "p1", "rev", "script", "/tmp", 3, reason="stray").reason == "stray"
    for cls in (AdoptInput, PaneCloseInput):  # the field as its argument names it (the tool's target)
        with pytest.raises(InputError) as caught:
            cls("ctl", credential, "bad pane!", "rev", "script", "/tmp", 3)
        assert caught.value.details["field"] == "target"
    with pytest.raises(InputError) as caught:
        PaneCloseInput("ctl", credential, "p1", "rev", "script", "relative", 3)
    assert caught.value.details["field"] == "expect_cwd"


def test_in_thread_runs_the_call_on_a_worker_thread_and_returns_or_raises_what_it_does() -> None:
    def where(x: int) -> tuple[int, int]:
        return threading.get_ident(), x * 2

    def fails() -> None:
        raise InputError("x", "no")

    async def main() -> tuple[int, int]:
        with pytest.raises(InputError):
            await in_thread(fails)
        return await in_thread(where, 21)

    ident, value = anyio.run(main)
    assert value == 42 and ident != threading.get_ident()


def test_the_waits_call_the_host_off_the_event_loop_which_keeps_running(world: World) -> None:
    """wait_any's host calls (an observation, a read) run on worker threads; while one blocks, other
    tasks on the loop go on (here: a ticker), as an MCP or HTTP server's other requests must."""
    world.start("a")
    loop_thread = threading.get_ident()
    seen: list[int] = []
    real_get, real_read = world.host.get, world.host.read

    def slow_get(pane_id: str) -> Any:
        seen.append(threading.get_ident())
        time.sleep(0.3)  # a Herdr subprocess, or a busy store
        return real_get(pane_id)

    def read(pane_id: str, lines: int) -> str:
        seen.append(threading.get_ident())
        return real_read(pane_id, lines)

    def slow_cursors(pane_ids: Any) -> Any:  # the set-up looks at every cursor-less target in one call
        seen.append(threading.get_ident())
        time.sleep(0.3)
        return AgentHost.cursors(world.host, pane_ids)

    world.host.get = slow_get  # type: ignore[method-assign]
    world.host.cursors = slow_cursors  # type: ignore[method-assign]
    world.host.read = read  # type: ignore[method-assign]
    ticks: list[float] = []

    async def main() -> Any:
        async def ticker() -> None:
            while True:
                ticks.append(time.monotonic())
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as group:
            group.start_soon(ticker)
            result = await world.service.waits.wait_any(WaitAnyInput("ctl", world.credential, (("a", None),), 10))
            group.cancel_scope.cancel()
        return result

    result = anyio.run(main)
    assert result.target == "a" and result.observation.status == "idle"
    assert len(seen) == 3 and loop_thread not in seen, "every host call ran on a worker thread"
    assert len(ticks) >= 20, f"the loop kept running while the host blocked ({len(ticks)} ticks in ~0.6 s)"


def test_collect_fires_the_engine_and_reads_the_store_off_the_event_loop(world: World) -> None:
    world.start("a")
    receipt = world.relay("echo hi", target="a")
    loop_thread = threading.get_ident()
    fired: list[int] = []
    reads: list[int] = []
    core: Core = world.service.core
    real_fire, real_get = core.engine.fire, core.store.get

    def fire(*args: Any, **kwargs: Any) -> Any:
        fired.append(threading.get_ident())
        return real_fire(*args, **kwargs)

    def get(*args: Any, **kwargs: Any) -> Any:
        reads.append(threading.get_ident())
        return real_get(*args, **kwargs)

    core.engine.fire = fire  # type: ignore[method-assign]
    core.store.get = get  # type: ignore[method-assign]
    (result,) = world.collect(receipt.token)
    assert result.receipt.state == "completed" and "hi" in result.output
    assert fired and loop_thread not in fired, "the collect transition ran on a worker thread"
    assert reads and loop_thread not in reads, "every store read ran on a worker thread"
