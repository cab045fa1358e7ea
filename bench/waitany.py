"""What ``wait-any`` over 64 leased agents costs while nothing happens, and how long it takes to set up.

Issue 13's row "``wait-any`` over 64 targets: idle CPU < 5% of a core, set-up time < 5 ms". Each
measurement runs in a child process of its own with the code of one checkout on ``PYTHONPATH``
(``--root``, default: this one; ``--before ROOT`` measures another checkout, e.g. main before the
change, in the same run), on a real SQLite store in a temporary directory with the real process host
and 64 reviewers of the bundled ``script`` kind, all idle at seq 0:

1. Idle CPU: ``Service.wait_any`` over the 64 targets with cursor 0 (none of them will settle), its
   CPU time (``time.process_time``: every thread of the waiting process) over a window of wall time
   starting 0.2 s into the wait, as a percentage of one core. The window (``--window``, 1.5 s;
   ``--quick`` 1.0 s) lies inside the process host's fast-tick phase (``QUIET_AFTER``, 2 s), so the
   figure is the wait's dearest steady state; after a longer quiet spell it ticks less often still.
2. Set-up time: from the call of ``Service.wait_any`` over the 64 targets given without a cursor and
   ``--fresh`` (every target's lease resolved and observed now, so none wins at once) to the moment
   every target's slot has been read by the wait itself (the end of its first tick), median over
   ``--setups`` calls. Recorded by a slot port wrapping the real adapter: the wait's reads are those
   after ``Waits._targets`` (the set-up: fence, leases, observations) returned.

The checkout before issue 13 accepted at most 16 targets; the child lifts that input limit for the
measurement only (``WAIT_TARGETS_MAX`` of WaitAnyInput's module), so both run the same 64.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TARGETS = 64
CPU_TARGET_PCT = 5.0
SETUP_TARGET_MS = 5.0
CONTROLLER = "bench"
AUTHORITY_SHA = "b" * 64
HERE = Path(__file__).resolve().parent.parent


# --- the child: one checkout's code ------------------------------------------------------------------------


def child(window: float, setups: int, directory: Path) -> dict[str, Any]:
    import anyio

    import runner
    from runner.agents.kinds import Kinds
    from runner.agents.process import ProcessHost
    from runner.agents.slots import SlotReader, slot_store
    from runner.definitions.library import Library
    from runner.errors import CorralError
    from runner.service import AcquireInput, ReviewerStartInput, Service, WaitAnyInput
    from runner.sql.store_sqlite import SQLiteStore

    try:  # WaitAnyInput's module: runner.service.inputs.waits since the inputs are one module per component
        from runner.service.inputs import waits as service_inputs
    except ImportError:  # a checkout from before: runner.service.inputs is one module
        from runner.service import inputs as service_inputs  # type: ignore[no-redef]

    service_inputs.WAIT_TARGETS_MAX = max(TARGETS, service_inputs.WAIT_TARGETS_MAX)  # type: ignore[misc]
    reads: list[tuple[float, frozenset[str]]] = []  # (perf_counter, panes read) per slot read
    lock = threading.Lock()

    class Recording(SlotReader):
        def __init__(self, inner: SlotReader) -> None:
            self.inner = inner

        def _note(self, panes: Any) -> None:
            with lock:
                reads.append((time.perf_counter(), frozenset(panes)))

        def slot(self, pane_id: str) -> Any:
            found = self.inner.slot(pane_id)
            self._note([pane_id])
            return found

        def slots(self, include_closed: bool = False) -> Any:
            return self.inner.slots(include_closed)

        def slots_of(self, pane_ids: Any) -> Any:
            found = self.inner.slots_of(pane_ids)
            self._note(pane_ids)
            return found

        def progress_of(self, pane_ids: Any) -> Any:
            # The adapter's own narrow read (a tick's), not SlotReader's default through slots_of.
            found = self.inner.progress_of(pane_ids)
            self._note(pane_ids)
            return found

    store = SQLiteStore(directory / "corral.db")
    real = slot_store(store)

    class Slots(type(real)):  # type: ignore[misc]
        @contextmanager
        def read(self) -> Iterator[SlotReader]:
            with real.read() as reader:
                yield Recording(reader)

    kinds = Kinds.load([])
    plain = ProcessHost(store, directory / "agents", kinds)  # idle CPU: the host exactly as shipped
    recording = ProcessHost(store, directory / "agents", kinds, slots=Slots(store))  # set-up: reads noted
    current = [plain]
    service = Service(
        store, Library(cache_dir=directory / "cache"), actor="bench", hosts=lambda name: current[0], kinds=kinds
    )
    waits = service.waits
    setup_done: list[float] = []  # when each call's set-up (the fence, the leases, the observations) ended
    targets_of = waits._targets

    def timed_targets(inp: Any) -> Any:
        try:
            return targets_of(inp)
        finally:
            setup_done.append(time.perf_counter())

    waits._targets = timed_targets  # type: ignore[method-assign]
    credential = service.controller.acquire(
        AcquireInput(CONTROLLER, "BENCH-13", AUTHORITY_SHA, 86400, "bench@host")
    ).credential
    work = directory / "work"
    work.mkdir()
    names = [f"r{n}" for n in range(TARGETS)]
    panes = {}
    for name in names:
        lease = service.reviewers.start(ReviewerStartInput(CONTROLLER, credential, name, "script", str(work)))
        panes[str(lease.data["pane_id"])] = name

    async def idle_cpu() -> tuple[float, float]:
        samples: list[tuple[float, float]] = []

        async def sampler() -> None:
            await anyio.sleep(0.2)
            samples.append((time.perf_counter(), time.process_time()))
            await anyio.sleep(window)
            samples.append((time.perf_counter(), time.process_time()))

        targets = tuple((name, 0) for name in names)
        async with anyio.create_task_group() as group:
            group.start_soon(sampler)
            try:
                await service.waits.wait_any(WaitAnyInput(CONTROLLER, credential, targets, window + 0.4))
            except CorralError as exc:
                if exc.code != "wait_timeout":
                    raise
        (wall0, cpu0), (wall1, cpu1) = samples
        return cpu1 - cpu0, wall1 - wall0

    resolved_ms: list[float] = []  # per set-up: call -> the end of ``_targets``

    def covered(began: float) -> float | None:
        """When every target's slot had been read by the wait itself (ms after ``began``), if yet."""
        if not setup_done:
            return None
        seen: set[str] = set()
        with lock:
            after = [(at, read) for at, read in reads if at > setup_done[0]]  # the wait's own reads
        for at, read in after:
            seen |= read
            if seen >= panes.keys():
                return (at - began) * 1000
        return None

    async def one_setup() -> float:
        reads.clear()
        setup_done.clear()
        targets = tuple((name, None) for name in names)
        found: list[float] = []
        began = time.perf_counter()

        async def wait() -> None:
            try:
                await service.waits.wait_any(WaitAnyInput(CONTROLLER, credential, targets, 10.0, fresh=True))
            except CorralError as exc:
                if exc.code != "wait_timeout":
                    raise

        async with anyio.create_task_group() as group:
            group.start_soon(wait)
            while not found:
                await anyio.sleep(0.005)
                at = covered(began)
                if at is not None:
                    found.append(at)
            group.cancel_scope.cancel()
        resolved_ms.append((setup_done[0] - began) * 1000)
        return found[0]

    cpu, wall = anyio.run(idle_cpu)
    current[0] = recording
    setup_ms = [anyio.run(one_setup) for _ in range(setups)]
    store.close()
    return {
        "runner": str(Path(runner.__file__).parent),
        "targets": TARGETS,
        "idle_cpu_s": round(cpu, 4),
        "idle_wall_s": round(wall, 4),
        "idle_cpu_pct_of_core": round(100 * cpu / wall, 2),
        "setup_ms": [round(s, 3) for s in setup_ms],
        "setup_median_ms": round(statistics.median(setup_ms), 3),
        "resolved_median_ms": round(statistics.median(resolved_ms), 3),
    }


