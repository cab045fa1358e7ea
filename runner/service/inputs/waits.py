"""The waits' and observations' inputs: wait-any, agent get/read, agent wait."""

from __future__ import annotations

from dataclasses import dataclass

from runner.errors import InputError
from runner.service.checks import (
    CAPTURE_LINES_DEFAULT,
    TIMEOUT_DEFAULT,
    WAIT_LINES_DEFAULT,
    WAIT_TARGETS_MAX,
    WAITABLE,
    check_cursor,
    check_host,
    check_lines,
    check_name,
    check_pane,
    check_timeout,
)
from runner.service.inputs.base import FencedInput


@dataclass(frozen=True)
class WaitAnyInput(FencedInput):
    """Wait for the first of 1-64 leased agents to settle.

    A target with a cursor (``T:SEQ``) waits for a settle strictly after ``SEQ``. A target without
    one is judged now: already settled, it wins at once (it is done: waiting for its *next* settle
    would wait for work nobody asked for); ``fresh`` makes it wait instead for the next settle after
    the cursor observed at the call. ``lines`` bounds each winner's output.
    """

    targets: tuple[tuple[str, int | None], ...]
    timeout: float = TIMEOUT_DEFAULT
    lines: int = WAIT_LINES_DEFAULT
    fresh: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= len(self.targets) <= WAIT_TARGETS_MAX:
            raise InputError("target", f"give 1-{WAIT_TARGETS_MAX} targets, not {len(self.targets)}")
        names = [name for name, _ in self.targets]
        if len(set(names)) != len(names):
            raise InputError("target", "each target may appear once")
        for name, after in self.targets:
            check_name("target", name)
            if after is not None:
                check_cursor("target", after)
        check_timeout(self.timeout)
        check_lines(self.lines)


@dataclass(frozen=True)
class AgentInput:
    """One agent on a host, by pane id, read-only (``corral agent get`` / ``read``): leased or not,
    no controller needed. ``lines`` bounds a read."""

    pane_id: str
    host: str = "process"
    lines: int = CAPTURE_LINES_DEFAULT

    def __post_init__(self) -> None:
        check_pane("target", self.pane_id)
        check_host(self.host)
        check_lines(self.lines)


@dataclass(frozen=True)
class AgentProgressInput:
    """One agent's latest run's progress (tool calls and file changes, names and paths only), read-only,
    from progress line ``after`` on (what a caller that follows it has seen so far)."""

    pane_id: str
    host: str = "process"
    after: int = 0

    def __post_init__(self) -> None:
        AgentInput(self.pane_id, self.host)
        if not isinstance(self.after, int) or isinstance(self.after, bool) or self.after < 0:
            raise InputError("after", f"{self.after!r} is not a progress line index (0 or more)")


@dataclass(frozen=True)
class AgentWaitInput:
    """Wait, read-only, until the agent is in one of ``until`` at a cursor past ``after_seq``.

    ``until`` defaults to the settled statuses; ``after_seq`` None means the cursor observed when the
    wait starts (so the wait is for the next change, never satisfied by the state it began in).
    """

    pane_id: str
    until: tuple[str, ...] = ("idle", "done", "blocked")
    after_seq: int | None = None
    timeout: float = TIMEOUT_DEFAULT
    host: str = "process"

    def __post_init__(self) -> None:
        AgentInput(self.pane_id, self.host)
        if not self.until:
            raise InputError("until", "give at least one status")
        for status in self.until:
            if status not in WAITABLE:
                raise InputError("until", f"{status!r} is not a status to wait for ({', '.join(WAITABLE)})")
        if self.after_seq is not None:
            check_cursor("after_seq", self.after_seq)
        check_timeout(self.timeout)
