"""The waits' and observations' inputs: wait-any, agent get/read, agent wait."""

from __future__ import annotations

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
from runner.service.inputs.fields import described, input_class


@input_class
class WaitAnyInput(FencedInput):
    """Wait for the first of 1-64 leased agents to settle.

    A target with a cursor (``T:SEQ``) waits for a settle strictly after ``SEQ``. A target without
    one is judged now: already settled, it wins at once (it is done: waiting for its *next* settle
    would wait for work nobody asked for); ``fresh`` makes it wait instead for the next settle after
    the cursor observed at the call. ``lines`` bounds each winner's output.
    """

    targets: tuple[tuple[str, int | None], ...] = described(
        "targets",
        "Each {name, after_seq}: a leased agent and its cursor (null: now).",
        schema={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "after_seq": {"type": ["integer", "null"]}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
    )
    timeout: float = described("timeout", "How long to wait, in seconds (at most 86400).", default=TIMEOUT_DEFAULT)
    lines: int = described(
        "lines", "How many lines of the agent's visible output to capture.", default=WAIT_LINES_DEFAULT
    )
    fresh: bool = described(
        "fresh", "A target without a cursor must settle anew (not count as settled already).", default=False
    )

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


@input_class
class AgentInput:
    """One agent on a host, by pane id, read-only (``corral agent get`` / ``read``): leased or not,
    no controller needed. ``lines`` bounds a read."""

    pane_id: str = described("target", "The pane id (corral_agents), leased or not.")
    host: str = described("host", "The agent host: process (corral's own) or herdr.", default="process")
    lines: int = described(
        "lines", "How many lines of the agent's visible output to capture.", default=CAPTURE_LINES_DEFAULT
    )

    def __post_init__(self) -> None:
        check_pane("target", self.pane_id)
        check_host(self.host)
        check_lines(self.lines)


@input_class
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


@input_class
class AgentWaitInput:
    """Wait, read-only, until the agent is in one of ``until`` at a cursor past ``after_seq``.

    ``until`` defaults to the settled statuses; ``after_seq`` None means the cursor observed when the
    wait starts (so the wait is for the next change, never satisfied by the state it began in).
    """

    pane_id: str = described("target", "The pane id (corral_agents), leased or not.")
    until: tuple[str, ...] = described(
        "until",
        "The statuses that end the wait.",
        default=("idle", "done", "blocked"),
        schema={"type": "array", "items": {"type": "string", "enum": ["idle", "working", "done", "blocked"]}},
    )
    after_seq: int | None = described("after_seq", "Only a state after this cursor counts.", default=None)
    timeout: float = described("timeout", "How long to wait, in seconds (at most 86400).", default=TIMEOUT_DEFAULT)
    host: str = described("host", "The agent host: process (corral's own) or herdr.", default="process")

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