# --- the parent: run the children, report the figures ------------------------------------------------------


def run_child(root: Path, window: float, setups: int, scratch: Path | None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(root), CORRAL_TRANSITION_COVERAGE="off")
    with tempfile.TemporaryDirectory(prefix="corral-bench-waitany-", dir=scratch) as tmp:
        done = subprocess.run(
            [sys.executable, __file__, "--child", tmp, "--window", str(window), "--setups", str(setups)],
            env=env,
            capture_output=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"the measurement of {root} failed:\n{done.stderr.decode(errors='replace')}")
    result: dict[str, Any] = json.loads(done.stdout)
    result["root"] = str(root)
    return result


def figures(after: dict[str, Any], before: dict[str, Any] | None) -> list[dict[str, Any]]:
    def was(key: str, unit: str) -> str:
        return f"; before ({before['root']}): {before[key]} {unit}" if before else ""

    cpu = after["idle_cpu_pct_of_core"]
    setup = after["setup_median_ms"]
    return [
        {
            "figure": "wait-any over 64 targets: idle CPU",
            "value": cpu,
            "unit": "% of a core",
            "target": f"< {CPU_TARGET_PCT:g}% of a core",
            "met": cpu < CPU_TARGET_PCT,
            "detail": f"{after['idle_cpu_s']} s CPU over {after['idle_wall_s']} s wall"
            + was("idle_cpu_pct_of_core", "% of a core"),
        },
        {
            "figure": "wait-any over 64 targets: set-up time",
            "value": setup,
            "unit": "ms",
            "target": f"< {SETUP_TARGET_MS:g} ms",
            "met": setup < SETUP_TARGET_MS,
            "detail": f"median of {len(after['setup_ms'])}: {after['setup_ms']} ms, of which "
            f"{after['resolved_median_ms']} ms to resolve and observe the targets" + was("setup_median_ms", "ms"),
        },
    ]


def render(doc: dict[str, Any]) -> str:
    lines = [f"wait-any over {TARGETS} idle process-host targets"]
    for figure in doc["figures"]:
        mark = "met" if figure["met"] else "MISSED"
        lines.append(f"  {figure['figure']}: {figure['value']} {figure['unit']} (target {figure['target']}: {mark})")
        lines.append(f"    {figure['detail']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=HERE, help="the checkout to measure (default: this one)")
    parser.add_argument("--before", type=Path, help="another checkout to measure in the same run (e.g. main)")
    parser.add_argument("--window", type=float, default=1.5, help="seconds of idle wait measured (default: 1.5)")
    parser.add_argument("--setups", type=int, default=15, help="set-ups timed (default: 15)")
    parser.add_argument("--quick", action="store_true", help="a run of a few seconds (1 s window, 9 set-ups)")
    parser.add_argument("--dir", type=Path, help="where to put the stores (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", metavar="DIR", type=Path, help=argparse.SUPPRESS)  # internal: one measurement
    args = parser.parse_args(argv)
    if args.quick:
        args.window, args.setups = min(args.window, 1.0), min(args.setups, 9)
    if args.window <= 0 or args.setups < 1:
        parser.error("--window must be > 0 and --setups >= 1")
    if args.child is not None:
        print(json.dumps(child(args.window, args.setups, args.child)))
        return 0
    before = run_child(args.before.resolve(), args.window, args.setups, args.dir) if args.before else None
    after = run_child(args.root.resolve(), args.window, args.setups, args.dir)
    doc = {"figures": figures(after, before), "after": after, "before": before}
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
