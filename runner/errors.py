"""Every error corral raises on purpose, and how each surface reports it.

One root, :class:`CorralError`. Every subclass carries a stable ``code`` (the word a caller branches
on), a human ``message`` and structured ``details``. The category decides the exit status of the CLI
(and, later, the HTTP status and MCP error) through :data:`STATUS`, the one table every surface reads::

    CorralError                       internal      exit 1   something unexpected
    ├── UsageError                    usage         exit 2   the command line itself is wrong
    ├── InvalidError                  invalid       exit 3   a definition or an input is wrong
    │   ├── SpecError                                        a machine/recipe file failed validation
    │   ├── InputError                                       an operation's input failed validation
    │   ├── NotFoundError                                    a named thing does not exist
    │   ├── CredentialError                                  the local credential file is unusable
    │   ├── StoreVersionError                                the database is newer than this code
    │   ├── StoreCorruptError                                the database file or a row is damaged
    │   ├── StoreForeignError                                the file is another application's database
    │   └── HomeInsecureError                                the state home is not a private directory
    ├── RefusedError                  refused       exit 4   a guard said no (the code says which)
    │   ├── TransitionNotAllowedError                        the trigger is not allowed in this state
    │   └── AuthorityMovedError                              an effect's gate: the fence or instance moved
    ├── ConflictError                 conflict      exit 5   the world changed underneath; re-read
    │   ├── OutcomeUnrecordedError                           an effect acted; its instance moved meanwhile
    │   ├── StoreBusyError                                   the store stayed locked past the deadline
    │   ├── StoreUnavailableError                            the store's server cannot be reached
    │   └── EventsPrunedError                                the events asked for were pruned (retention)
    ├── AgentRunFailedError           agent_failed  exit 6   the agent's run failed (it exited non-zero,
    │   │                                                    or its CLI reported an error: is_error, turn.failed)
    │   └── AgentSessionLostError                            the lease's conversation cannot be resumed
    ├── (AgentOperationError)         agent_operation exit 7 starting or closing an agent failed on its host
    │                                                        (runner.service.core; the lease's state is in details)
    ├── InvariantViolatedError        violated      exit 8   ``corral check`` found an invariant broken
    └── CheckIncompleteError          incomplete    exit 9   ``corral check`` stopped short (budget or depth)

Exit 1 is for bugs only: an agent host that failed to start or close a pane is ``agent_operation``
(exit 7, HTTP 502), not ``internal``: the host failed, not corral.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final


@dataclass(frozen=True)
class Status:
    """How one error category is reported by each surface."""

    exit: int
    http: int


# Invariant: every category used by an error class below has exactly one row here.
STATUS: Final[dict[str, Status]] = {
    "internal": Status(exit=1, http=500),
    "usage": Status(exit=2, http=400),
    "invalid": Status(exit=3, http=422),
    "refused": Status(exit=4, http=409),
    "conflict": Status(exit=5, http=409),
    "agent_failed": Status(exit=6, http=502),
    "agent_operation": Status(exit=7, http=502),
    "violated": Status(exit=8, http=422),
    "incomplete": Status(exit=9, http=422),
}


class CorralError(Exception):
    """Root of every deliberate corral error.

    Raised directly only for conditions that should never happen (a bug or a broken installation);
    the caller should report it and stop.
    """

    category: ClassVar[str] = "internal"
    default_code: ClassVar[str] = "internal"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details: dict[str, Any] = details

    @property
    def status(self) -> Status:
        """The reporting row for this error's category."""
        return STATUS[self.category]

    def to_dict(self) -> dict[str, Any]:
        """The ``{"code", "message", "details"}`` object every surface emits."""
        return {"code": self.code, "message": self.message, "details": self.details}


class UsageError(CorralError):
    """The command line could not be parsed. Raised by the CLI; fix the invocation."""

    category = "usage"
    default_code = "usage"


