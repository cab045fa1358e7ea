"""The handoff memory's inputs: checkpoint, bootstrap, readiness, pin, session close, show,
list, search. One per operation, shared by the CLI, the MCP tools and the HTTP API.

Each checks its own fields (bad input names the field, ``input_invalid``) and the *meanings* of a
checkpoint that need nothing from the store (:meth:`CheckpointInput.__post_init__`): a refused rule
is an :class:`~runner.errors.InvalidError` with a ``memory_*`` code (exit 3). "Exactly one of
session / project" is checked here at run time, never in a schema.
"""

from __future__ import annotations

import re

from runner.errors import InputError, InvalidError
from runner.service.inputs.fields import described, input_class

PROJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
SESSION_ID = re.compile(r"^ses_[0-9a-f]{16}$")
CHECKPOINT_ID = re.compile(r"^cp_[0-9a-f]{16}$")
STATUSES = ("active", "paused", "completed", "blocked")
CLOSE_STATUSES = ("completed", "blocked")
TEXT_MAX = 4000
"""Characters of one text (a summary, a step, a blocker, the current state)."""
ITEMS_MAX = 200
"""Items of one list (work done, next steps, blockers, files, commands)."""
LIST_MAX = 1000
QUERY_MAX = 1000

# ``work_done`` is done work only: an item that reads as a plan is refused (a guard against the
# commonest confusion, not an oracle: corral cannot know whether work was really done).
_NOT_DONE = re.compile(
    r"^\s*(?:[-*]\s*)?(?:\[ \]|todo\b|to do\b|to-do\b|wip\b|will\b|next\b|plan(?:ned)? to\b|should\b|"
    r"need(?:s)? to\b|must\b|going to\b|pending\b)",
    re.IGNORECASE,
)


class MemoryRuleError(InvalidError):
    """A checkpoint or a session close breaks a rule of the handoff memory (``memory_*`` codes: which
    rule, and ``details.field``). Nothing was written; fix the checkpoint and write it again."""

    default_code = "memory_rule"

    def __init__(self, field: str, message: str, *, code: str, **details: object) -> None:
        super().__init__(message, code=code, field=field, **details)


def check_project(value: str, field: str = "project") -> None:
    if not isinstance(value, str) or not PROJECT.match(value):
        raise InputError(field, f"{value!r} is not a project name ([A-Za-z0-9][A-Za-z0-9_.-]{{0,99}})")


def check_session_id(value: str, field: str = "session") -> None:
    if not isinstance(value, str) or not SESSION_ID.match(value):
        raise InputError(field, f"{value!r} is not a session id (ses_ and 16 hex digits)")


def check_checkpoint_id(value: str, field: str = "checkpoint") -> None:
    if not isinstance(value, str) or not CHECKPOINT_ID.match(value):
        raise InputError(field, f"{value!r} is not a checkpoint id (cp_ and 16 hex digits)")


def _text(field: str, value: str | None, *, required: bool = False) -> None:
    if value is None:
        if required:
            raise InputError(field, "is required")
        return
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, "must not be empty")
    if len(value) > TEXT_MAX:
        raise InputError(field, f"is longer than {TEXT_MAX} characters")
    if "\x00" in value:
        raise InputError(field, "must not contain NUL characters")


def _items(field: str, values: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, (tuple, list)):
        raise InputError(field, "is a list of texts")
    if len(values) > ITEMS_MAX:
        raise InputError(field, f"has more than {ITEMS_MAX} items")
    for value in values:
        _text(field, value)
    return tuple(values)


def _one_of(session_id: str | None, project: str | None) -> None:
    if (session_id is None) == (project is None):
        given = "both were given" if session_id is not None else "neither was given"
        raise InputError("session", f"give exactly one of session and project ({given})")
    if session_id is not None:
        check_session_id(session_id)
    else:
        assert project is not None
        check_project(project)


def _absolute(field: str, value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.startswith("/") or "\x00" in value):
        raise InputError(field, f"{value!r} is not an absolute path")


def _subdir(value: str | None) -> None:
    if value is None:
        return
    parts = value.split("/") if isinstance(value, str) else [""]
    if not isinstance(value, str) or value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InputError("subdir", f"{value!r} is not a relative path inside the repository (no '..', no '//')")


