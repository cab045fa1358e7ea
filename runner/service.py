"""Operations every surface shares: one typed ``*Input`` per operation, validated on construction.

The CLI (and later HTTP and MCP) parse their arguments into these inputs, call :class:`Service`,
and render what comes back; no surface holds a business rule. An input that fails validation raises
:class:`~runner.errors.InputError` naming the field, before anything is read or written.
"""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import fence
from runner.context import Event, Instance
from runner.engine import Engine, Request, Result
from runner.errors import InputError, NotFoundError, RefusedError, SpecError, TransitionNotAllowedError
from runner.fence import Credential
from runner.spec.library import Library, Report
from runner.spec.model import MachineSpec
from runner.store.abc import Store

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


def _check_controller_id(value: str) -> None:
    if not isinstance(value, str) or not CONTROLLER_ID.match(value):
        raise InputError("controller_id", f"{value!r} is not 1-100 characters of [A-Za-z0-9_.-]")


def _check_ttl(value: int | None, required: bool = False) -> None:
    if value is None and not required:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not TTL_MIN <= value <= TTL_MAX:
        raise InputError(
            "ttl_seconds", f"{value!r} is out of range: {TTL_MIN}..{TTL_MAX} seconds", minimum=TTL_MIN, maximum=TTL_MAX
        )


def _check_ref(name: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InputError(name, "must not be empty")
    if len(value) > REF_MAX:
        raise InputError(name, f"is longer than {REF_MAX} characters")
    if any(ord(c) < 32 for c in value):
        raise InputError(name, "must not contain control characters")


def _check_sha256(name: str, value: str) -> None:
    if not isinstance(value, str) or not SHA256.match(value):
        raise InputError(name, f"{value!r} is not a SHA-256 (64 lowercase hex digits)")


def _check_holder(value: str | None) -> None:
    if value is not None:
        _check_ref("holder", value)


def _check_credential(credential: Credential, controller_id: str) -> None:
    if credential.controller_id != controller_id:
        raise InputError(
            "credential", f"the credential is for controller {credential.controller_id!r}", code="credential_mismatch"
        )


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcquireInput:
    """Take the lease of a controller id that nobody holds."""

    controller_id: str
    authority_ref: str
    authority_sha256: str
    ttl_seconds: int = TTL_DEFAULT
    holder: str | None = None

    def __post_init__(self) -> None:
        _check_controller_id(self.controller_id)
        _check_ref("authority_ref", self.authority_ref)
        _check_sha256("authority_sha256", self.authority_sha256)
        _check_ttl(self.ttl_seconds, required=True)
        _check_holder(self.holder)


@dataclass(frozen=True)
class RenewInput:
    """Extend the lease the credential holds; ``ttl_seconds`` defaults to the lease's own."""

    controller_id: str
    credential: Credential
    ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        _check_controller_id(self.controller_id)
        _check_credential(self.credential, self.controller_id)
        _check_ttl(self.ttl_seconds)


@dataclass(frozen=True)
class ResumeInput:
    """Continue one's own lease (even expired) with a new token and the next generation."""

    controller_id: str
    credential: Credential
    ttl_seconds: int | None = None
    holder: str | None = None

    def __post_init__(self) -> None:
        _check_controller_id(self.controller_id)
        _check_credential(self.credential, self.controller_id)
        _check_ttl(self.ttl_seconds)
        _check_holder(self.holder)


@dataclass(frozen=True)
class TakeoverInput:
    """Claim another holder's expired lease, naming the lease id seen expire."""

    controller_id: str
    expected_lease_id: str
    ttl_seconds: int = TTL_DEFAULT
    holder: str | None = None
    authority_ref: str | None = None
    authority_sha256: str | None = None

    def __post_init__(self) -> None:
        _check_controller_id(self.controller_id)
        if not isinstance(self.expected_lease_id, str) or not UUID.match(self.expected_lease_id):
            raise InputError("expected_lease_id", f"{self.expected_lease_id!r} is not a lease id (a UUID)")
        _check_ttl(self.ttl_seconds, required=True)
        _check_holder(self.holder)
        if (self.authority_ref is None) != (self.authority_sha256 is None):
            raise InputError(
                "authority_sha256" if self.authority_ref else "authority_ref",
                "authority_ref and authority_sha256 go together",
            )
        if self.authority_ref is not None and self.authority_sha256 is not None:
            _check_ref("authority_ref", self.authority_ref)
            _check_sha256("authority_sha256", self.authority_sha256)


@dataclass(frozen=True)
class ReleaseInput:
    """Give the lease up, recording where the work stands."""

    controller_id: str
    credential: Credential
    checkpoint_ref: str
    checkpoint_sha256: str

    def __post_init__(self) -> None:
        _check_controller_id(self.controller_id)
        _check_credential(self.credential, self.controller_id)
        _check_ref("checkpoint_ref", self.checkpoint_ref)
        _check_sha256("checkpoint_sha256", self.checkpoint_sha256)


@dataclass(frozen=True)
class ListLeasesInput:
    """Every controller lease (or one), with expiry judged now; never a secret."""

    controller_id: str | None = None

    def __post_init__(self) -> None:
        if self.controller_id is not None:
            _check_controller_id(self.controller_id)


@dataclass(frozen=True)
class EventsInput:
    """The event log after ``since``, optionally of one instance, at most ``limit`` events."""

    since: int = 0
    limit: int | None = None
    instance_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.since, int) or self.since < 0:
            raise InputError("since", f"{self.since!r} is not a sequence number (an integer >= 0)")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise InputError("limit", f"{self.limit!r} is not a positive integer")


