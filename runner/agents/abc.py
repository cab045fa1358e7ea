"""The agent host interface: start agents, observe them, prompt them, wait on them, close them.

An agent lives in a *pane* (the process host's slot, or a Herdr pane). Everything corral decides
about an agent rests on an :class:`Observation`: who the agent is (pane, name, kind, cwd) and where it
is (status and ``seq``, the state-change cursor). Cursors are monotonic, not contiguous: ``seq`` only
grows, but on Herdr it is the value of one counter for the whole server at the agent's last change,
so it jumps by every other agent's changes in between (and restarts with the server);
``revision`` is the agent's own change count where the host exposes one (not on Herdr).

Adapters: ``process`` (embedded default, :mod:`runner.agents.process`) and ``herdr``
(:mod:`runner.agents.herdr`). One contract test suite covers both. Hosts never import the engine.
"""

from __future__ import annotations

import builtins
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from runner.agentfacts import (
    GONE,
    IDENTITY,
    NAME_PATTERN,
    PROMPTABLE,
    SETTLED,
    STATUSES,
    AgentActions,
    AgentBusyError,
    AgentError,
    AgentGoneError,
    AgentKindError,
    Cursor,
    Expect,
    Observation,
    StartOptions,
    WaitTimeoutError,
    check_promptable,
)
from runner.context import Gate

if TYPE_CHECKING:
    import anyio.abc  # only the waits import anyio (a cold CLI pays ~35 ms for it)

    from runner.agents.progress import RunProgress
__all__ = [
    "GONE",
    "IDENTITY",
    "NAME_PATTERN",
    "PROMPTABLE",
    "SETTLED",
    "STATUSES",
    "AgentBusyError",
    "AgentError",
    "AgentGoneError",
    "AgentHost",
    "AgentKindError",
    "Cursor",
    "Expect",
    "Observation",
    "StartOptions",
    "WaitTimeoutError",
    "check_promptable",
]