@input_class
class CheckpointInput:
    """Write one checkpoint: to ``session_id``, or to ``project``'s open session (started with
    ``goal`` when it has none). Exactly one of ``session_id`` and ``project``.

    The meanings, enforced: ``work_done`` is done work only (no item reads as a plan, none is also a
    next step); ``next_steps`` may be empty only when ``status`` is ``completed``, which requires no
    next steps and no blockers; ``blocked`` requires at least one blocker, and a blocker is an
    external obstacle (not one of the next steps).
    """

    agent: str = described("agent", "Who writes it.")
    summary: str = described("summary", "Where the work stands, in one paragraph.")
    session_id: str | None = described(
        "session", "The session id (ses_…); exactly one of session and project.", default=None, required=False
    )
    project: str | None = described(
        "project", "The project's name; exactly one of session and project.", default=None, required=False
    )
    goal: str | None = described(
        "goal", "With project: the goal of the session this starts when none is open.", default=None
    )
    work_done: tuple[str, ...] = described("work_done", "Work really done (not plans).", default=())
    current_state: str | None = described("current_state", "What is true now.", default=None)
    next_steps: tuple[str, ...] = described("next_steps", "What comes next, in order.", default=())
    blockers: tuple[str, ...] = described("blockers", "External obstacles only.", default=())
    files: tuple[str, ...] = described("files", "Files the work touched.", default=())
    commands: tuple[str, ...] = described("commands", "Commands worth re-running.", default=())
    verify: str | None = described("verify", "How to check the state.", default=None)
    status: str = described(
        "status", "active, paused, completed or blocked (the session's status follows it).", default="active"
    )
    pinned: bool = described("pinned", "Pin it: it survives pruning however old.", default=False)
    auto_files: bool = described(
        "auto_files", "Add the paths git status shows changed under the project's directory.", default=False
    )
    """Add the paths ``git status`` shows as changed under the project's directory."""
    repository: str | None = described(
        "repository", "The project's repository, absolute (for a project this creates).", default=None, absolute=True
    )
    """For a project this call creates: its repository (absolute); an existing project's must match."""
    subdir: str | None = described("subdir", "With repository: the sub-directory the project covers.", default=None)
    """For a project this call creates: the sub-directory of the repository it covers."""

    def __post_init__(self) -> None:
        _one_of(self.session_id, self.project)
        _text("agent", self.agent, required=True)
        if len(self.agent) > 200:
            raise InputError("agent", "is longer than 200 characters")
        _text("summary", self.summary, required=True)
        _text("goal", self.goal)
        if self.goal is not None and self.session_id is not None:
            raise InputError("goal", "a goal starts a session by project: give it with project, not session")
        _text("current_state", self.current_state)
        _text("verify", self.verify)
        for name in ("work_done", "next_steps", "blockers", "files", "commands"):
            object.__setattr__(self, name, _items(name, getattr(self, name)))
        if self.status not in STATUSES:
            raise InputError("status", f"{self.status!r} is not one of {', '.join(STATUSES)}")
        _absolute("repository", self.repository)
        _subdir(self.subdir)
        if self.subdir is not None and self.repository is None:
            raise InputError("subdir", "a sub-directory goes with repository")
        for step in self.work_done:
            if _NOT_DONE.match(step):
                raise MemoryRuleError(
                    "work_done",
                    f"work_done is done work only; {step[:80]!r} reads as a plan: put it in next_steps",
                    code="memory_work_not_done",
                )
        steps = {s.strip().lower() for s in self.next_steps}
        for done in self.work_done:
            if done.strip().lower() in steps:
                raise MemoryRuleError(
                    "work_done",
                    f"{done[:80]!r} is both done and a next step: it is one or the other",
                    code="memory_work_not_done",
                )
        for blocker in self.blockers:
            if blocker.strip().lower() in steps:
                raise MemoryRuleError(
                    "blockers",
                    f"{blocker[:80]!r} is both a blocker and a next step: a blocker is an external obstacle, "
                    "not work to do",
                    code="memory_blocker_not_external",
                )
        if self.status == "completed":
            if self.next_steps or self.blockers:
                raise MemoryRuleError(
                    "next_steps" if self.next_steps else "blockers",
                    "a completed checkpoint has no next steps and no blockers",
                    code="memory_completed_open",
                )
        elif not self.next_steps:
            raise MemoryRuleError(
                "next_steps",
                f"a checkpoint of status {self.status} names no next steps: only a completed one may have none",
                code="memory_next_steps_required",
            )
        if self.status == "blocked" and not self.blockers:
            raise MemoryRuleError(
                "blockers", "a blocked checkpoint names at least one blocker", code="memory_blocker_required"
            )