class InvalidError(CorralError):
    """A definition or input is wrong. Nothing was written; fix the input and try again."""

    category = "invalid"
    default_code = "invalid"


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a definition file: where, how bad, and a stable code."""

    code: str
    severity: str  # "error" or "warning"
    message: str
    path: str
    line: int | None = None
    column: int | None = None
    pointer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "pointer": self.pointer,
        }

    def render(self) -> str:
        """``file:line:col: severity code pointer: message``, the shape editors and CI parse."""
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        pointer = f" {self.pointer}" if self.pointer else ""
        return f"{where}: {self.severity} {self.code}{pointer}: {self.message}"


class SpecError(InvalidError):
    """A machine or recipe definition failed to load, validate or lint.

    Raised by ``runner.definitions`` with every diagnostic found; the code is that of the first error.
    Fix the file at the reported line and run ``corral validate`` again.
    """

    default_code = "spec_invalid"

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        errors = [d for d in diagnostics if d.severity == "error"] or diagnostics
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(
            first.render() + more,
            code=first.code,
            diagnostics=[d.to_dict() for d in diagnostics],
        )
        self.diagnostics = diagnostics


class InputError(InvalidError):
    """An operation's input is invalid; ``details["field"]`` names the field. Nothing was written."""

    default_code = "input_invalid"

    def __init__(self, field: str, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(f"{field}: {message}", code=code, field=field, **details)


class NotFoundError(InvalidError):
    """A named machine, instance or controller does not exist. Check the name, or create it first."""

    default_code = "not_found"


class CredentialError(InvalidError):
    """The local credential file is missing, corrupt, unsafe, or for another store.

    Raised by ``runner.credentials`` (``credential_missing``, ``credential_insecure``: not a 0600
    regular file of this user in a 0700 directory, or a symlink/FIFO; ``credential_corrupt``;
    ``credential_store_mismatch``) and ``runner.lineage`` (``credential_bind_unavailable``).
    Fix the file's mode or directory, or acquire, resume or take over the lease to get a fresh one;
    never edit a credential by hand.
    """

    default_code = "credential_invalid"


class StoreVersionError(InvalidError):
    """The database was written by a newer corral. Upgrade corral; never downgrade a database."""

    default_code = "store_too_new"


class StoreCorruptError(InvalidError):
    """The store's file is empty, truncated, not an SQLite database, or a row cannot be decoded.

    Raised by ``runner.sql.store_sqlite`` at open (``details["path"]``) or when a row is read
    (``details["table"]``, ``details["row"]``); nothing was written. Restore the file from a backup,
    or move it away to start a new store; corral never re-initialises it in place.
    """

    default_code = "store_corrupt"


class StoreForeignError(InvalidError):
    """The store's file is an SQLite database that corral did not create (another application id,
    or tables and no corral tables). Point ``--store`` elsewhere or move the file away."""

    default_code = "store_foreign"


class HomeInsecureError(InvalidError):
    """The state home (or its ``credentials/`` directory) is not a private directory of this user:
    a symlink, not a directory, or owned by someone else. Raised by ``runner.home``; fix or remove
    the path (``details["path"]``, ``details["mode"]``, ``details["owner"]``) and run again."""

    default_code = "home_insecure"


class RefusedError(CorralError):
    """A guard refused the transition; ``code`` names the rule (``fence_stale``, ``lease_expired``…).

    Nothing was written. Do not retry blindly: re-read the world (``corral controller list``,
    ``corral events``) and decide again.
    """

    category = "refused"
    default_code = "refused"


class TransitionNotAllowedError(RefusedError):
    """The machine has no transition for this trigger from the instance's current state."""

    default_code = "transition_not_allowed"


class AuthorityMovedError(RefusedError):
    """An effect was about to act, but the authority it was granted under had moved since its intent
    was recorded: the controller's fence (``fence_stale``, ``lease_expired``), or the instance itself
    (``instance_moved``: e.g. a receipt abandoned meanwhile). Raised by an effect's gate *before* it
    acted, so nothing was started, delivered or closed. Re-read the world and decide again.
    """

    default_code = "instance_moved"


class ConflictError(CorralError):
    """The instance changed between read and write (compare-and-set lost). Re-read, then decide."""

    category = "conflict"
    default_code = "version_conflict"


class OutcomeUnrecordedError(ConflictError):
    """An effect acted, but its outcome could not be recorded because the instance moved meanwhile
    (possible only on hosts whose hand-over is not atomic with the store). ``details`` says what
    happened (``effect_outcome``, ``delivered``) and the instance as it now stands: believe those,
    then reconcile or abandon on fresh evidence.
    """

    default_code = "outcome_unrecorded"


class StoreBusyError(ConflictError):
    """The store stayed write-locked past its busy budget. Try again later; nothing was written.

    Raised by a store's ``write()`` (SQLite: after waiting in its FIFO write queue and SQLite's own
    retries, together at most ``busy_deadline`` seconds). ``details``: ``path``, ``budget_seconds``
    (the budget), ``waited_seconds`` (how long this writer waited) and ``attempts`` (tries at the lock).
    """

    default_code = "store_busy"


class StoreUnavailableError(ConflictError):
    """The store's database server cannot be reached (refused, gone, or the connection was lost).

    Raised by the PostgreSQL store (``runner.sql.store_postgres``) when connecting fails or a connection
    breaks; ``details`` name the server (``server``: host, port, database, schema; never a password)
    and, for a commit whose answer was lost, ``outcome: "unknown"``. Nothing is re-sent: re-read the
    state (a compare-and-set may have committed) and retry once the server is back.
    """

    default_code = "store_unavailable"


class EventsPrunedError(ConflictError):
    """A reader asked for events after ``since``, but the log was pruned up to a higher sequence number.

    Raised by every store read of the event log when ``since`` is below the store's retention floor
    (``details["floor"]``, the highest pruned sequence number; ``details["since"]``): the reader
    would otherwise miss events without knowing. Read again from the floor on purpose
    (``corral events --from-floor``, or ``--since FLOOR``), knowing that the older events are gone.
    """

    default_code = "events_pruned"

    def __init__(self, since: int, floor: int) -> None:
        super().__init__(
            f"the events after {since} were pruned up to {floor} (the retention floor): read from "
            f"--since {floor} or --from-floor to start at the oldest event kept",
            since=since,
            floor=floor,
        )
        self.since = since
        self.floor = floor


class AgentRunFailedError(CorralError):
    """The agent's run failed: its command could not start or exited with a non-zero status that is not
    its kind's "blocked" signal. Raised by ``collect``/``ask`` after the result was recorded: the receipt
    is ``completed`` with ``exit_status``, and ``details`` carries the receipt and the captured output.
    Read the output, fix the agent (its command, credentials, the prompt), and ask again.
    """

    category = "agent_failed"
    default_code = "agent_run_failed"


class AgentDeniedError(AgentRunFailedError):
    """A plan step's prompt ran, but the agent CLI denied some of what the agent tried (an edit outside
    its owned scopes, a tool its role does not grant): not a clean success. Raised by the plan's
    collecting step unless the step allows denials (``allow_denials: true``); ``details`` lists each
    denial (tool and path) and the receipt, which is recorded ``completed`` and marked ``denied``.
    """

    default_code = "agent_denied"


class AgentSessionLostError(AgentRunFailedError):
    """The agent CLI could not resume the lease's conversation (its session is gone: another home, a
    pruned session store). corral never starts a fresh conversation in its place, which would lose
    what the agent was told before. Raised by ``collect``/``ask``; the receipt is recorded. Close the
    lease and start a new one (a new conversation), telling it what it needs again.
    """

    default_code = "agent_session_lost"


class InvariantViolatedError(CorralError):
    """``corral check`` found a machine's invariant broken on some interleaving; ``details`` holds each
    violation with its shortest counterexample. Fix the machine (a guard, a recheck) and check again."""

    category = "violated"
    default_code = "invariant_violated"


class CheckIncompleteError(CorralError):
    """``corral check`` stopped short of every reachable world (``details.stopped``: ``budget`` or
    ``depth``) and found nothing broken so far. Raise ``--budget`` or ``--depth``, or check fewer actors."""

    category = "incomplete"
    default_code = "check_incomplete"
