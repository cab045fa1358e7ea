"""A simulated agent host: an in-memory :class:`AgentHost` whose agents move only when the test says so.

Every agent starts ``idle`` at seq 0. ``prompt`` hands it a run (``working`` at seq + 1); the test then
``finish``-es or ``block``-s it, or ``poke``-s it to model a human (or the agent itself) moving it
outside corral's control, or ``look``-s at a done agent (which makes it idle without new work);
``vanish`` closes its pane behind corral's back and ``swap`` puts another
agent (another kind) in the same pane. Nothing happens on a clock: ``wait`` answers at once, from the
state the test left, or raises :class:`WaitTimeoutError`. So a Hypothesis state machine decides every
interleaving, and every change of status is exactly one step of ``seq``.

Every call to ``prompt`` is logged (pane, the ``stamp()`` at the time, the text, and the run it started
if it started one), and every run remembers the text it got and the output it produces, which is
derived from the run's seq and the text: a result can always be traced back to the run it came from.

One-shot modes make the next ``start``, ``prompt`` or ``close`` misbehave:

=====================  ===========================================================================
prompt mode            what the next ``prompt`` does
=====================  ===========================================================================
``late``               takes the prompt and has already finished it: returns ``done`` at seq + 2
``lost_delivered``     takes the prompt (``working`` at seq + 1) but raises :class:`AgentError`
``lost_undelivered``   takes nothing, but raises :class:`AgentError` without saying so
``refused``            takes nothing and says so: :class:`AgentError` with ``delivered=False``
``busy``               takes nothing: :class:`AgentBusyError` (the agent changed under the caller)
=====================  ===========================================================================

``moves_on_read`` names a pane whose agent moves (see ``poke``) right after its output is next read:
it moved while corral captured it.

Start modes: ``fail`` (a pane was made, the start failed: ``AgentError`` naming the pane),
``fail_nopane`` (no pane was made), ``orphan`` (like ``fail``, and closing that pane fails too).
Close mode ``fail``: the next ``close`` raises :class:`AgentError` and leaves the pane as it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from runner.agents.abc import (
    SETTLED,
    AgentBusyError,
    AgentError,
    AgentGoneError,
    AgentHost,
    Expect,
    Observation,
    StartOptions,
    WaitTimeoutError,
    check_promptable,
)
from runner.context import Gate

PROMPT_MODES = ("late", "lost_delivered", "lost_undelivered", "refused", "busy")
START_MODES = ("fail", "fail_nopane", "orphan")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_output(pane_id: str, run_seq: int, text: str) -> str:
    """What a run prints: derived from the pane, the run's seq and its prompt, so it names its run."""
    return f"OUTPUT-{pane_id}-{run_seq}-{sha(text)[:16]}\n"


@dataclass(frozen=True)
class Run:
    """One piece of work an agent did: started at ``seq`` (``working``) on ``text``."""

    seq: int
    text: str
    output: str
    external: bool  # started outside corral (a human typing in the pane), not through prompt()


@dataclass(frozen=True)
class PromptCall:
    """One call of ``prompt``: when (the caller's ``stamp``), to whom, what, and the run it started."""

    pane_id: str
    stamp: int
    text: str
    mode: str
    run_seq: int | None


@dataclass
class SimAgent:
    pane_id: str
    name: str
    kind: str
    cwd: str
    status: str = "idle"
    seq: int = 0
    closed: bool = False
    runs: list[Run] = field(default_factory=list)
    history: list[tuple[int, str]] = field(default_factory=lambda: [(0, "idle")])  # (seq, status), each step

    def observe(self) -> Observation:
        return Observation(self.pane_id, self.name, self.kind, self.cwd, self.status, self.seq, revision=self.seq)

    def move(self, status: str) -> None:
        """One status change: exactly one step of the cursor."""
        self.seq += 1
        self.status = status
        self.history.append((self.seq, status))


