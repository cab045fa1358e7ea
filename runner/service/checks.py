"""Input checks shared by every operation's ``*Input``: each raises InputError naming the field."""

from __future__ import annotations

import getpass
import re
import socket

from runner.errors import InputError
from runner.fence import Credential

CONTROLLER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TTL_MIN, TTL_MAX, TTL_DEFAULT = 5, 86400, 900
REF_MAX = 1000


def default_holder() -> str:
    """``user@host``: who holds a lease, for people reading listings."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


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
