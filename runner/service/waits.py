"""Waits and observations: the first of a controller's leased agents to settle, and read-only looks at
any agent on a host (``corral agent get|read|wait``), leased or not.

The waits are async; every store read and synchronous host call in them runs on a worker thread
(:func:`~runner.service.core.in_thread`, or ``wait_any``'s own thread: set-up, wait and output in
one hop where the host can wait blocking); a host's own ``wait`` is async already.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner import fence
from runner.agents.abc import AgentError, AgentGoneError, AgentHost, Observation, WaitTimeoutError
from runner.context import Instance
from runner.errors import RefusedError
from runner.guards.agents import LEASE_MACHINES
from runner.service.core import Core, in_thread
from runner.service.inputs.waits import AgentInput, AgentProgressInput, AgentWaitInput, WaitAnyInput
from runner.service.views.waits import WaitAnyResult, Winner

if TYPE_CHECKING:
    import anyio.abc  # anyio costs a cold CLI ~35 ms: only the commands that wait import it

    from runner.agents.progress import RunProgress

Entry = tuple[str, AgentHost, str, int]
"""What :meth:`Waits.first_settled` watches: a key, the agent's host, its pane, the cursor to pass."""


def _cursors(entries: list[Entry]) -> dict[str, int]:
    """Each pane's cursor for a host's wait: the lowest of its entries' (a pane may be two targets)."""
    targets: dict[str, int] = {}
    for _, _, pane_id, after in entries:
        targets[pane_id] = min(after, targets.get(pane_id, after))
    return targets


def _settled_key(entries: list[Entry], found: Mapping[str, Observation | None]) -> str | None:
    """The first entry (in order) that a host's wait found settled past its cursor, or gone."""
    for key, _, pane_id, after in entries:
        # A vanished agent ends the wait too: collect will say identity_changed.
        if pane_id in found and ((seen := found[pane_id]) is None or seen.seq > after):
            return key
    return None  # (a host breaking its contract: nothing it returned is past a cursor)


def _timed_out(entries: list[Entry], timeout: float) -> WaitTimeoutError:
    return WaitTimeoutError(
        f"none of {len(entries)} agents settled within {timeout:g} s", targets=[e[0] for e in entries]
    )