class SimHost(AgentHost):
    """Agents in memory; they change only when a method of this class is called."""

    name = "process"

    def __init__(self, stamp: Callable[[], int] = lambda: 0) -> None:
        self.stamp = stamp
        self.agents: dict[str, SimAgent] = {}
        self.prompts: list[PromptCall] = []
        self.next_prompt: str | None = None
        self.next_start: str | None = None
        self.next_close: str | None = None
        self.fail_close: set[str] = set()  # panes whose next close fails (an orphaned start)
        self.moves_on_read: str | None = None
        self._panes = 0
        self._externals = 0

    # --- the AgentHost interface -------------------------------------------------------------------

    def _live(self, pane_id: str) -> SimAgent:
        agent = self.agents.get(pane_id)
        if agent is None or agent.closed:
            raise AgentGoneError(f"no live agent in pane {pane_id!r}", pane_id=pane_id)
        return agent

    def start(
        self,
        name: str,
        kind: str,
        cwd: str,
        options: StartOptions,
        gate: Gate | None = None,
        nonce: str | None = None,
    ) -> Observation:
        if gate is not None:
            gate()
        mode, self.next_start = self.next_start, None
        if mode == "fail_nopane":
            raise AgentError("the multiplexer refused to make a pane", code="agent_start_failed")
        self._panes += 1
        agent = SimAgent(f"p{self._panes}", name, kind, cwd)
        self.agents[agent.pane_id] = agent
        if mode in ("fail", "orphan"):
            if mode == "orphan":
                self.fail_close.add(agent.pane_id)
            raise AgentError("the agent did not come up", code="agent_start_failed", pane_id=agent.pane_id)
        return agent.observe()

    def get(self, pane_id: str) -> Observation:
        return self._live(pane_id).observe()

    def list(self) -> list[Observation]:
        return [a.observe() for a in self.agents.values() if not a.closed]

    def prompt(self, pane_id: str, text: str, expect: Expect | None = None, gate: Gate | None = None) -> Observation:
        agent = self._live(pane_id)
        if gate is not None:
            gate()
        mode, self.next_prompt = self.next_prompt, None
        stamp = self.stamp()
        try:
            check_promptable(agent.observe(), expect)
        except AgentBusyError:
            self.prompts.append(PromptCall(pane_id, stamp, text, "refused_busy", None))
            raise
        if mode == "refused":
            self.prompts.append(PromptCall(pane_id, stamp, text, mode, None))
            raise AgentError("the prompt could not be typed", code="agent_prompt_failed", delivered=False)
        if mode == "busy":
            self.prompts.append(PromptCall(pane_id, stamp, text, mode, None))
            raise AgentBusyError(f"agent {pane_id!r} changed while the prompt was handed over", delivered=False)
        if mode == "lost_undelivered":
            self.prompts.append(PromptCall(pane_id, stamp, text, mode, None))
            raise AgentError("agent_prompt_stalled: no answer from the multiplexer", code="agent_prompt_stalled")
        run = self._begin(agent, text, external=False)
        self.prompts.append(PromptCall(pane_id, stamp, text, mode or "ok", run.seq))
        if mode == "late":
            agent.move("done")
        elif mode == "lost_delivered":
            raise AgentError("agent_prompt_stalled: timed out waiting for working", code="agent_prompt_stalled")
        return agent.observe()

    def read(self, pane_id: str, lines: int) -> str:
        agent = self._live(pane_id)
        text = "\n".join(agent.runs[-1].output.splitlines()[-lines:]) + "\n" if agent.runs else ""
        if self.moves_on_read == pane_id:
            self.moves_on_read = None
            self.poke(pane_id)  # it moved while its output was being captured
        return text

    async def wait(self, pane_id: str, after_seq: int, timeout: float) -> Observation:
        await anyio.sleep(0)
        agent = self._live(pane_id)
        if agent.seq > after_seq and agent.status in SETTLED:
            return agent.observe()
        raise WaitTimeoutError(
            f"agent {pane_id!r} did not settle after seq {after_seq} (now {agent.status} at seq {agent.seq})",
            pane_id=pane_id,
            after_seq=after_seq,
            status=agent.status,
            seq=agent.seq,
        )

    def close(self, pane_id: str, gate: Gate | None = None) -> None:
        if gate is not None:
            gate()
        agent = self.agents.get(pane_id)
        mode, self.next_close = self.next_close, None
        if pane_id in self.fail_close:
            self.fail_close.discard(pane_id)
            mode = "fail"
        if mode == "fail":
            raise AgentError(f"pane close {pane_id} failed", code="agent_close_failed", pane_id=pane_id)
        if agent is not None:
            agent.closed = True

    # --- what the test does to the agents -------------------------------------------------------------

    def _begin(self, agent: SimAgent, text: str, external: bool) -> Run:
        agent.move("working")
        run = Run(agent.seq, text, run_output(agent.pane_id, agent.seq, text), external)
        agent.runs.append(run)
        return run

    def finish(self, pane_id: str) -> None:
        """The running work ends: ``working`` -> ``done``."""
        agent = self._live(pane_id)
        assert agent.status == "working"
        agent.move("done")

    def block(self, pane_id: str) -> None:
        """The running work stops on a question or an approval: ``working`` -> ``blocked``."""
        agent = self._live(pane_id)
        assert agent.status == "working"
        agent.move("blocked")

    def poke(self, pane_id: str) -> None:
        """The agent moves by itself, outside corral: working ends; blocked resumes the same run;
        idle or done starts a new run someone typed into the pane (new output)."""
        agent = self._live(pane_id)
        if agent.status == "working":
            agent.move("done")
        elif agent.status == "blocked":
            agent.move("working")
        else:
            self._externals += 1
            self._begin(agent, f"typed by a human #{self._externals}", external=True)

    def look(self, pane_id: str) -> None:
        """Someone looks at a ``done`` agent: it becomes ``idle`` (Herdr's ``done`` is idle after unseen
        work), a change of status without any new work."""
        agent = self._live(pane_id)
        assert agent.status == "done"
        agent.move("idle")

    def vanish(self, pane_id: str) -> None:
        """The pane is closed outside corral."""
        self._live(pane_id).closed = True

    def swap(self, pane_id: str) -> None:
        """Another agent now lives in the pane (another kind, same name, cwd, status and seq)."""
        agent = self._live(pane_id)
        agent.kind = "codex" if agent.kind != "codex" else "claude"

    def run_at(self, pane_id: str, seq: int) -> Run | None:
        return next((r for r in self.agents[pane_id].runs if r.seq == seq), None)
