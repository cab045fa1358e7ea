"""What the MCP surface costs: a tool call over stdio, a wait's wake-up, and the server's cold start.

Issue 14's figures, each measured against the same operation without MCP in the same run:

1. **Round trip over stdio, warm server.** One real ``corral mcp`` subprocess (``python -m
   runner.cli mcp`` with this checkout on ``PYTHONPATH``) driven by the SDK's own client
   (``mcp.Client`` over ``StdioServerParameters``), a private ``CORRAL_HOME``, a controller lease
   acquired through ``corral_controller_acquire``. ``corral_status`` and ``corral_controller_renew``
   are called ``--calls`` times each, interleaved with the same operation done in this process on a
   runtime over the same home (``Runtime.open``): *direct* is the service call as the tool's handler
   makes it (the renew loads the controller's credential file first, as the server does every call),
   *dispatch* is ``runner.mcp.server.call_tool`` (argument check against the input schema, worker
   thread, handler) without a transport, and *raw* the call to a second warm server driven with
   bare JSON-RPC lines (no client SDK). MCP overhead = median(stdio) - median(direct); **target:
   under 5 ms**. The detail splits it into dispatch, transport (the server's SDK, the pipes, the
   client's SDK) and what the client SDK adds (stdio - raw), gives the p99s, and the CPU per call of
   the raw server (all its threads) beside the in-process call's: the figure load moves least.
2. **Wake-up of ``corral_wait_any``, end to end.** Two ``script`` reviewers leased through MCP. Each
   sample relays ``sleep S`` (``--sleep``, 0.15 s) to one of them (alternating), then calls
   ``corral_wait_any`` over both, the prompted one at its receipt's ``after_seq`` and the other at its
   current cursor (it does not settle). The agent's supervisor records the settle in its slot; the
   slot's ``updated_at`` is the store's wall clock read when that outcome transaction began. The
   sample is (wall clock when ``call_tool`` returned in this process) - (that stamp): the server's
   poll, its read of the winner, the result over stdio and the client's parsing, **plus** the
   supervisor's commit (its fsync), so it is an upper bound of the wake-up. The agent sleeps S after
   the call is sent, so the wait has begun long before it settles; a stamp earlier than the call
   would mean a wait that found the settle already done, and is counted (*early*, 0 by construction;
   such a run is refused). The same samples are taken in process (``Service.wait_any`` on this
   process's runtime), interleaved: the difference is what MCP adds to a wake-up. After each sample
   the receipt is collected (untimed). **Target: median under 10 ms.**
3. **Cold start.** ``python -m runner.cli mcp`` spawned fresh, timed from ``Popen`` to the answer of a
   raw JSON-RPC ``initialize`` written on its stdin (no SDK client in the measurement), then stdin
   closed and the process reaped; beside ``python -c pass`` in the same rounds, and as a ratio to it.
   Children read compiled bytecode from a private ``PYTHONPYCACHEPREFIX`` that the warm-up fills.
   No target in issue 14: value only.

``--quick`` (for ``bench/summary.py``; 20-30 s, most of it agents' runs and cold starts): fewer calls,
wake-ups and cold starts.
``--json`` prints ``{"figures": [...]}`` (bench/README.md) and the samples.

This file is ``bench/mcp.py`` as issue 14 names it; run as a script, its directory would come first
on ``sys.path`` and ``import mcp`` would find this file, so it moves the directory to the end before
importing the SDK (``common`` is still found there).
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH] + [str(BENCH)]

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
from common import percentile  # noqa: E402

ROOT = BENCH.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONTROLLER = "bench-mcp"
AUTHORITY_SHA = hashlib.sha256(b"bench mcp authority").hexdigest()
REVIEWERS = ("ra", "rb")
OVERHEAD_TARGET_MS = 5.0
WAKE_TARGET_MS = 10.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def environment(home: Path, pycache: Path) -> dict[str, str]:
    """This environment with a private CORRAL_HOME and bytecode cache, corral from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_") and k != "XDG_STATE_HOME"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env | {
        "CORRAL_HOME": str(home),
        "PYTHONPYCACHEPREFIX": str(pycache),
        "PYTHONPATH": str(ROOT),
        "CORRAL_TRANSITION_COVERAGE": "off",
    }


