"""Input checks shared by every operation's ``*Input``: each raises InputError naming the field."""

from __future__ import annotations

import os
import re
from typing import Any

from runner import scopes
from runner.agents.abc import NAME_PATTERN
from runner.errors import InputError
from runner.fence import Credential
from runner.guards.agents import LEASE_MACHINES

CONTROLLER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TTL_MIN, TTL_MAX, TTL_DEFAULT = 5, 86400, 900
REF_MAX = 1000


def default_holder() -> str:
    """``user@host``: who holds a lease, for people reading listings.

    ``getpass.getuser()`` and ``socket.gethostname()`` spelled without importing ``getpass`` and
    ``socket`` (every command names its actor with this; tests/test_layers.py checks the spelling):
    the first of LOGNAME, USER, LNAME, USERNAME that is set, else the password database's name, and
    the kernel's node name (what gethostname(2) returns).
    """
    user = next((os.environ[name] for name in ("LOGNAME", "USER", "LNAME", "USERNAME") if os.environ.get(name)), None)
    if user is None:
        import pwd

        try:
            user = pwd.getpwuid(os.getuid())[0]
        except (KeyError, OSError):
            user = "unknown"
    return f"{user}@{os.uname().nodename}"


def check_controller_id(value: str) -> None:
    if not isinstance(value, str) or not CONTROLLER_ID.match(value):
        raise InputError("controller_id", f"{value!r} is not 1-100 characters of [A-Za-z0-9_.-]")


def check_ttl(value: int | None, required: bool = False) -> None:
    if value is None and not required:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not TTL_MIN <= value <= TTL_MAX:
        raise InputError(
            "ttl_seconds", f"{value!r} is out of range: {TTL_MIN}..{TTL_MAX} seconds", minimum=TTL_MIN, maximum=TTL_MAX
        )


