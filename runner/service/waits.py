"""Waits and observations: the first of a controller's leased agents to settle, and read-only looks at
any agent on a host (``corral agent get|read|wait``), leased or not.

The waits are async; every store read and synchronous host call in them runs on a worker thread
(:func:`~runner.service.core.in_thread`); a host's own ``wait`` is async already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.agents.abc import AgentGoneError, AgentHost, Observation, WaitTimeoutError
from runner.service.core import Core, in_thread
from runner.service.inputs import AgentInput, AgentWaitInput, WaitAnyInput
from runner.service.views import WaitAnyResult, Winner

if TYPE_CHECKING:
    import anyio.abc  # anyio costs a cold CLI ~35 ms: only the commands that wait import it

Entry = tuple[str, AgentHost, str, int]
"""What :meth:`Waits.first_settled` watches: a key, the agent's host, its pane, the cursor to pass."""


class Waits:
    """Cursor-bound waits on leased agents, and read-only observations of any agent."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def first_settled(self, entries: list[Entry], timeout: float) -> str:
        """The key of the first entry whose agent settles after its cursor; the other waits are cancelled.

        A vanished agent ends the wait too (its key wins). Raises :class:`WaitTimeoutError` when none
        settles within ``timeout`` seconds.
        """
        import anyio

        winner: list[str] = []

        async def watch(key: str, host: AgentHost, pane_id: str, after: int, group: anyio.abc.TaskGroup) -> None:
            try:
                await host.wait(pane_id, after, timeout)
            except AgentGoneError:
                pass  # a vanished agent ends the wait too: collect will say identity_changed
            except WaitTimeoutError:
                return
            if not winner:
                winner.append(key)
                group.cancel_scope.cancel()

        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as group:
                for key, host, pane_id, after in entries:
                    group.start_soon(watch, key, host, pane_id, after, group)
        if not winner:
            raise WaitTimeoutError(
                f"none of {len(entries)} agents settled within {timeout:g} s", targets=[e[0] for e in entries]
            )
        return winner[0]

    def _targets(self, inp: WaitAnyInput) -> tuple[list[Entry], list[tuple[str, AgentHost, str]]]:
        """The fence checked, each target's lease and cursor, and the targets that win at once."""
        self.core.check_fence(inp.credential)
        entries: list[Entry] = []
        ready: list[tuple[str, AgentHost, str]] = []
        for name, after in inp.targets:
            lease = self.core.lease_by_name(inp.controller_id, name)
            host = self.core.host(lease.data["host"])
            pane_id = str(lease.data["pane_id"])
            if after is None:
                try:
                    now = host.get(pane_id)
                except AgentGoneError:
                    raise AgentGoneError(f"the agent {name!r} is gone", pane_id=pane_id, target=name) from None
                if now.settled and not inp.fresh:
                    ready.append((name, host, pane_id))
                cursor = now.seq
            else:
                cursor = after
            entries.append((name, host, pane_id, cursor))
        return entries, ready

    async def wait_any(self, inp: WaitAnyInput) -> WaitAnyResult:
        """The first target to settle after its cursor; or, at once, every target given without a
        cursor that is already settled (unless ``inp.fresh``). Each winner comes with its output."""
        entries, ready = await in_thread(self._targets, inp)
        if ready:
            return await in_thread(self._winners, ready, inp.lines)
        winner = await self.first_settled(entries, inp.timeout)
        _, host, pane_id, _ = next(e for e in entries if e[0] == winner)
        return await in_thread(self._winners, [(winner, host, pane_id)], inp.lines)

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