@input_class
class ProjectInput:
    """``bootstrap`` (may create the project, with ``repository``/``subdir``) and ``readiness`` (no writes)."""

    project: str = described("project", "The project's name.")
    repository: str | None = described(
        "repository", "For a project this creates: its repository (absolute).", default=None, absolute=True
    )
    subdir: str | None = described("subdir", "With repository: the sub-directory the project covers.", default=None)

    def __post_init__(self) -> None:
        check_project(self.project)
        _absolute("repository", self.repository)
        _subdir(self.subdir)
        if self.subdir is not None and self.repository is None:
            raise InputError("subdir", "a sub-directory goes with repository")


@input_class
class PinInput:
    """Pin a checkpoint: it survives pruning however old."""

    checkpoint_id: str = described("checkpoint_id", "The checkpoint id (cp_…).", was="checkpoint")

    def __post_init__(self) -> None:
        check_checkpoint_id(self.checkpoint_id)


@input_class
class SessionCloseInput:
    """Close a session ``completed`` or ``blocked``: by ``session_id``, or by ``project`` when it has
    exactly one open session. Exactly one of the two."""

    status: str = described("status", "completed or blocked.")
    session_id: str | None = described(
        "session", "The session id (ses_…); exactly one of session and project.", default=None, required=False
    )
    project: str | None = described(
        "project", "The project's name; exactly one of session and project.", default=None, required=False
    )

    def __post_init__(self) -> None:
        _one_of(self.session_id, self.project)
        if self.status not in CLOSE_STATUSES:
            raise InputError("status", f"{self.status!r} is not one of {', '.join(CLOSE_STATUSES)}")


@input_class
class ShowInput:
    """One checkpoint (``cp_…``) or one session (``ses_…``: with its checkpoints, newest first)."""

    id: str = described("item_id", "A checkpoint id (cp_…) or a session id (ses_…).", was="id")
    limit: int = described("limit", "At most this many (1-1000).", default=20)

    def __post_init__(self) -> None:
        if not (isinstance(self.id, str) and (CHECKPOINT_ID.match(self.id) or SESSION_ID.match(self.id))):
            raise InputError("id", f"{self.id!r} is neither a checkpoint id (cp_…) nor a session id (ses_…)")
        _limit(self.limit)


@input_class
class MemoryListInput:
    """Checkpoints, newest first (of a project, of a session, pinned only), a page of ``limit`` after
    the checkpoint ``after``; or, with ``sessions``, the sessions (of a project)."""

    project: str | None = described("project", "Only this project's.", default=None)
    session_id: str | None = described("session", "Only this session's checkpoints.", default=None)
    pinned: bool = described("pinned", "Pinned checkpoints only.", default=False)
    sessions: bool = described("sessions", "List sessions instead of checkpoints.", default=False)
    limit: int = described("limit", "At most this many (1-1000).", default=20)
    after: str | None = described("after", "The previous page's next_after (a checkpoint id).", default=None)

    def __post_init__(self) -> None:
        if self.project is not None:
            check_project(self.project)
        if self.session_id is not None:
            check_session_id(self.session_id)
        if self.after is not None:
            check_checkpoint_id(self.after, "after")
        _limit(self.limit)


@input_class
class SearchInput:
    """Full-text search over checkpoints: every word of ``query`` must occur; newest first."""

    query: str = described("query", "Words to find.")
    project: str | None = described("project", "Only this project's.", default=None)
    limit: int = described("limit", "At most this many (1-1000).", default=20)

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise InputError("query", "must not be empty")
        if len(self.query) > QUERY_MAX:
            raise InputError("query", f"is longer than {QUERY_MAX} characters")
        if self.project is not None:
            check_project(self.project)
        _limit(self.limit)


def _limit(value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIST_MAX:
        raise InputError("limit", f"{value!r} is not an integer 1-{LIST_MAX}")