def check_ref(name: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InputError(name, "must not be empty")
    if len(value) > REF_MAX:
        raise InputError(name, f"is longer than {REF_MAX} characters")
    if any(ord(c) < 32 for c in value):
        raise InputError(name, "must not contain control characters")


def check_sha256(name: str, value: str) -> None:
    if not isinstance(value, str) or not SHA256.match(value):
        raise InputError(name, f"{value!r} is not a SHA-256 (64 lowercase hex digits)")


def check_holder(value: str | None) -> None:
    if value is not None:
        check_ref("holder", value)


def check_credential(credential: Credential, controller_id: str) -> None:
    if credential.controller_id != controller_id:
        raise InputError(
            "credential", f"the credential is for controller {credential.controller_id!r}", code="credential_mismatch"
        )


# --- agents, receipts, waits --------------------------------------------------------------------------

HOSTS = ("process", "herdr")  # the built-in agent hosts (runner/agents/hosts.py); plugins add more
TOKEN_PREFIX = "corral-receipt-v1."
TOKEN = re.compile(r"^corral-receipt-v1\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")
LEASE_ID = re.compile(r"^[a-z]{1,32}/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PANE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,127}$")
OPTION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CAPTURE_LINES_DEFAULT, CAPTURE_LINES_MAX = 200, 10000
WAIT_LINES_DEFAULT = 40
TIMEOUT_DEFAULT, TIMEOUT_MAX = 600.0, 86400.0
PROMPT_MAX = 1_000_000
BATCH_MAX = 8
WAIT_TARGETS_MAX = 64  # wait-any takes up to 64 targets, the count bench/waitany.py measures it at
WAITABLE = ("idle", "working", "done", "blocked")
RECEIPT_STATES = ("reserved", "pending", "completed", "failed", "abandoned")


def check_name(field_name: str, value: str) -> None:
    if not isinstance(value, str) or not re.match(NAME_PATTERN, value):
        raise InputError(field_name, f"{value!r} is not an agent name ([a-z][a-z0-9_-]{{0,31}})")


def check_cursor(field_name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(field_name, f"{value!r} is not a cursor (an integer >= 0)")


def is_host(name: str) -> bool:
    """Whether an agent host called ``name`` is registered (plugins load only when it is not a built-in)."""
    from runner.agents.hosts import known

    return known(name)


def known_hosts() -> list[str]:
    """Every registered agent host's name, plugins' included."""
    from runner.agents.hosts import AGENT_HOSTS

    return AGENT_HOSTS.names()


def check_host(value: str) -> None:
    """A registered agent host (built-in ``process``, ``herdr``, or a plugin's through ``corral.agent_hosts``)."""
    from runner.agents.hosts import AGENT_HOSTS, known

    if not isinstance(value, str) or not known(value):
        raise InputError("host", f"{value!r} is not an agent host ({', '.join(AGENT_HOSTS.names())})")


def check_agent(kind: str, host: str, model: str | None, effort: str | None) -> None:
    """What starting any agent takes: a kind name, a known host, plain ``--model`` / ``--effort`` values."""
    if not isinstance(kind, str) or not re.match(NAME_PATTERN, kind):
        raise InputError("kind", f"{kind!r} is not an agent kind name")
    check_host(host)
    for option, value in (("model", model), ("effort", effort)):
        if value is not None and not OPTION.match(value):
            raise InputError(option, f"{value!r} is not a plain option value")


def check_budget(budget_usd: float | None, budget_tokens: int | None, max_turns: int | None) -> None:
    """A lease's limits: a positive amount of dollars, a positive number of tokens, 1-10,000 turns."""
    if budget_usd is not None and (
        not isinstance(budget_usd, (int, float)) or isinstance(budget_usd, bool) or not 0 < budget_usd <= 1e6
    ):
        raise InputError("budget_usd", f"{budget_usd!r} is not an amount of dollars (0 < usd <= 1000000)")
    if budget_tokens is not None and (
        not isinstance(budget_tokens, int) or isinstance(budget_tokens, bool) or not 0 < budget_tokens <= 10**12
    ):
        raise InputError("budget_tokens", f"{budget_tokens!r} is not a number of tokens (1 ..= 10^12)")
    if max_turns is not None and (
        not isinstance(max_turns, int) or isinstance(max_turns, bool) or not 0 < max_turns <= 10_000
    ):
        raise InputError("max_turns", f"{max_turns!r} is not a number of turns (1 ..= 10000)")


def budget_options(budget_usd: float | None, budget_tokens: int | None, max_turns: int | None) -> dict[str, Any]:
    """The limits as a lease's recorded start options (only those given)."""
    return {
        k: v
        for k, v in (("budget_usd", budget_usd), ("budget_tokens", budget_tokens), ("max_turns", max_turns))
        if v is not None
    }


def check_timeout(value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= TIMEOUT_MAX:
        raise InputError("timeout", f"{value!r} is not a timeout in seconds (0 < t <= {TIMEOUT_MAX:g})")


def check_lines(value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= CAPTURE_LINES_MAX:
        raise InputError("lines", f"{value!r} is not a line count (1..{CAPTURE_LINES_MAX})")


def check_text(value: str, field_name: str = "text") -> None:
    if not isinstance(value, str) or not value.strip():
        raise InputError(field_name, "the prompt is empty")
    if len(value) > PROMPT_MAX:
        raise InputError(field_name, f"the prompt is longer than {PROMPT_MAX} characters")


def check_pane(field_name: str, value: str, what: str = "a pane id") -> None:
    if not isinstance(value, str) or not PANE_ID.match(value):
        raise InputError(field_name, f"{value!r} is not {what}")


def check_expected_agent(name: str, kind: str, cwd: str, seq: int, host: str) -> None:
    """The agent a caller says it saw in a pane it names: name, kind, absolute cwd, a cursor (an
    operator's close of an unleased pane, an adoption)."""
    check_name("expect_name", name)
    check_agent(kind, host, None, None)
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise InputError("expect_cwd", f"{cwd!r} is not an absolute path")
    check_cursor("expect_seq", seq)


def check_blocked_reason(value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 1000):
        raise InputError("reason", "an operator's reason is 1-1000 characters of text")


def check_message(name: str, value: str | None) -> None:
    if value is not None and len(value) > 1000:
        raise InputError(name, "is longer than 1000 characters")


def check_token(value: str) -> None:
    if not isinstance(value, str) or not TOKEN.match(value):
        raise InputError("receipt", f"{value!r} is not a receipt token ({TOKEN_PREFIX}<uuid>)")


def check_key(name: str, value: str | None) -> None:
    if value is not None and not (isinstance(value, str) and UUID.match(value)):
        raise InputError(name, f"{value!r} is not a UUID")


def check_instance_id(name: str, value: str | None) -> None:
    """A lease instance id as plans record it: ``MACHINE/KEY``."""
    if value is None:
        return
    machine, _, key = value.partition("/") if isinstance(value, str) else ("", "", "")
    if machine not in LEASE_MACHINES:
        raise InputError(name, f"{value!r} is not a lease instance id (reviewer/… or writer/…)")
    check_key(name, key)


def check_lease_ids(values: tuple[str, ...]) -> None:
    for lease in values:
        if not isinstance(lease, str) or not LEASE_ID.match(lease):
            raise InputError("lease", f"{lease!r} is not a lease id (MACHINE/UUID, as reports name them)")


def check_mode(value: str) -> None:
    if value not in ("all", "first"):
        raise InputError("mode", f"{value!r} is not all or first")


def check_absolute(name: str, value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.startswith("/")):
        raise InputError(name, f"{value!r} is not an absolute path")


# --- writer lanes -------------------------------------------------------------------------------------

OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[^\x00-\x20~^:?*\[\\\x7f]{1,255}$")
SCOPES_MAX = 500
PROTECTED_MAX = 20


def check_object_id(name: str, value: str) -> None:
    if not isinstance(value, str) or not OBJECT_ID.match(value):
        raise InputError(name, f"{value!r} is not a full commit id (40 or 64 lowercase hex digits)")


def check_branch(name: str, value: str) -> None:
    if not isinstance(value, str) or not BRANCH.match(value) or value.endswith((".lock", "/", ".")):
        raise InputError(name, f"{value!r} is not a branch name")


def scope_list(name: str, raw: tuple[str, ...], minimum: int) -> tuple[str, ...]:
    """``raw`` normalized (:func:`runner.scopes.normalize`), between ``minimum`` and :data:`SCOPES_MAX`."""
    normalized = scopes.normalize(raw, name)
    if not minimum <= len(normalized) <= SCOPES_MAX:
        raise InputError(name, f"give {minimum}-{SCOPES_MAX} scopes, not {len(normalized)}", code="scope_invalid")
    return normalized