class Waits:
    """Cursor-bound waits on leased agents, and read-only observations of any agent."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def first_settled(self, entries: list[Entry], timeout: float) -> str:
        """The key of the first entry whose agent settles after its cursor; the other waits are cancelled.

        One wait per host over all of that host's entries (:meth:`AgentHost.wait_many`: the process
        host reads every target's slot in one query per tick); several hosts race. When several settle
        in the same tick, the first of them in ``entries`` wins. A vanished agent ends the wait too (its
        key wins). Raises :class:`WaitTimeoutError` when none settles within ``timeout`` seconds.
        """
        import anyio

        groups: dict[int, tuple[AgentHost, list[Entry]]] = {}
        for entry in entries:
            groups.setdefault(id(entry[1]), (entry[1], []))[1].append(entry)
        winner: list[str] = []

        async def watch(host: AgentHost, mine: list[Entry]) -> str | None:
            try:
                found = await host.wait_many(_cursors(mine), timeout)
            except AgentGoneError as exc:  # a host that raises instead of reporting the gone pane
                found = {str(exc.details.get("pane_id", mine[0][2])): None}
            except WaitTimeoutError:
                return None
            return _settled_key(mine, found)

        async def race(host: AgentHost, mine: list[Entry], group: anyio.abc.TaskGroup) -> None:
            key = await watch(host, mine)
            if key is not None and not winner:
                winner.append(key)
                group.cancel_scope.cancel()

        if len(groups) == 1:
            ((host, mine),) = groups.values()
            with anyio.move_on_after(timeout):
                key = await watch(host, mine)
                if key is not None:
                    winner.append(key)
        else:
            with anyio.move_on_after(timeout):
                async with anyio.create_task_group() as group:
                    for host, mine in groups.values():
                        group.start_soon(race, host, mine, group)
        if not winner:
            raise _timed_out(entries, timeout)
        return winner[0]

    def _targets(self, inp: WaitAnyInput) -> tuple[list[Entry], list[tuple[str, AgentHost, str]]]:
        """The fence checked, each target's lease and cursor, and the targets that win at once.

        Set-up costs do not grow with the targets: the fence and every target's lease come from one
        snapshot, and the targets without a cursor are looked at with one call per host that reads
        only where each is (:meth:`AgentHost.cursors`: seq and settled, no observation built). The
        first failing target (in the order given) is refused as a per-target look-up would refuse it.
        """
        leases = self._leases(inp)
        hosts: dict[str, AgentHost] = {}
        panes: list[tuple[str, str, str, int | None]] = []  # (name, host name, pane, cursor given)
        bare: dict[str, list[str]] = {}  # host name -> the panes of the targets without a cursor
        for name, after in inp.targets:
            lease = leases.get(name)
            if lease is None:
                break  # refused below, once the targets before it are judged
            host_name, pane_id = str(lease.data["host"]), str(lease.data["pane_id"])
            if host_name not in hosts:
                hosts[host_name] = self.core.host(host_name)
            panes.append((name, host_name, pane_id, after))
            if after is None:
                bare.setdefault(host_name, []).append(pane_id)
        now = {host_name: hosts[host_name].cursors(pane_ids) for host_name, pane_ids in bare.items()}
        entries: list[Entry] = []
        ready: list[tuple[str, AgentHost, str]] = []
        for name, host_name, pane_id, after in panes:
            host = hosts[host_name]
            cursor = after
            if cursor is None:
                seen = now[host_name].get(pane_id)
                if seen is None:
                    raise AgentGoneError(f"the agent {name!r} is gone", pane_id=pane_id, target=name)
                if seen.settled and not inp.fresh:
                    ready.append((name, host, pane_id))
                cursor = seen.seq
            entries.append((name, host, pane_id, cursor))
        if len(panes) < len(inp.targets):
            self.core.lease_by_name(inp.controller_id, inp.targets[len(panes)][0])  # raises its refusal
            return self._targets(inp)  # (the lease appeared since the snapshot: judge them all again)
        return entries, ready

    def _leases(self, inp: WaitAnyInput) -> dict[str, Instance]:
        """The fence checked, then each target's lease by name, all from one snapshot of the store: the
        same answers as :meth:`Core.check_fence` and :meth:`Core.lease_by_name` per target (this
        controller's one active reviewer or writer lease of that name), reading the store once, not
        once per target and machine. A name without exactly one such lease is absent."""
        store = self.core.store
        named: dict[str, list[Instance]] = {}
        with store.read() as reader:
            lease = reader.get(fence.instance_id(inp.credential.controller_id))
            rejection = fence.check(lease, inp.credential, store.now())
            if rejection is None:
                for machine in LEASE_MACHINES:
                    for found in reader.find(machine, ("active",)):
                        if found.data.get("controller_id") == inp.controller_id:
                            named.setdefault(str(found.data.get("name")), []).append(found)
        if rejection is not None:
            raise RefusedError(rejection.message, code=rejection.code, **dict(rejection.details))
        return {name: named[name][0] for name, _ in inp.targets if len(named.get(name, ())) == 1}

    async def wait_any(self, inp: WaitAnyInput) -> WaitAnyResult:
        """The first target to settle after its cursor; or, at once, every target given without a
        cursor that is already settled (unless ``inp.fresh``). Each winner comes with its output.

        One hop to a worker thread of its own (:meth:`_wait_here`) for the set-up, the wait and the
        winners' output when every target is on one host with a blocking wait (the process host);
        otherwise the set-up there, then :meth:`first_settled` races the hosts from the loop. Cancelling
        abandons the thread at once (everything on it only reads); its wait ends within one tick.
        """
        import anyio

        stop = threading.Event()
        try:
            done = await anyio.to_thread.run_sync(
                self._wait_here, inp, stop, abandon_on_cancel=True, limiter=anyio.CapacityLimiter(1)
            )
        finally:
            stop.set()
        if isinstance(done, WaitAnyResult):
            return done
        winner = await self.first_settled(done, inp.timeout)
        _, host, pane_id, _ = next(e for e in done if e[0] == winner)
        return await in_thread(self._winners, [(winner, host, pane_id)], inp.lines)

    def _wait_here(self, inp: WaitAnyInput, stop: threading.Event) -> WaitAnyResult | list[Entry]:
        """On a worker thread: the set-up (:meth:`_targets`), then the winners at once, or, with every
        target on one host that has a blocking wait (:meth:`AgentHost.wait_many_blocking`), the wait
        and the winner's output on this same thread. Otherwise the entries, for :meth:`first_settled`.
        """
        entries, ready = self._targets(inp)
        if ready:
            return self._winners(ready, inp.lines)
        hosts = {id(entry[1]): entry[1] for entry in entries}
        if len(hosts) != 1:
            return entries
        (host,) = hosts.values()
        try:
            found = host.wait_many_blocking(_cursors(entries), inp.timeout, stop)
        except AgentGoneError as exc:  # a host that raises instead of reporting the gone pane
            found = {str(exc.details.get("pane_id", entries[0][2])): None}
        except WaitTimeoutError:
            found = {}
        if found is None:
            return entries  # no blocking wait on this host: wait from the loop
        if stop.is_set():
            return entries  # cancelled: nobody reads this
        key = _settled_key(entries, found)
        if key is None:
            raise _timed_out(entries, inp.timeout)
        _, _, pane_id, _ = next(e for e in entries if e[0] == key)
        return self._winners([(key, host, pane_id)], inp.lines)

    def _winners(self, settled: list[tuple[str, AgentHost, str]], lines: int) -> WaitAnyResult:
        return WaitAnyResult([self.winner(name, host, pane_id, lines) for name, host, pane_id in settled])

    @staticmethod
    def winner(name: str, host: AgentHost, pane_id: str, lines: int) -> Winner:
        """A winner's observation and output: the observation is taken after the read, so the output
        is at most as new as the cursor reported (a later change shows as a higher seq, never hidden)."""
        try:
            output = host.read(pane_id, lines)
            observation = host.get(pane_id)
        except AgentGoneError:
            raise AgentGoneError(f"the agent {name!r} is gone", pane_id=pane_id, target=name) from None
        return Winner(name, observation, output)

    # --- read-only: any agent on a host, leased or not ---------------------------------------------------

    def get(self, inp: AgentInput) -> Observation:
        """Observe one agent now. Raises :class:`AgentGoneError` (``agent_gone``, exit 3)."""
        return self.core.host(inp.host).get(inp.pane_id)

    def read(self, inp: AgentInput) -> tuple[str, Observation]:
        """The agent's visible output (at most ``inp.lines`` lines) and an observation taken after
        the read: the output is never newer than the cursor reported with it."""
        host = self.core.host(inp.host)
        output = host.read(inp.pane_id, inp.lines)
        return output, host.get(inp.pane_id)

    def progress(self, inp: AgentProgressInput) -> RunProgress | None:
        """The agent's latest run's progress from line ``inp.after`` on: tool calls and file changes, names
        and paths only, read from its driver's machine output while it streams (None: a host or kind
        that shows none, or an agent that never ran). Raises :class:`AgentGoneError`."""
        return self.core.host(inp.host).progress(inp.pane_id, inp.after)

    def live_progress(
        self, host_name: str, seen: Mapping[str, tuple[int, int]]
    ) -> tuple[list[dict[str, Any]], dict[str, tuple[int, int]]]:
        """What a host's driven agents did since a follower last looked (the SSE stream's feed).

        ``seen`` maps a pane to the cursor it was at and the progress lines the follower has of it.
        Returns the updates, each a run's progress with the lines after those (``start``), its agent's
        ``name``, ``kind`` and ``host``, and the map to pass next time. An agent comes back when it is
        working and has new lines (or was not working at that cursor before: then with all its lines,
        perhaps none yet), and once more when the run ended since the last look (``running`` false,
        with its last lines). An agent settled at the cursor ``seen`` gives, and one ``seen`` does not
        hold that is not working, come back with nothing: a follower starts from what runs now.
        """
        host = self.core.host(host_name)
        updates: list[dict[str, Any]] = []
        now: dict[str, tuple[int, int]] = {}
        for observation in host.list():
            pane_id, known = observation.pane_id, seen.get(observation.pane_id)
            working = observation.status == "working"
            if not working and (known is None or known[0] == observation.seq):
                now[pane_id] = known if known is not None else (observation.seq, 0)
                continue
            try:
                found = host.progress(pane_id)
            except AgentError:
                continue  # gone, or another machine's: nothing to show here
            if found is None:
                now[pane_id] = (observation.seq, 0)
                continue
            # A working agent's cursor is its run; once settled it sits one past it.
            following = known is not None and known[0] == found.run
            after = min(known[1], len(found.lines)) if known is not None and following else 0
            now[pane_id] = (observation.seq, found.total)
            if working and following and found.total <= after:
                continue  # nothing new
            fresh = replace(found, lines=found.lines[after:], start=after)
            updates.append({**fresh.to_dict(), "name": observation.name, "kind": observation.kind, "host": host_name})
        return updates, now

    def _observed(self, inp: AgentWaitInput) -> tuple[AgentHost, Observation]:
        host = self.core.host(inp.host)
        return host, host.get(inp.pane_id)

    async def wait(self, inp: AgentWaitInput) -> Observation:
        """Wait until the agent is in one of ``inp.until`` at a cursor strictly after ``inp.after_seq``.

        Settled statuses only: through the host's own wait (event-driven where the host is); with
        ``working`` among them, by observing every 50 ms (hosts have no wait for work to start).

        Raises:
            AgentGoneError: the pane is gone (``agent_gone``, exit 3).
            WaitTimeoutError: ``wait_timeout`` (exit 5), ``details.observation`` the last one seen.
        """
        import anyio

        from runner.agents.abc import SETTLED

        host, last = await in_thread(self._observed, inp)
        after = last.seq if inp.after_seq is None else inp.after_seq
        wanted = frozenset(inp.until)
        deadline = anyio.current_time() + inp.timeout
        while not (last.seq > after and last.status in wanted):
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                raise WaitTimeoutError(
                    f"agent {inp.pane_id!r} was not {' or '.join(inp.until)} past seq {after} within "
                    f"{inp.timeout:g} s (last: {last.status} at seq {last.seq})",
                    pane_id=inp.pane_id,
                    after_seq=after,
                    until=list(inp.until),
                    observation=last.to_dict(),
                )
            if wanted <= SETTLED:
                try:
                    last = await host.wait(inp.pane_id, max(after, last.seq), remaining)
                except WaitTimeoutError:
                    last = await in_thread(host.get, inp.pane_id)  # the deadline passed: judge (or report) the latest
            else:
                await anyio.sleep(min(0.05, remaining))
                last = await in_thread(host.get, inp.pane_id)
        return last