@dataclass(frozen=True)
class ValidateInput:
    """Definition files to validate; empty means the built-in and local machines."""

    paths: tuple[Path, ...] = ()


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseView:
    """A lease as listings show it: every public field, the expiry judged by the store's clock."""

    controller_id: str
    state: str
    version: int
    expired: bool
    data: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id,
            "state": self.state,
            "expired": self.expired,
            "version": self.version,
            **{k: v for k, v in self.data.items() if k != "controller_id"},
        }


@dataclass(frozen=True)
class Grant:
    """A newly issued lease. ``credential`` holds the token: hand it over once, never log it."""

    lease: LeaseView
    credential: Credential = field(repr=False)
    event_seq: int


@dataclass(frozen=True)
class MachineSummary:
    """One machine as ``corral machines`` lists it; an invalid file is listed with its first error."""

    name: str
    version: int | None
    description: str
    path: str
    builtin: bool
    states: int
    transitions: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Service:
    """corral's operations over one store."""

    def __init__(self, store: Store, library: Library, actor: str | None = None) -> None:
        self.store = store
        self.library = library
        self.engine = Engine(store, library)
        self.actor = actor or default_holder()

    # --- controller lease -----------------------------------------------------------------------

    def _controller(self) -> MachineSpec:
        return self.library.builtin("controller")

    def _fire(self, controller_id: str, trigger: str, params: dict[str, Any], token: str | None = None) -> Result:
        spec = self._controller()
        request = Request(
            instance_id=fence.instance_id(controller_id),
            trigger=trigger,
            params={"controller_id": controller_id, **{k: v for k, v in params.items() if v is not None}},
            secrets={"token": token} if token is not None else {},
            actor=self.actor,
        )
        try:
            return self.engine.fire(spec, request)
        except TransitionNotAllowedError as exc:
            if token is None:
                raise
            # A credential for a lease that is no longer active is stale, whatever the trigger.
            raise RefusedError(
                f"the lease of controller {controller_id!r} is {exc.details.get('state')}: the credential is stale",
                code="fence_stale",
                controller_id=controller_id,
                state=exc.details.get("state"),
            ) from None
        except NotFoundError as exc:
            if exc.code != "instance_unknown":
                raise
            raise NotFoundError(
                f"no lease was ever granted for controller {controller_id!r}; acquire it first",
                code="controller_unknown",
                controller_id=controller_id,
            ) from None

    def _grant(self, result: Result) -> Grant:
        data = result.instance.data
        credential = Credential(data["controller_id"], data["lease_id"], data["generation"], result.reply["token"])
        return Grant(self._view(result.instance), credential, result.events[-1].seq)

    def _view(self, instance: Instance) -> LeaseView:
        spec = self._controller()
        expired = instance.state == "active" and fence.is_expired(instance, self.store.now())
        return LeaseView(
            instance.data["controller_id"], instance.state, instance.version, expired, spec.public_data(instance.data)
        )

    def acquire(self, inp: AcquireInput) -> Grant:
        """Take the lease; refused with ``lease_held`` while any lease is active, even an expired one."""
        try:
            result = self._fire(
                inp.controller_id,
                "acquire",
                {
                    "ttl_seconds": inp.ttl_seconds,
                    "holder": inp.holder or default_holder(),
                    "authority_ref": inp.authority_ref,
                    "authority_sha256": inp.authority_sha256,
                },
            )
        except TransitionNotAllowedError:
            current = self.store.get(fence.instance_id(inp.controller_id))
            view = self._view(current) if current else None
            how = "take it over (it has expired)" if view and view.expired else "wait for its release or expiry"
            raise RefusedError(
                f"controller {inp.controller_id!r} is held (lease {view.data.get('lease_id') if view else '?'}, "
                f"{'expired' if view and view.expired else 'live'}); its holder may resume it, others may {how}",
                code="lease_held",
                controller_id=inp.controller_id,
                expired=view.expired if view else None,
                lease_id=view.data.get("lease_id") if view else None,
                expires_at=view.data.get("expires_at") if view else None,
            ) from None
        return self._grant(result)

    def renew(self, inp: RenewInput) -> LeaseView:
        """Extend the lease; the fence is unchanged. Refused: ``fence_stale``, ``lease_expired``."""
        result = self._fire(
            inp.controller_id,
            "renew",
            {
                "lease_id": inp.credential.lease_id,
                "generation": inp.credential.generation,
                "ttl_seconds": inp.ttl_seconds,
            },
            token=inp.credential.token,
        )
        return self._view(result.instance)

    def resume(self, inp: ResumeInput) -> Grant:
        """Re-grant one's own lease with a new token and generation; the old token dies now."""
        result = self._fire(
            inp.controller_id,
            "resume",
            {
                "lease_id": inp.credential.lease_id,
                "generation": inp.credential.generation,
                "ttl_seconds": inp.ttl_seconds,
                "holder": inp.holder,
            },
            token=inp.credential.token,
        )
        return self._grant(result)

    def takeover(self, inp: TakeoverInput) -> Grant:
        """Claim an expired lease. Refused: ``lease_not_expired``, ``lease_mismatch``."""
        try:
            result = self._fire(
                inp.controller_id,
                "takeover",
                {
                    "expected_lease_id": inp.expected_lease_id,
                    "ttl_seconds": inp.ttl_seconds,
                    "holder": inp.holder or default_holder(),
                    "authority_ref": inp.authority_ref,
                    "authority_sha256": inp.authority_sha256,
                },
            )
        except TransitionNotAllowedError as exc:
            raise RefusedError(
                f"controller {inp.controller_id!r} is not held (it is {exc.details.get('state')}): acquire it instead",
                code="lease_not_held",
                controller_id=inp.controller_id,
                state=exc.details.get("state"),
            ) from None
        return self._grant(result)

    def release(self, inp: ReleaseInput) -> LeaseView:
        """Give the lease up with a checkpoint (allowed after expiry unless someone took it over)."""
        result = self._fire(
            inp.controller_id,
            "release",
            {
                "lease_id": inp.credential.lease_id,
                "generation": inp.credential.generation,
                "checkpoint_ref": inp.checkpoint_ref,
                "checkpoint_sha256": inp.checkpoint_sha256,
            },
            token=inp.credential.token,
        )
        return self._view(result.instance)

    def leases(self, inp: ListLeasesInput) -> list[LeaseView]:
        """Leases by controller id, with ``expired`` judged by the store's clock."""
        if inp.controller_id is not None:
            found = self.store.get(fence.instance_id(inp.controller_id))
            if found is None:
                raise NotFoundError(
                    f"no lease was ever granted for controller {inp.controller_id!r}",
                    code="controller_unknown",
                    controller_id=inp.controller_id,
                )
            return [self._view(found)]
        return [self._view(i) for i in self.store.find("controller")]

    # --- events, definitions --------------------------------------------------------------------

    def events(self, inp: EventsInput) -> list[Event]:
        return self.store.events(inp.since, inp.limit, inp.instance_id)


