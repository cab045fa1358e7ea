"""The embedded agent host: every agent is a supervised slot in the state home.

A slot is a row of the host's slot port (``runner.agents.slots``: status, ``seq``, the current run),
kept in the store's database and written in the store's transactions, plus a directory
``$CORRAL_HOME/agents/<pane>/`` holding one log per run. A new agent is ``idle`` at seq 0 and runs
nothing. A prompt moves it to ``working`` (seq + 1) and starts a detached supervisor that runs the
kind's fixed command in the agent's cwd with the prompt on stdin (or as one argument), never through
a shell, with only the kind's allowed environment (:meth:`Kind.environment`: no ``CORRAL_*``); when
the command exits the supervisor records ``done`` (or ``blocked``: a configured exit code or output
marker) at seq + 2 with the exit status. Reading output changes nothing.

Any process can observe an agent through the store's database, and agents outlive the coordinator
that prompted them. A wait (one pane or many) ticks every ``POLL`` seconds: it checks the slot port's
change token (SQLite's ``PRAGMA data_version``: no table read) and reads its targets' slots, all in one
query, only when the store changed since the last tick. So it wakes within a few milliseconds of the
change, never sees a state older than its cursor, and costs almost nothing while nothing happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from runner.agents.abc import (
    SETTLED,
    AgentBusyError,
    AgentError,
    AgentGoneError,
    AgentHost,
    Cursor,
    Expect,
    Observation,
    StartOptions,
    WaitTimeoutError,
    check_promptable,
)
from runner.agents.drivers import Driver, RunSpec, driver
from runner.agents.kinds import Kind, Kinds
from runner.agents.progress import ProgressReader, ProgressReaders, RunProgress
from runner.agents.slots import AgentSlot, SlotStore, slot_store
from runner.context import Gate
from runner.errors import (
    ConflictError,
    CorralError,
    InvalidError,
    RefusedError,
    StoreBusyError,
    StoreUnavailableError,
)
from runner.log import get_logger
from runner.store.abc import Store, Transaction

logger = get_logger(__name__)  # imports logging only to log (cold start)

POLL = 0.002  # seconds between a wait's ticks (a change check, and a slot read only after a change)
QUIET_AFTER = 2.0  # a wait whose store has not changed for this long ticks every POLL_QUIET instead
POLL_QUIET = 0.008
STUCK_AFTER = 30.0  # a working slot with no supervisor pid for this long is reported unknown


def this_machine() -> str:
    """The machine a process host runs on, as its slots record it (``options.host``)."""
    import socket  # here: only a host that starts or judges an agent needs it

    return socket.gethostname()


class AgentRemoteError(RefusedError, AgentError):
    """The agent lives on another machine (a store shared by coordinators on several machines): this
    process host observes it through the store but cannot prompt, close or read it; run the command on
    ``details.host``. Nothing was done."""

    default_code = "agent_remote"


def _run_result(directory: Path, run: int) -> dict[str, Any] | None:
    """The result file the supervisor wrote for ``run`` (None: not written, or not a driven kind)."""
    try:
        raw = (directory / f"run-{run}.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        raise InvalidError(
            f"the run result {directory}/run-{run}.json is not JSON: refused (corrupt state is never guessed at)",
            code="agent_run_corrupt",
            path=str(directory / f"run-{run}.json"),
        ) from None
    return value if isinstance(value, dict) else None


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs. An exited process its parent has not reaped yet (a zombie) has
    stopped: a detached supervisor's parent is init, and some inits (a container's, a microVM's) reap
    only every second or two, which would make every close of a working agent wait out its grace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (or it raced away): the signal answered, so take it as running
    return state not in (b"Z", b"X")


class ProcessHost(AgentHost):
    """Agents as supervised subprocesses, their state in the host's slot port beside the store.

    Args:
        store: the store whose effect gates the host's changes run under (and whose database the
            slots live in).
        root: the directory of the slot directories (``$CORRAL_HOME/agents``).
        kinds: the agent kinds it can start.
        slots: the slot port; by default the adapter for ``store``'s kind (:func:`slot_store`).
    """

    name = "process"

    def __init__(
        self, store: Store, root: Path, kinds: Kinds, slots: SlotStore | None = None, machine: str | None = None
    ) -> None:
        self.slots = slots if slots is not None else slot_store(store)
        if self.slots.store is not store:
            # A composition bug: the gate and the slot's compare-and-set would commit separately.
            raise CorralError("the slot port must live in the host's store (one transaction for slot and gate)")
        self.store = store
        self.root = root
        self.kinds = kinds
        self.machine = machine or this_machine()  # recorded with every slot it starts
        self.store_url = store.url
        self.progress_readers = ProgressReaders()

    # --- observing ---------------------------------------------------------------------------------

    def _slot(self, pane_id: str) -> AgentSlot:
        with self.slots.read() as reader:
            slot = reader.slot(pane_id)
        if slot is None or slot.closed:
            raise AgentGoneError(f"no live agent in pane {pane_id!r}", pane_id=pane_id)
        return slot

    def host_of(self, slot: AgentSlot) -> str | None:
        """The machine ``slot`` lives on (None: recorded before slots named theirs: this one)."""
        host = slot.options.get("host")
        return host if isinstance(host, str) else None

    def remote(self, slot: AgentSlot) -> bool:
        """Whether ``slot`` lives on another machine: observable here, never prompted, closed or read."""
        host = self.host_of(slot)
        return host is not None and host != self.machine

    def _local(self, slot: AgentSlot, doing: str) -> None:
        if self.remote(slot):
            raise AgentRemoteError(
                f"agent {slot.pane_id!r} lives on {self.host_of(slot)}, not on this machine ({self.machine}): "
                f"it is observed through the store, but {doing} it runs there",
                pane_id=slot.pane_id,
                host=self.host_of(slot),
                machine=self.machine,
                delivered=False,
            )

    def _observe(self, slot: AgentSlot) -> Observation:
        status = slot.status
        if status == "working":
            if slot.pid is not None and self.remote(slot):
                pass  # its supervisor runs on another machine: no pid of ours says anything about it
            elif slot.pid is not None and not _alive(slot.pid):
                status = "unknown"  # the supervisor died without recording an outcome
            elif slot.pid is None and slot.updated_at is not None:
                from runner.context import parse_time

                try:
                    now = self.store.now()  # on PostgreSQL, the server's clock: a round trip
                except (StoreBusyError, StoreUnavailableError):
                    now = None  # no clock to judge by: a working slot is working (its prompt may be out)
                if now is not None and (now - parse_time(slot.updated_at)).total_seconds() > STUCK_AFTER:
                    status = "unknown"
        nonce = slot.options.get("nonce")
        session = slot.options.get("session_id")
        spend = slot.options.get("spend")
        return Observation(
            slot.pane_id,
            slot.name,
            slot.kind,
            slot.cwd,
            status,
            slot.seq,
            slot.exit_status,
            nonce if isinstance(nonce, str) else None,
            revision=slot.seq,  # a slot's seq is its own: it counts this agent's changes only
            session_id=session if isinstance(session, str) else None,
            spend=spend if isinstance(spend, dict) else None,
        )

    def get(self, pane_id: str) -> Observation:
        return self._observe(self._slot(pane_id))

    def list(self) -> list[Observation]:
        with self.slots.read() as reader:
            slots = reader.slots()
        return [self._observe(slot) for slot in slots]

    def read(self, pane_id: str, lines: int) -> str:
        slot = self._slot(pane_id)
        self._local(slot, "reading")
        if slot.run is None:
            return ""
        kind_driver = driver(self.kinds.get(slot.kind).driver) if slot.kind in self.kinds.names() else None
        if kind_driver is not None and kind_driver.structured:
            return self._read_structured(slot, kind_driver, lines)
        log = self._dir(slot) / f"run-{slot.run}.log"
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:]) + ("\n" if text.endswith("\n") and lines > 0 else "")

    def _read_structured(self, slot: AgentSlot, chosen: Driver, lines: int) -> str:
        """A driven CLI's output as a coordinator reads it: the final message once the run ended, its
        progress (tool calls and file changes, names and paths only) while it runs."""
        result = _run_result(self._dir(slot), int(slot.run or 0))
        if result is not None:
            text = str(result.get("final") or "")
        else:
            text = "\n".join(self._progress(slot, chosen).lines)
            text = text + "\n" if text else ""
        if lines <= 0:
            return ""
        kept = text.splitlines()[-lines:]
        return "\n".join(kept) + ("\n" if text.endswith("\n") and kept else "")

    def progress(self, pane_id: str, after: int = 0) -> RunProgress | None:
        slot = self._slot(pane_id)
        self._local(slot, "reading")
        if slot.run is None or slot.kind not in self.kinds.names():
            return None
        chosen = driver(self.kinds.get(slot.kind).driver)
        return self._progress(slot, chosen, after) if chosen.structured else None

    def _progress(self, slot: AgentSlot, chosen: Driver, after: int = 0) -> RunProgress:
        """The slot's latest run's progress, read on from where this host's reader of that run stopped."""
        run = int(slot.run or 0)
        log = self._dir(slot) / f"run-{run}.log"
        # Invariant: a run is over once the slot moved past its cursor: its log is complete then.
        running = slot.status == "working" and slot.seq == run
        return self.progress_readers.read(
            (slot.pane_id, run, str(log)),
            lambda: ProgressReader(log, chosen, self.run_spec(slot)),
            slot.pane_id,
            run,
            running,
            after,
        )

    def get_many(self, pane_ids: Sequence[str]) -> dict[str, Observation]:
        with self.slots.read() as reader:
            slots = reader.slots_of(pane_ids)
        return {pane_id: self._observe(slot) for pane_id, slot in slots.items() if not slot.closed}

    def cursors(self, pane_ids: Sequence[str]) -> dict[str, Cursor]:
        # Invariant: settledness needs no liveness check: _observe turns only a working slot into
        # unknown, and neither is settled; closed slots are gone.
        with self.slots.read() as reader:
            progress = reader.progress_of(pane_ids)
        return {pane_id: Cursor(p.seq, p.status in SETTLED) for pane_id, p in progress.items() if not p.closed}

    async def wait(self, pane_id: str, after_seq: int, timeout: float) -> Observation:
        found, last = await self._watching({pane_id: after_seq}, timeout)
        if not found:
            seen = last.get(pane_id)
            status, seq = (self._observe(seen).status, seen.seq) if seen is not None else ("gone", None)
            raise WaitTimeoutError(
                f"agent {pane_id!r} did not settle after seq {after_seq} within {timeout:g} s "
                f"(now {status} at seq {seq})",
                pane_id=pane_id,
                after_seq=after_seq,
                status=status,
                seq=seq,
            )
        slot = found[pane_id]
        if slot is None:
            raise AgentGoneError(f"no live agent in pane {pane_id!r}", pane_id=pane_id)
        return self._observe(slot)

    async def wait_many(self, targets: Mapping[str, int], timeout: float) -> dict[str, Observation | None]:
        found, _ = await self._watching(dict(targets), timeout)
        return self._found(targets, timeout, found)

    def wait_many_blocking(
        self, targets: Mapping[str, int], timeout: float, stop: threading.Event
    ) -> dict[str, Observation | None]:
        found, _ = self._watch(dict(targets), timeout, stop)
        if not found and stop.is_set():
            return {}
        return self._found(targets, timeout, found)

    def _found(
        self, targets: Mapping[str, int], timeout: float, found: dict[str, AgentSlot | None]
    ) -> dict[str, Observation | None]:
        if not found:
            raise WaitTimeoutError(
                f"none of {len(targets)} agents settled within {timeout:g} s", pane_ids=list(targets)
            )
        return {pane_id: None if slot is None else self._observe(slot) for pane_id, slot in found.items()}

    async def _watching(
        self, targets: dict[str, int], timeout: float
    ) -> tuple[dict[str, AgentSlot | None], dict[str, AgentSlot]]:
        import anyio  # only waits need it: starting, prompting and closing agents do not pay for it

        # The store is synchronous (its busy retry sleeps), so the poll loop runs in a worker thread of
        # its own (a limiter per wait: waits never queue behind anyio's default 40 threads). One hop
        # to the thread and one back, not two per tick. Cancelling the wait abandons the thread at
        # once; ``stop`` ends its loop within one tick.
        stop = threading.Event()
        try:
            return await anyio.to_thread.run_sync(
                self._watch, targets, timeout, stop, abandon_on_cancel=True, limiter=anyio.CapacityLimiter(1)
            )
        finally:
            stop.set()

    def _watch(
        self, targets: dict[str, int], timeout: float, stop: threading.Event
    ) -> tuple[dict[str, AgentSlot | None], dict[str, AgentSlot]]:
        """The blocking body of the waits: tick until a target is settled past its cursor or gone.

        Returns the targets found so (their slots; a gone one as None) and, when none was found by
        the deadline (or ``stop`` was set), the targets' slots as last read. Each tick takes the slot
        port's change token (SQLite: ``PRAGMA data_version``, which reads no table) and, only when it
        moved, one query in a snapshot for every target's status and seq, so an idle tick reads no
        slot. Ticks are ``POLL`` apart, ``POLL_QUIET`` once the store has been
        unchanged for ``QUIET_AFTER`` seconds.
        """
        pane_ids = list(targets)
        deadline = time.monotonic() + timeout
        moved_at = -QUIET_AFTER
        token: Hashable | None = None
        first = True
        while True:
            now_token = self.slots.change_token()
            if first or now_token is None or now_token != token:
                token, first, moved_at = now_token, False, time.monotonic()
                with self.slots.read() as reader:
                    progress = reader.progress_of(pane_ids)
                    found = [
                        pane_id
                        for pane_id, after in targets.items()
                        if (seen := progress.get(pane_id)) is None
                        or seen.closed
                        or (seen.seq > after and seen.status in SETTLED)
                    ]
                    if found:
                        slots = reader.slots_of(found)  # the same snapshot: the state just judged
                        return {p: s if (s := slots.get(p)) is not None and not s.closed else None for p in found}, {}
            now = time.monotonic()
            if stop.is_set():
                return {}, {}  # the wait was cancelled: nobody reads this result
            if now >= deadline:
                with self.slots.read() as reader:
                    return {}, reader.slots_of(pane_ids)
            time.sleep(min(POLL if now - moved_at < QUIET_AFTER else POLL_QUIET, deadline - now))

    # --- acting ------------------------------------------------------------------------------------

    @staticmethod
    def _dir(slot: AgentSlot) -> Path:
        return Path(slot.dir)

    def _gated(self, gate: Gate | None, tx: Transaction) -> None:
        """Run ``gate`` inside ``tx`` (atomic with the hand-over) when it checks the same store."""
        if gate is not None:
            gate(tx) if gate.store is self.store else gate()

    def start(
        self,
        name: str,
        kind: str,
        cwd: str,
        options: StartOptions,
        gate: Gate | None = None,
        nonce: str | None = None,
    ) -> Observation:
        spec = self.kinds.get(kind)
        spec.check_options(options)
        with self.slots.write() as tx:
            # Invariant: the slot exists only if the lease's authority held when it was created.
            self._gated(gate, tx.store_tx)
            pane_id = f"p{tx.store_tx.next_number('pane')}"
            # The start nonce rides with the recorded options, so reconcile can find this exact slot.
            opts: dict[str, Any] = {
                k: v
                for k, v in (
                    ("model", options.model),
                    ("effort", options.effort),
                    ("nonce", nonce),
                    ("role", options.role),
                    ("max_turns", options.max_turns),
                    ("budget_usd", options.budget_usd),
                    ("unconfined_reason", options.unconfined_reason),
                )
                if v is not None
            }
            if options.owned:
                opts["owned"] = list(options.owned)
            if options.locked:
                opts["locked"] = list(options.locked)
            opts["host"] = self.machine  # the machine the agent lives on
            slot = tx.put_slot(
                AgentSlot(pane_id, name, kind, cwd, "idle", 0, options=opts, dir=str(self.root.absolute() / pane_id)),
                expected_seq=None,
            )
        from runner import faults  # test-only crash point: the pane exists, no lease records it yet

        faults.point("agent.start:pane")
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._dir(slot).mkdir(mode=0o700)
        except OSError as exc:
            raise AgentError(
                f"could not create the slot directory for {pane_id}: {exc}", code="agent_start_failed", pane_id=pane_id
            ) from None
        return self._observe(slot)

    def run_spec(self, slot: AgentSlot, schema: str | None = None) -> RunSpec:
        """What the slot's next run is, from what its start recorded and what its runs learnt: the role
        and scopes, the conversation to continue (or the id of the one to start), the limits."""
        o = slot.options
        session = o.get("session_id") if isinstance(o.get("session_id"), str) else None
        new_session = o.get("new_session_id") if isinstance(o.get("new_session_id"), str) else None
        schema_path = None
        if schema is not None:
            schema_path = str(self._dir(slot) / f"schema-{slot.seq + 1}.json")
        return RunSpec(
            role=str(o.get("role") or "agent"),
            cwd=slot.cwd,
            session_id=session,
            new_session_id=new_session,
            owned=tuple(o.get("owned") or ()),
            locked=tuple(o.get("locked") or ()),
            max_turns=o.get("max_turns") if isinstance(o.get("max_turns"), int) else None,
            budget_usd=float(o["budget_usd"]) if isinstance(o.get("budget_usd"), (int, float)) else None,
            schema=schema,
            schema_path=schema_path,
            model=o.get("model") if isinstance(o.get("model"), str) else None,
            effort=o.get("effort") if isinstance(o.get("effort"), str) else None,
            unconfined=self.kinds.get(slot.kind).unconfined,
            session_usage=dict(o["session_usage"]) if isinstance(o.get("session_usage"), dict) else None,
        )

    def run_result(self, pane_id: str) -> dict[str, Any] | None:
        """The structured result of the agent's latest run (its driver's reading), or None: still running,
        or a kind whose driver reads nothing."""
        slot = self._slot(pane_id)
        if slot.run is None:
            return None
        return _run_result(self._dir(slot), slot.run)

    def prompt(
        self,
        pane_id: str,
        text: str,
        expect: Expect | None = None,
        gate: Gate | None = None,
        schema: str | None = None,
    ) -> Observation:
        slot = self._slot(pane_id)
        self._local(slot, "prompting")
        # The compare-and-set to ``working`` below is on this read's seq: the check holds atomically.
        check_promptable(self._observe(slot), expect)
        kind = self.kinds.get(slot.kind)
        chosen = driver(kind.driver)
        if schema is not None and not chosen.takes_schema:
            raise AgentError(
                f"agent kind {kind.name!r} (driver {chosen.name}) cannot answer to a schema",
                code="agent_schema_unsupported",
                pane_id=pane_id,
                delivered=False,
            )
        if chosen.takes_session_id and not isinstance(slot.options.get("session_id"), str):
            import uuid

            # A conversation's id is chosen before its first run, and kept until a run confirms it.
            slot = replace(slot, options={**slot.options, "new_session_id": str(uuid.uuid4())})
        spec = self.run_spec(slot, schema)
        run = slot.seq + 1
        log = self._dir(slot) / f"run-{run}.log"
        # The agent's whole environment (an allow-list, never CORRAL_*): the supervisor itself
        # inherits ours to reach the store; the command it runs gets only this.
        env = kind.environment(os.environ)
        argv, notes = self._confined(slot, kind, chosen, spec, env, kind.run_argv(spec))
        job = {
            "store": self.store_url,
            "pane_id": pane_id,
            "run": run,
            "driver": chosen.name,
            "spec": asdict(spec),
            "argv": list(argv),
            "notes": list(notes),
            "env": env,
            "prompt_mode": "stdin" if chosen.structured else kind.prompt,
            "text": text,
            "cwd": slot.cwd,
            "log": str(log),
            "blocked_exit_codes": list(kind.blocked_exit_codes),
            "blocked_marker": kind.blocked_marker,
        }
        from runner.observe import tracing

        parent = tracing.traceparent()
        if parent is not None:  # the supervisor records the run as a span under the one prompting it
            job.update(traceparent=parent, agent=slot.name, kind=slot.kind)
        try:
            with self.slots.write() as tx:
                # Invariant: the agent moves to working only if, in this same transaction, the fence the
                # prompt was authorised under still holds and its receipt is still reserved.
                self._gated(gate, tx.store_tx)
                working = tx.put_slot(
                    replace(slot, status="working", seq=run, run=run, pid=None, exit_status=None), slot.seq
                )
        except ConflictError:
            raise AgentBusyError(
                f"agent {pane_id!r} changed while the prompt was handed over", pane_id=pane_id, delivered=False
            ) from None
        try:
            log.touch(mode=0o600)
            if spec.schema_path is not None and schema is not None:
                Path(spec.schema_path).write_text(schema, encoding="utf-8")
            launched = subprocess.run(
                [sys.executable, "-S", str(Path(__file__).with_name("supervisor.py"))],  # -S: see supervisor.py
                input=json.dumps(job).encode("utf-8"),
                capture_output=True,
                cwd=slot.cwd,
                timeout=30,
                check=True,
            )
            pid = int(launched.stdout.decode().strip())
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self._fail_run(working, f"could not start the supervisor: {exc}")
            raise AgentError(
                f"the prompt for {pane_id!r} was not handed over: {exc}",
                code="agent_prompt_failed",
                pane_id=pane_id,
                delivered=False,
            ) from None
        try:
            with self.slots.write() as tx:
                working = tx.put_slot(replace(working, pid=pid), working.seq)
        except (StoreBusyError, StoreUnavailableError):
            pass  # the supervisor runs, its pid unrecorded: the prompt is out; its outcome will be recorded
        except ConflictError as exc:
            if exc.details.get("closed"):
                # Closed while the supervisor started: close() had no pid to stop, so stop it here. The
                # command may have begun: whether the prompt was delivered is not known.
                self._stop(pid)
                raise AgentError(
                    f"agent {pane_id!r} was closed while the prompt was handed over; its run was stopped",
                    code="agent_prompt_failed",
                    pane_id=pane_id,
                ) from None
            # Otherwise it already finished; its outcome is recorded.
        return self._observe(working)

    def _confined(
        self, slot: AgentSlot, kind: Kind, chosen: Driver, spec: RunSpec, env: dict[str, str], argv: Sequence[str]
    ) -> tuple[Sequence[str], Sequence[str]]:
        """``argv`` under Bubblewrap (:mod:`runner.sandbox.confine`) and the notes for the run (a file beside its log),
        or ``argv`` itself for a slot started ``--unconfined`` (its reason recorded at the start).

        Raises:
            AgentError: ``sandbox_unavailable`` (nothing was handed over) when Bubblewrap cannot start.
        """
        if isinstance(slot.options.get("unconfined_reason"), str):
            return list(argv), [f"corral: unconfined: {slot.options['unconfined_reason']}"]
        from runner.sandbox import confine
        from runner.sandbox.bwrap import SandboxUnavailableError

        try:
            binary = confine.probe(kind.network)
        except SandboxUnavailableError as exc:
            raise AgentError(
                f"{exc.message}; agent {slot.pane_id!r} was not prompted (start it --unconfined --reason R to "
                "run it without confinement)",
                code="sandbox_unavailable",
                pane_id=slot.pane_id,
                delivered=False,
            ) from None
        state = chosen.state_dirs(env)
        for directory in state:
            with contextlib.suppress(OSError):
                os.makedirs(directory, mode=0o700, exist_ok=True)
        rules = confine.Confinement(
            role=spec.role,
            cwd=slot.cwd,
            owned=spec.owned,
            locked=spec.locked,
            state_dirs=(*state, *chosen.state_files(env)),
            hidden=(str(self.root.absolute()),),
            # Its own slot (a verdict schema), and the kind's command where it lives under /tmp.
            readable=(str(self._dir(slot)), *(p for p in argv if p.startswith("/tmp/") and os.path.exists(p))),
            network=kind.network,
            tmpdir=env.get("TMPDIR"),
            whole_worktree=chosen.own_sandbox,
        )
        wrapped, notes = confine.wrap(binary, rules, argv)
        return wrapped, [f"corral: {note}" for note in notes]

    def _fail_run(self, working: AgentSlot, why: str) -> None:
        logger.warning("agent %s: %s", working.pane_id, why)
        try:
            with self.slots.write() as tx:
                tx.put_slot(replace(working, status="done", seq=working.seq + 1, exit_status=127), working.seq)
        except ConflictError:
            pass

    def close(self, pane_id: str, gate: Gate | None = None) -> None:
        with self.slots.write() as tx:
            # Closed first, under the gate: a closed slot is never written again, so a supervisor still
            # running can record nothing more; it is stopped just after.
            self._gated(gate, tx.store_tx)
            current = tx.slot(pane_id)
            if current is None or current.closed:
                return
            self._local(current, "closing")
            tx.put_slot(replace(current, closed=True, pid=None), current.seq)
        if current.pid is not None and current.status == "working":
            self._stop(current.pid)

    def _stop(self, pid: int) -> None:
        """Stop a supervisor and its command (they share a process group, led by the supervisor).

        SIGTERM first, and up to 2 s for the supervisor to go; then SIGKILL to the group, whatever is
        left of it: a member may outlive its supervisor because it ignores SIGTERM (``bwrap`` does while
        it sets up its namespaces, and would then sleep for ever). The group's id cannot name another
        group while any member of it lives, and none is left alive otherwise, so the SIGKILL reaches
        this run's processes only."""
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "root": str(self.root), "kinds": self.kinds.names()}
