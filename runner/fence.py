"""Fence tokens: the proof that a caller still holds a controller lease.

A fence is a generation (an integer that only grows, one step per grant) and a 128-bit random
token. The caller keeps the token; the store keeps only its SHA-256, so a copy of the database
grants nothing. A request is honoured only if its lease id, generation and token all match the
lease as it is now; anything older is stale, whatever its age.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runner.context import Instance, Rejection, parse_time

TOKEN_BYTES = 16  # 128 bits


def new_token() -> str:
    """A fresh fence token: 32 lowercase hex digits from the OS's CSPRNG."""
    return secrets.token_hex(TOKEN_BYTES)


def hash_token(token: str) -> str:
    """The SHA-256 (hex) under which a token is stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def instance_id(controller_id: str) -> str:
    """The store id of the lease instance for ``controller_id``."""
    return f"controller/{controller_id}"


@dataclass(frozen=True, init=False)
class Credential:
    """What a holder presents: which grant it holds and the token proving it.

    The token is excluded from ``repr`` so a credential logged by accident leaks nothing.
    """

    controller_id: str
    lease_id: str
    generation: int
    token: str = field(repr=False)

    def __init__(self, controller_id: str, lease_id: str, generation: int, token: str) -> None:
        # One call instead of a frozen dataclass's field-by-field object.__setattr__ (see runner.context).
        self.__dict__.update(controller_id=controller_id, lease_id=lease_id, generation=generation, token=token)


@dataclass(frozen=True)
class Proposal:
    """A grant's lease id and token chosen by the caller before asking for it.

    A caller that must not lose a token to a crash (a plan runner) records the credential it *will*
    hold before the grant commits; after a crash, that credential either works (the grant
    happened) or is stale (it did not). The store still keeps only the token's hash.
    """

    lease_id: str
    token: str = field(repr=False)

    @classmethod
    def new(cls) -> Proposal:
        import uuid

        return cls(str(uuid.uuid4()), new_token())

    def __post_init__(self) -> None:
        import re

        if not re.match(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", self.lease_id):
            raise ValueError("a proposed lease id is a UUID")
        if not re.match(r"^[0-9a-f]{32}$", self.token):
            raise ValueError("a proposed token is 32 lowercase hex digits")


def is_expired(lease: Instance, now: datetime) -> bool:
    """Whether an active lease's expiry has passed by the store's clock."""
    expires_at = lease.data.get("expires_at")
    return expires_at is not None and parse_time(expires_at) <= now


def check(
    lease: Instance | None, credential: Credential, now: datetime, *, allow_expired: bool = False
) -> Rejection | None:
    """Judge ``credential`` against ``lease`` as read inside the current transaction.

    Returns None when the credential holds the lease now; otherwise a rejection: ``fence_stale``
    (released, superseded, wrong token, older generation) or ``lease_expired`` (right credential,
    past expiry, and the operation does not allow that).
    """
    if lease is None or not lease.exists:
        return Rejection("fence_stale", f"no lease was ever granted for controller {credential.controller_id!r}")
    data = lease.data
    current_hash = data.get("token_sha256") or ""
    same_grant = data.get("lease_id") == credential.lease_id and data.get("generation") == credential.generation
    # Compare the token in constant time even when the grant already differs (and whatever the state).
    same_token = hmac.compare_digest(hash_token(credential.token), current_hash)
    if lease.state == "active" and same_grant and same_token:
        if allow_expired or not is_expired(lease, now):
            return None
        return Rejection(
            "lease_expired",
            f"the lease of controller {credential.controller_id!r} expired at {data.get('expires_at')}; "
            "resume it with the same credential",
            {**_facts(data, credential), "expires_at": data.get("expires_at")},
        )
    if lease.state != "active":
        return Rejection(
            "fence_stale",
            f"the lease of controller {credential.controller_id!r} is {lease.state}",
            _facts(data, credential),
        )
    return Rejection(
        "fence_stale",
        f"the credential for controller {credential.controller_id!r} is stale: the lease was re-granted "
        "or the token is wrong",
        _facts(data, credential),
    )


def _facts(data: Mapping[str, Any], credential: Credential) -> dict[str, Any]:
    """What a refusal reports: the generations presented and current (never a token or its hash)."""
    return {
        "controller_id": credential.controller_id,
        "presented_generation": credential.generation,
        "current_generation": data.get("generation"),
    }