def validate(library: Library, inp: ValidateInput) -> list[Report]:
    """Validate definition files (default: every built-in and local machine); never raises for them."""
    from runner.errors import Diagnostic
    from runner.spec.library import validate_file

    paths = list(inp.paths)
    if not paths:
        paths = library.builtin_paths() + library.local_paths()
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        else:
            files.append(path)
    builtin_names = {p.stem for p in library.builtin_paths()}
    builtin_dir = library.builtin_paths()[0].parent.resolve() if library.builtin_paths() else None
    reports = []
    for path in files:
        if not path.exists():
            reports.append(
                Report(
                    str(path),
                    "unknown",
                    None,
                    [Diagnostic("spec_unreadable", "error", "no such file or directory", str(path))],
                )
            )
            continue
        report, _ = validate_file(path)
        if report.kind == "machine" and report.name in builtin_names and path.resolve().parent != builtin_dir:
            report.diagnostics.append(
                Diagnostic(
                    "spec_shadows_builtin",
                    "error",
                    f"machine {report.name!r} is a built-in name; a local machine may not replace a built-in lifecycle",
                    report.path,
                    pointer="/machine",
                )
            )
        reports.append(report)
    return reports


def machines(library: Library) -> list[MachineSummary]:
    """Every machine the library can find, built-ins first."""
    out = []
    builtin_paths = set(library.builtin_paths())
    for path in library.builtin_paths() + library.local_paths():
        try:
            spec = library.load(path)
        except SpecError as exc:  # one broken local file must not hide the others
            out.append(MachineSummary(path.stem, None, "", str(path), path in builtin_paths, 0, 0, exc.message))
            continue
        out.append(
            MachineSummary(
                spec.name,
                spec.version,
                spec.description,
                spec.path,
                path in builtin_paths,
                len(spec.states),
                len(spec.transitions),
            )
        )
    return out