def stats(samples_ms: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples_ms),
        "median_ms": round(statistics.median(samples_ms), 3),
        "p99_ms": round(percentile(samples_ms, 99), 3),
        "min_ms": round(min(samples_ms), 3),
        "max_ms": round(max(samples_ms), 3),
    }


class Failed(Exception):
    """The bench cannot go on (a tool refused, a result is not what it must be)."""


def failure(exc: BaseException) -> Failed | None:
    """The :class:`Failed` inside ``exc`` (task groups wrap it in exception groups), if any."""
    if isinstance(exc, Failed):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = failure(inner)
            if found is not None:
                return found
    return None


def structured(result: Any, what: str) -> dict[str, Any]:
    if result.is_error:
        raise Failed(f"{what} failed over MCP: {result.structured_content}")
    content: dict[str, Any] = result.structured_content
    return content


# --- 1 and 2: a warm server -------------------------------------------------------------------------------


class Warm:
    """The warm server's client, and this process's runtime over the same state home."""

    def __init__(self, client: Any, runtime: Any) -> None:
        self.client, self.runtime = client, runtime
        from runner.mcp.server import call_tool
        from runner.mcp.tools import TOOLS

        self._call_tool, self._tools = call_tool, TOOLS

    async def mcp(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return structured(await self.client.call_tool(name, arguments), name)

    async def dispatch(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        async def report(progress: float, total: float | None, message: str) -> None:
            return None

        done: dict[str, Any] = await self._call_tool(self.runtime, self._tools[name], arguments, report)
        return done

    def direct_status(self) -> dict[str, Any]:
        return dict(self.runtime.service.inventory.status())

    def direct_renew(self) -> dict[str, Any]:
        from runner.service import RenewInput

        credential = self.runtime.credentials.load(CONTROLLER)
        lease: dict[str, Any] = self.runtime.service.controller.renew(
            RenewInput(CONTROLLER, credential, None)
        ).to_dict()
        return lease

    def slot_of(self, name: str) -> Any:
        from runner.sql.slots_sqlite import SQLiteSlots

        with SQLiteSlots(self.runtime.store).read() as reader:
            (slot,) = [s for s in reader.slots() if s.name == name]
        return slot


class RawClient:
    """A second warm ``corral mcp`` driven with bare JSON-RPC lines on its pipes: no client SDK.

    Its calls block this process's loop while they wait for the answer (one call at a time, nothing
    else runs meanwhile); the difference to the SDK client's call is what that client adds."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
        self.next_id = 1
        self.request("initialize", INITIALIZE["params"])
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdout is not None
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise Failed(f"the raw server closed its stdout during {method}")
            answer = json.loads(line)
            if answer.get("id") == self.next_id:
                break  # anything else is a notification
        if "result" not in answer:
            raise Failed(f"{method} failed on the raw server: {answer.get('error')}")
        result: dict[str, Any] = answer["result"]
        return result

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise Failed(f"{name} failed on the raw server: {result.get('structuredContent')}")
        content: dict[str, Any] = result["structuredContent"]
        return content

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def cpu_ns(pid: int) -> int:
    """On-CPU time of every live thread of ``pid`` so far (``/proc/PID/task/*/schedstat``, ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


async def round_trips(warm: Warm, raw: RawClient, calls: int) -> dict[str, Any]:
    async def direct(func: Callable[[], Any]) -> Any:
        return func()

    ways: dict[str, dict[str, Callable[[], Awaitable[Any]]]] = {
        "corral_status": {
            "stdio": lambda: warm.mcp("corral_status", {}),
            "raw": lambda: raw.call("corral_status", {}),
            "dispatch": lambda: warm.dispatch("corral_status", {}),
            "direct": lambda: direct(warm.direct_status),
        },
        "corral_controller_renew": {
            "stdio": lambda: warm.mcp("corral_controller_renew", {"controller": CONTROLLER}),
            "raw": lambda: raw.call("corral_controller_renew", {"controller": CONTROLLER}),
            "dispatch": lambda: warm.dispatch("corral_controller_renew", {"controller": CONTROLLER}),
            "direct": lambda: direct(warm.direct_renew),
        },
    }
    samples: dict[str, dict[str, list[float]]] = {tool: {way: [] for way in w} for tool, w in ways.items()}
    cpu: dict[str, dict[str, int]] = {tool: {"raw_server": 0, "direct": 0} for tool in ways}
    for _ in range(max(5, calls // 10)):  # warm-up: caches, threads, the client's schema checks
        for by_way in ways.values():
            for call in by_way.values():
                await call()
    for index in range(calls):
        order = [(tool, way) for tool, w in ways.items() for way in w]
        for tool, way in order if index % 2 == 0 else order[::-1]:
            server_before, own_before = cpu_ns(raw.proc.pid), time.thread_time_ns()
            samples[tool][way].append(await timed(ways[tool][way]))
            if way == "raw":  # the server's CPU for the call (its threads: stdin reader, loop, worker)
                cpu[tool]["raw_server"] += cpu_ns(raw.proc.pid) - server_before
            elif way == "direct":  # the operation's CPU, in this thread
                cpu[tool]["direct"] += time.thread_time_ns() - own_before
    out: dict[str, Any] = {}
    for tool, by_way in samples.items():
        rows = {way: stats(s) for way, s in by_way.items()}
        out[tool] = rows | {
            "overhead_ms": round(rows["stdio"]["median_ms"] - rows["direct"]["median_ms"], 3),
            "dispatch_ms": round(rows["dispatch"]["median_ms"] - rows["direct"]["median_ms"], 3),
            "transport_ms": round(rows["stdio"]["median_ms"] - rows["dispatch"]["median_ms"], 3),
            "client_sdk_ms": round(rows["stdio"]["median_ms"] - rows["raw"]["median_ms"], 3),
            "cpu_ms_per_call": {k: round(v / calls / 1e6, 3) for k, v in cpu[tool].items()},
            "samples_ms": {way: [round(x, 3) for x in s] for way, s in by_way.items()},
        }
    return out


def stamp_ns(slot: Any) -> int:
    """The slot's ``updated_at`` (store wall clock, µs) as ns since the epoch."""
    from runner.context import parse_time

    return int((parse_time(slot.updated_at) - EPOCH) // timedelta(microseconds=1) * 1000)


async def wake_ups(warm: Warm, samples: int, sleep: float) -> dict[str, Any]:
    from runner.service import CollectInput, RelayInput, WaitAnyInput

    service = warm.runtime.service
    found: dict[str, list[float]] = {"mcp": [], "in_process": []}
    early = {"mcp": 0, "in_process": 0}
    for index in range(samples * 2 + 2):  # two untimed warm-ups, then MCP and in process alternating
        way = "mcp" if index % 2 == 0 else "in_process"
        target = REVIEWERS[(index // 2) % 2]
        other = REVIEWERS[1 - (index // 2) % 2]
        other_seq = warm.slot_of(other).seq
        text = f"sleep {sleep:g}"
        if way == "mcp":
            receipt = (await warm.mcp("corral_relay", {"controller": CONTROLLER, "target": target, "text": text}))[
                "receipt"
            ]
            after, token = receipt["after_seq"], receipt["token"]
            arguments = {
                "controller": CONTROLLER,
                "targets": [{"name": target, "after_seq": after}, {"name": other, "after_seq": other_seq}],
                "timeout": 30,
            }
            sent_ns = time.time_ns()
            result = await warm.mcp("corral_wait_any", arguments)
            returned_ns = time.time_ns()
            winner = result["target"]
            await warm.mcp("corral_collect", {"controller": CONTROLLER, "receipts": [token], "timeout": 30})
        else:
            credential = warm.runtime.credentials.load(CONTROLLER)
            relayed = service.receipts.relay(RelayInput(CONTROLLER, credential, target, text))
            after = int(relayed.data["after_seq"])
            inp = WaitAnyInput(CONTROLLER, credential, ((target, after), (other, other_seq)), 30.0)
            sent_ns = time.time_ns()
            waited = await service.waits.wait_any(inp)
            returned_ns = time.time_ns()
            winner = waited.target
            await service.receipts.collect(CollectInput(CONTROLLER, credential, (relayed.token,), 30.0))
        if winner != target:
            raise Failed(f"wait_any woke for {winner!r}, not the prompted {target!r}")
        settled_ns = stamp_ns(warm.slot_of(target))
        if settled_ns < sent_ns:
            early[way] += 1
            raise Failed(f"{target} settled before its wait was asked ({way}): the agent's sleep is too short")
        if index >= 2:
            found[way].append((returned_ns - settled_ns) / 1e6)
    return {
        way: stats(s) | {"early": early[way], "samples_ms": [round(x, 3) for x in s]} for way, s in found.items()
    } | {"sleep_s": sleep}


async def warm_server(tmp: Path, env: dict[str, str], calls: int, wakes: int, sleep: float) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from runner.runtime import Config, Runtime

    work = tmp / "work"
    work.mkdir()
    params = StdioServerParameters(command=sys.executable, args=["-m", "runner.cli", "mcp"], env=env, cwd=str(tmp))
    with Runtime.open(Config.load(home=env["CORRAL_HOME"], environ=env, actor="bench:in-process")) as runtime:
        async with Client(params) as client:
            warm = Warm(client, runtime)
            acquire = {
                "controller": CONTROLLER,
                "authority_ref": "BENCH-14",
                "authority_sha256": AUTHORITY_SHA,
                "ttl": 3600,
            }
            await warm.mcp("corral_controller_acquire", acquire)
            for name in REVIEWERS:
                start = {"controller": CONTROLLER, "name": name, "kind": "script", "cwd": str(work)}
                await warm.mcp("corral_reviewer_start", start)
            raw = RawClient(env, tmp)
            try:
                trips = await round_trips(warm, raw, calls)
            finally:
                raw.close()
            wake = await wake_ups(warm, wakes, sleep)
            await warm.mcp(
                "corral_controller_release",
                {"controller": CONTROLLER, "checkpoint_ref": "bench done", "checkpoint_sha256": AUTHORITY_SHA},
            )
    return {"round_trips": trips, "wake_up": wake}


# --- 3: cold start ----------------------------------------------------------------------------------------


def cold_initialize(env: dict[str, str], cwd: Path) -> float:
    """ms from spawning ``corral mcp`` to reading its answer to ``initialize``; the process is then reaped."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        elapsed = (time.perf_counter() - start) * 1000
        answer = json.loads(line) if line else {}
        if answer.get("id") != 1 or "result" not in answer:
            raise Failed(f"corral mcp did not answer initialize: {line[:300]!r}")
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return elapsed


def python_pass(env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, cwd=cwd, check=True)
    return (time.perf_counter() - start) * 1000


def cold_starts(env: dict[str, str], cwd: Path, runs: int) -> dict[str, Any]:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "runner")], env=env, cwd=cwd, check=True)
    cold_initialize(env, cwd)  # warm-up: the SDK's bytecode into the private cache
    python_pass(env, cwd)
    mcp_ms: list[float] = []
    python_ms: list[float] = []
    for index in range(runs):
        pair = [(mcp_ms, cold_initialize), (python_ms, python_pass)]
        for samples, func in pair if index % 2 == 0 else pair[::-1]:
            samples.append(func(env, cwd))
    mcp_row, python_row = stats(mcp_ms), stats(python_ms)
    return {
        "corral_mcp_initialize": mcp_row | {"samples_ms": [round(x, 2) for x in mcp_ms]},
        "python_pass": python_row | {"samples_ms": [round(x, 2) for x in python_ms]},
        "ratio": round(mcp_row["median_ms"] / python_row["median_ms"], 2),
    }


# --- the report -------------------------------------------------------------------------------------------


def figures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for tool, trip in doc["round_trips"].items():
        stdio, direct = trip["stdio"], trip["direct"]
        overhead = trip["overhead_ms"]
        out.append(
            {
                "figure": f"MCP round trip over stdio, {tool}: overhead over the in-process call",
                "value": overhead,
                "unit": "ms",
                "target": f"< {OVERHEAD_TARGET_MS:g} ms (median)",
                "met": overhead < OVERHEAD_TARGET_MS,
                "detail": f"stdio median {stdio['median_ms']} ms (p99 {stdio['p99_ms']}), in process "
                f"{direct['median_ms']} ms (p99 {direct['p99_ms']}), of {stdio['n']} calls each; "
                f"dispatch {trip['dispatch_ms']} ms + transport {trip['transport_ms']} ms, of which the SDK client "
                f"{trip['client_sdk_ms']} ms (bare JSON-RPC client: median {trip['raw']['median_ms']} ms); "
                f"CPU per call: the server {trip['cpu_ms_per_call']['raw_server']} ms, in process "
                f"{trip['cpu_ms_per_call']['direct']} ms",
            }
        )
    wake = doc["wake_up"]
    mcp_wake, own = wake["mcp"], wake["in_process"]
    out.append(
        {
            "figure": "corral_wait_any wake-up over MCP, end to end",
            "value": mcp_wake["median_ms"],
            "unit": "ms",
            "target": f"< {WAKE_TARGET_MS:g} ms (median)",
            "met": mcp_wake["median_ms"] < WAKE_TARGET_MS,
            "detail": f"settle stamp -> call returned (includes the supervisor's commit), median of {mcp_wake['n']}, "
            f"p99 {mcp_wake['p99_ms']} ms; in process (Service.wait_any) {own['median_ms']} ms, "
            f"so MCP adds {round(mcp_wake['median_ms'] - own['median_ms'], 3)} ms; early {mcp_wake['early']}",
        }
    )
    cold = doc["cold_start"]
    started, python = cold["corral_mcp_initialize"], cold["python_pass"]
    out.append(
        {
            "figure": "cold `corral mcp` to `initialize` answered / cold `python -c pass`",
            "value": cold["ratio"],
            "unit": "x",
            "target": "value only (issue 14 sets none)",
            "met": True,
            "detail": f"corral mcp to initialize answered: median {started['median_ms']} ms "
            f"(p99 {started['p99_ms']}), python -c pass {python['median_ms']} ms, of {started['n']} runs each",
        }
    )
    return out


def render(doc: dict[str, Any]) -> str:
    lines = ["corral mcp over stdio (issue 14)"]
    for figure in doc["figures"]:
        mark = "met" if figure["met"] else "MISSED"
        lines.append(f"  {figure['figure']}: {figure['value']} {figure['unit']} (target {figure['target']}: {mark})")
        lines.append(f"    {figure['detail']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per tool and way (default: 200)")
    parser.add_argument("--wakes", type=int, default=30, help="wake-ups timed per way (default: 30)")
    parser.add_argument("--sleep", type=float, default=0.15, help="seconds each prompted agent sleeps (0.15)")
    parser.add_argument("--cold-runs", type=int, default=9, help="cold starts timed (default: 9)")
    parser.add_argument("--quick", action="store_true", help="a run of seconds (100 calls, 8 wakes, 3 colds)")
    parser.add_argument("--dir", type=Path, help="where to put the state home (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures and samples as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.wakes, args.cold_runs = min(args.calls, 100), min(args.wakes, 8), min(args.cold_runs, 3)
    if args.calls < 1 or args.wakes < 1 or args.cold_runs < 1 or not 0.05 <= args.sleep <= 5:
        parser.error("--calls, --wakes, --cold-runs must be >= 1 and --sleep from 0.05 to 5 s")
    with tempfile.TemporaryDirectory(prefix="corral-bench-mcp-", dir=args.dir) as name:
        tmp = Path(name)
        env = environment(tmp / "home", tmp / "pycache")
        try:
            cold = cold_starts(env, tmp, args.cold_runs)
            doc: dict[str, Any] = anyio.run(warm_server, tmp, env, args.calls, args.wakes, args.sleep)
        except BaseException as exc:
            found = failure(exc)
            if found is None:
                raise
            print(f"bench/mcp.py: {found}", file=sys.stderr)
            return 1
        doc["cold_start"] = cold
    doc = {"figures": figures(doc), **doc}
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