class AgentHost(ABC):
    """Runs agents. Methods observe afresh on every call; nothing is cached across calls."""

    name: str
    can_prompt: ClassVar[bool] = True
    """Whether :meth:`prompt` can hand text to an agent of this host (mesh wake-ups need it); a host
    that only observes says False, and agents on it poll their inbox instead."""
    confines_writes: ClassVar[bool] = True
    """Whether this host can keep an agent's writes inside its worktree by itself. A host that cannot
    (Herdr: the pane runs whatever the kind is, as the user) says False, and a writer lane started on
    it gets the scope hook (:mod:`runner.git.hook`) in its worktree's own configuration."""

    @abstractmethod
    def start(
        self,
        name: str,
        kind: str,
        cwd: str,
        options: StartOptions,
        gate: Gate | None = None,
        nonce: str | None = None,
    ) -> Observation:
        """Start an agent named ``name`` of ``kind`` in ``cwd``; returns it observed ``idle``.

        ``gate`` is checked immediately before anything is created (in the same store transaction
        where the host can); ``nonce`` is recorded with the pane where the host can keep it
        (:attr:`Observation.nonce`), so a start killed half-way is found again by :meth:`find`.

        Raises:
            AgentKindError: the kind is unknown. AgentError: the start failed; ``details["pane_id"]``
            names a pane that was created and may need closing.
        """

    @abstractmethod
    def get(self, pane_id: str) -> Observation:
        """Observe the agent now. Raises :class:`AgentGoneError` if the pane does not exist."""

    @abstractmethod
    def list(self) -> list[Observation]:
        """Every live agent this host knows."""

    @abstractmethod
    def prompt(
        self,
        pane_id: str,
        text: str,
        expect: Expect | None = None,
        gate: Gate | None = None,
        schema: str | None = None,
    ) -> Observation:
        """Hand ``text`` to the agent and observe it once it is ``working``.

        ``schema`` (JSON Schema text) asks the agent's CLI for a final answer matching it; a host or
        driver that cannot ask for one refuses (``agent_schema_unsupported``, not delivered).

        ``gate`` is the authority check (:class:`runner.context.Gate`): the process host runs it in
        the transaction that moves the agent to ``working``; Herdr immediately before ``agent prompt``.

        With ``expect``, only to exactly that agent at exactly that cursor (:func:`check_promptable`,
        on the host's own last read before handing over; the process host makes it atomic). The
        returned observation is what delivery is judged on: ``working`` at exactly one past the
        cursor seen before. Raises :class:`AgentBusyError` (not delivered: the agent was not idle or
        done, or not the expected one) or :class:`AgentError` (``details["delivered"]`` False when
        nothing was handed over).
        """

    @abstractmethod
    def read(self, pane_id: str, lines: int) -> str:
        """The agent's recent output (at most ``lines`` lines). Reading changes neither status nor seq."""

    def progress(self, pane_id: str, after: int = 0) -> RunProgress | None:
        """The agent's latest run's progress (tool calls and file changes: names and paths, never
        contents) from line ``after`` on, read from its driver's machine output while it streams.

        None when this host or the agent's kind shows none (Herdr; a kind whose driver reads no machine
        output) or the agent never ran. Reading changes neither status nor seq. This default shows none.
        """
        return None

    @abstractmethod
    async def wait(self, pane_id: str, after_seq: int, timeout: float) -> Observation:
        """Wait until the agent is settled at a cursor strictly after ``after_seq``.

        Never satisfied by a state at or before ``after_seq``. Raises :class:`WaitTimeoutError` or
        :class:`AgentGoneError`.
        """

    def get_many(self, pane_ids: Sequence[str]) -> dict[str, Observation]:
        """Observe several agents now: by pane id, those that exist (a gone pane is absent).

        Hosts that can observe many panes in one call override it (the process host reads every slot
        in one query); this default observes them one by one with :meth:`get`.
        """
        found: dict[str, Observation] = {}
        for pane_id in dict.fromkeys(pane_ids):
            try:
                found[pane_id] = self.get(pane_id)
            except AgentGoneError:
                continue
        return found

    def cursors(self, pane_ids: Sequence[str]) -> dict[str, Cursor]:
        """Each agent's cursor and whether it is settled now: by pane id, those that exist (a gone pane
        is absent), the same answers as :meth:`get_many` reduced to ``seq`` and ``settled``.

        What a wait's set-up needs of its targets without a cursor, and nothing more. Hosts that can
        answer without building observations override it (the process host reads only status, seq
        and closed, one query for all); this default reduces :meth:`get_many`.
        """
        return {pane_id: Cursor(seen.seq, seen.settled) for pane_id, seen in self.get_many(pane_ids).items()}

    async def wait_many(self, targets: Mapping[str, int], timeout: float) -> dict[str, Observation | None]:
        """Wait until at least one of ``targets`` (pane id -> its cursor) is settled at a cursor strictly
        after its own, or gone.

        Returns every target found so at that moment (at least one): its observation, or None for a
        pane that is gone. Never satisfied by a state at or before a target's cursor. Raises
        :class:`WaitTimeoutError` when none settles within ``timeout`` seconds.

        Hosts that can watch many panes at once override it (the process host: one slot query per
        tick for all of them, and none while the store is unchanged); this default races one
        :meth:`wait` per target and returns the first to end (the others are cancelled).
        """
        import anyio

        found: dict[str, Observation | None] = {}

        async def watch(pane_id: str, after: int, group: anyio.abc.TaskGroup) -> None:
            try:
                observed: Observation | None = await self.wait(pane_id, after, timeout)
            except AgentGoneError:
                observed = None
            except WaitTimeoutError:
                return
            if not found:
                found[pane_id] = observed
                group.cancel_scope.cancel()

        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as group:
                for pane_id, after in targets.items():
                    group.start_soon(watch, pane_id, after, group)
        if not found:
            raise WaitTimeoutError(
                f"none of {len(targets)} agents settled within {timeout:g} s", pane_ids=list(targets)
            )
        return found

    def wait_many_blocking(
        self, targets: Mapping[str, int], timeout: float, stop: threading.Event
    ) -> dict[str, Observation | None] | None:
        """:meth:`wait_many` for a caller already on a worker thread (never on an event loop): the same
        answers, blocking this thread, so a caller that did its set-up there waits without a hop back
        to the loop and another into a thread. Setting ``stop`` ends it within one tick (it then
        returns an empty dict, which nobody should read). Raises :class:`WaitTimeoutError` as
        :meth:`wait_many`.

        None (this default) when the host has no blocking wait: the caller uses :meth:`wait_many`.
        The process host's waits are blocking loops on a thread already, so it has one.
        """
        return None

    @abstractmethod
    def close(self, pane_id: str, gate: Gate | None = None) -> None:
        """Close the pane (stopping the agent). Closing a pane that is already gone is not an error.

        ``gate`` is checked immediately before the pane is closed (atomically where the host can)."""

    def find(self, name: str, kind: str, cwd: str, nonce: str | None = None) -> builtins.list[Observation]:
        """Live panes that look like the agent a start asked for: the same name, kind and cwd, and, where
        the host records it, the same start ``nonce``. Reconcile uses it to find the pane of a start that
        was killed before it could record the pane's id."""
        return [
            o
            for o in self.list()
            if (o.name, o.kind, o.cwd) == (name, kind, cwd) and (nonce is None or o.nonce in (None, nonce))
        ]

    def started_pane(self, nonce: str) -> str | None:
        """The pane a start with ``nonce`` created, if the host journals starts and that start
        never finished: a pane that holds no agent yet, which :meth:`find` cannot see. None by default
        (the process host's slot carries the nonce itself, so :meth:`find` sees it)."""
        return None

    def abandon_start(self, nonce: str) -> str | None:
        """Close the pane of the unfinished start ``nonce`` (see :meth:`started_pane`) and forget it;
        returns the pane closed, or None. Reconcile calls it only when the start's process is gone."""
        return None

    def describe(self) -> dict[str, Any]:
        """What this host is, for ``corral status``."""
        return {"name": self.name}


def _acts(host: AgentHost) -> AgentActions:
    """Never called: mypy checks here that the port provides what effects ask of a host."""
    return host
