"""Local credential files: where the CLI keeps a fence token so it never travels through argv.

One file per controller id, ``$CORRAL_HOME/credentials/<controller>.json``. Reading is defensive,
because the file is the controller's authority and anything may have been put in its place:

- the directory must be a real directory (not a symlink) owned by this user with no group or other
  permission bits (0700); the file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a symlink or FIFO
  neither redirects nor hangs the reader) and judged on ``fstat`` of what was opened: a regular file
  owned by this user with mode exactly 0600, at most :data:`MAX_BYTES`;
- the JSON must have exactly the expected keys and types (``format`` the integer 1, ``generation``
  an integer and not a boolean, the lease id a UUID, the token 32 hex digits).

Every refusal is a :class:`~runner.errors.CredentialError` (exit 3) naming the path and what is
wrong: ``credential_missing``, ``credential_insecure`` (who may reach it, or what kind of file it
is), ``credential_corrupt`` (its content), ``credential_store_mismatch``. A credential bound with
``--bind-process`` is honoured only inside the bound lineage (:mod:`runner.lineage`,
``caller_not_controller``, exit 4).

A credential names its store by the store's identity: ``store_id`` (the random id the
store made when it was created, kept when it is moved: ``corral store migrate``) and ``store``, the
store's URL without a password and in one spelling (``postgres://`` is ``postgresql://``, an SQLite
path absolute: :func:`canonical_url`), so a password in ``--store`` never lands in the file and two
spellings of one store are one store. A file is checked against the store by ``store_id`` when both
sides know one, else by the canonical URL, so files written before (URL only, perhaps with a
password) stay readable, and are rewritten in the new form on the next grant.

Writing is atomic: a temporary file created ``O_EXCL | O_NOFOLLOW`` with mode 0600 in the same
directory, fsynced, renamed over the file (a rename replaces a symlink, it never follows one), and
the directory fsynced. Every write and removal holds ``fcntl.flock`` on a sibling lock file
``.<controller>.json.lock``; a removal (after a release) happens only if the file still holds the
lease that was released, so a release can never delete its successor's credential.

A grant (:func:`grant`) records its *proposal* (lease id and token chosen before the grant, see
:class:`~runner.fence.Proposal`) before the grant commits, with ``previous``: the credential in force
until then. After a crash between the grant and the final write, the file is settled when read
(:func:`settle`): the proposal if the store's lease now holds it (the grant happened), else the
previous credential if the lease still holds that (it did not), else the proposal, which is stale;
the next ``acquire`` replaces a stale file, so nothing is ever a dead end.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from runner import faults, jsonvalues, privatefile
from runner.errors import CredentialError
from runner.fence import Credential, Proposal, hash_token
from runner.lineage import Binding

if TYPE_CHECKING:
    from runner.context import Instance

FORMAT = 1
MAX_BYTES = 64 * 1024
LEASE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TOKEN = re.compile(r"^[0-9a-f]{32}$")
CONTROLLER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
BOOT_ID = re.compile(r"^[0-9a-f-]{1,64}$")
PANE_ID = re.compile(r"^[\x21-\x7e]{1,200}$")
_REQUIRED = {"format", "controller_id", "lease_id", "generation", "token", "store"}
_OPTIONAL = {"binding", "pending", "previous", "store_id"}
STORE_ID = re.compile(r"^[0-9A-Za-z_-]{1,128}$")
_SECRET_PARAMS = {"password", "passfile", "sslpassword"}


def canonical_url(url: str) -> str:
    """A store URL in one spelling and without secrets: an SQLite URL or bare path as
    ``sqlite:///absolute/path``; ``postgres://`` as ``postgresql://``; no password in the user part
    or the query. What a credential file records of its store (never a password)."""
    if url.startswith("sqlite:") or "://" not in url:
        rest = url[len("sqlite:") :] if url.startswith("sqlite:") else url
        if rest.startswith("//"):
            rest = "/" + rest.lstrip("/")
        return "sqlite://" + os.path.abspath(rest)
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme == "postgres" else parts.scheme
    netloc = parts.netloc.rpartition("@")[2]
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in _SECRET_PARAMS])
    return urlunsplit(parts._replace(scheme=scheme, netloc=netloc, query=query))


@dataclass(frozen=True)
class StoreRef:
    """The store a credential belongs to: its canonical URL and (when the store has one) its id."""

    url: str
    store_id: str | None = None

    @classmethod
    def of(cls, store: str | StoreRef) -> StoreRef:
        """``store`` as a reference: a bare URL (an older caller) has no id."""
        return store if isinstance(store, StoreRef) else cls(canonical_url(store))

    def same(self, url: str, store_id: str | None) -> bool:
        """Whether a file recording ``url`` and ``store_id`` is about this store."""
        if store_id is not None and self.store_id is not None:
            return store_id == self.store_id
        return canonical_url(url) == self.url


@dataclass(frozen=True)
class Stored:
    """One credential file's content.

    Invariant: ``pending`` is True exactly while a grant is in flight (or was when its process died);
    then ``credential`` is the proposal and ``previous`` what was in force before it (or None).
    """

    credential: Credential
    store: str | StoreRef
    binding: Binding | None = None
    pending: bool = False
    previous: Credential | None = field(default=None, repr=False)

    def holds(self, credential: Credential) -> bool:
        """Whether this file is (still) about the grant ``credential`` belongs to."""
        same = [c for c in (self.credential, self.previous) if c is not None]
        return any(c.lease_id == credential.lease_id and c.generation == credential.generation for c in same)


def path_for(directory: Path, controller_id: str) -> Path:
    """The credential file of ``controller_id`` (ids are ``[A-Za-z0-9_.-]``: no separators)."""
    return directory / f"{controller_id}.json"


# --- reading ---------------------------------------------------------------------------------------


def _insecure(path: Path, why: str, **details: Any) -> CredentialError:
    return CredentialError(
        f"the credential file {path} is refused: {why}",
        code="credential_insecure",
        path=str(path),
        **details,
    )


def _corrupt(path: Path, why: str) -> CredentialError:
    return CredentialError(
        f"the credential file {path} is corrupt: {why}; resume with a good copy or take the lease over",
        code="credential_corrupt",
        path=str(path),
    )


def check_directory(directory: Path) -> None:
    """Refuse a credentials directory that is a symlink, not ours, or open to group or others."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return  # the file's own open reports it missing
    except OSError as exc:
        raise _insecure(directory, f"its directory cannot be examined ({exc.strerror})") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise _insecure(directory, "the credentials directory is not a real directory (a symlink?)")
    if info.st_uid != os.geteuid():
        raise _insecure(directory, f"the credentials directory is owned by uid {info.st_uid}, not by this user")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise _insecure(
            directory, f"the credentials directory has mode {mode:o}; it must be 0700 (chmod 700 it)", mode=f"{mode:o}"
        )


def _refuse_credential(path: Path) -> Callable[[privatefile.Refusal], CredentialError]:
    def refuse(refusal: privatefile.Refusal) -> CredentialError:
        if refusal.kind == "owner":
            return _insecure(path, f"{refusal.why}, not by this user")
        if refusal.kind == "mode" and refusal.mode is not None:
            return _insecure(path, refusal.why, mode=f"{refusal.mode:o}")
        return _insecure(path, refusal.why)

    return refuse


def _read_bytes(path: Path) -> bytes | None:
    check_directory(path.parent)
    with privatefile.open_private(path, privatefile.EXACTLY_0600, _refuse_credential(path)) as opened:
        if opened is None:
            return None
        fd, info = opened
        try:
            if info.st_size > MAX_BYTES:
                raise _corrupt(path, f"it is {info.st_size} bytes, more than {MAX_BYTES}")
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_BYTES:
                chunk = os.read(fd, MAX_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_BYTES:
                raise _corrupt(path, f"it grew past {MAX_BYTES} bytes while read")
            return b"".join(chunks)
        except OSError as exc:
            raise _corrupt(path, f"it cannot be read ({exc.strerror})") from None


def _credential(path: Path, doc: Any, controller_id: str, where: str) -> Credential:
    if not isinstance(doc, dict):
        raise _corrupt(path, f"{where} is not an object")
    lease_id, generation, token = doc.get("lease_id"), doc.get("generation"), doc.get("token")
    if not isinstance(lease_id, str) or not LEASE_ID.match(lease_id):
        raise _corrupt(path, f"{where}'s lease_id is missing or not a lease id (a UUID)")
    if not isinstance(generation, int) or isinstance(generation, bool) or not 1 <= generation < 2**63:
        raise _corrupt(path, f"{where}'s generation is missing or not a positive integer")
    if not isinstance(token, str) or not TOKEN.match(token):
        raise _corrupt(path, f"{where}'s token is missing or not 32 lowercase hex digits")
    return Credential(controller_id, lease_id, generation, token)


def _binding(path: Path, doc: Any) -> Binding:
    if not isinstance(doc, dict) or not {"boot_id", "pid", "start_time"} <= doc.keys() <= {
        "boot_id",
        "pid",
        "start_time",
        "herdr_pane_id",
    }:
        raise _corrupt(path, "binding must hold exactly boot_id, pid, start_time and optionally herdr_pane_id")
    boot, pid, started, pane = doc["boot_id"], doc["pid"], doc["start_time"], doc.get("herdr_pane_id")
    if not isinstance(boot, str) or not BOOT_ID.match(boot):
        raise _corrupt(path, "binding.boot_id is not a boot id")
    for name, value in (("pid", pid), ("start_time", started)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
            raise _corrupt(path, f"binding.{name} is not a positive integer")
    if pane is not None and (not isinstance(pane, str) or not PANE_ID.match(pane)):
        raise _corrupt(path, "binding.herdr_pane_id is not a pane id")
    return Binding(boot, pid, started, pane)


def parse(path: Path, raw: bytes, controller_id: str, store_url: str | StoreRef) -> Stored:
    """Validate a credential file's bytes strictly (exact keys, exact types)."""
    try:
        doc: Any = jsonvalues.loads(raw.decode("utf-8"))  # strict: no NaN, no duplicate keys, bounded depth
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _corrupt(path, f"not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise _corrupt(path, "not a JSON object")
    keys = set(doc)
    if not _REQUIRED <= keys <= _REQUIRED | _OPTIONAL:
        missing, unknown = sorted(_REQUIRED - keys), sorted(keys - _REQUIRED - _OPTIONAL)
        raise _corrupt(path, f"wrong keys (missing {missing or 'none'}, unknown {unknown or 'none'})")
    fmt = doc["format"]
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt != FORMAT:
        raise _corrupt(path, f"not a format-{FORMAT} credential (format {fmt!r})")
    owner, store = doc["controller_id"], doc["store"]
    if not isinstance(owner, str) or not CONTROLLER_ID.match(owner):
        raise _corrupt(path, "controller_id is not a controller id")
    if owner != controller_id:
        raise _corrupt(path, f"it is for controller {owner!r}, not {controller_id!r}")
    if not isinstance(store, str) or not store:
        raise _corrupt(path, "store is not a store URL")
    store_id = doc.get("store_id")
    if store_id is not None and (not isinstance(store_id, str) or not STORE_ID.match(store_id)):
        raise _corrupt(path, "store_id is not a store id")
    credential = _credential(path, doc, controller_id, "the credential")
    pending = doc.get("pending", False)
    if not isinstance(pending, bool):
        raise _corrupt(path, "pending is not a boolean")
    if not pending and "previous" in doc:
        raise _corrupt(path, "previous is recorded without a pending grant")
    previous = doc.get("previous")
    binding = _binding(path, doc["binding"]) if doc.get("binding") is not None else None
    ref = StoreRef.of(store_url)
    if not ref.same(store, store_id):
        theirs = canonical_url(store) + (f" (store id {store_id})" if store_id else "")
        ours = ref.url + (f" (store id {ref.store_id})" if ref.store_id else "")
        raise CredentialError(
            f"the credential {path} was issued by the store {theirs}, not {ours}",
            code="credential_store_mismatch",
            path=str(path),
            credential_store=canonical_url(store),
            credential_store_id=store_id,
            store=ref.url,
            store_id=ref.store_id,
        )
    return Stored(
        credential,
        StoreRef(canonical_url(store), store_id),
        binding,
        pending,
        _credential(path, previous, controller_id, "previous") if previous is not None else None,
    )


def read(path: Path, controller_id: str, store_url: str | StoreRef) -> Stored | None:
    """The file's content validated, or None if there is no file. Never checks the binding."""
    raw = _read_bytes(path)
    return None if raw is None else parse(path, raw, controller_id, store_url)


def settle(stored: Stored, lease: Instance | None) -> Credential:
    """The credential in force: for a pending grant, whichever of proposal and previous the lease holds."""
    if not stored.pending:
        return stored.credential
    data = lease.data if lease is not None and lease.exists and lease.state == "active" else {}
    for candidate in (stored.credential, stored.previous):
        if candidate is None or data.get("lease_id") != candidate.lease_id:
            continue
        if hmac.compare_digest(hash_token(candidate.token), str(data.get("token_sha256") or "")):
            # The lease id is fresh per grant: a match is this grant whatever generation was predicted.
            generation = data.get("generation")
            return replace(candidate, generation=generation) if isinstance(generation, int) else candidate
    return stored.credential


def load(
    path: Path,
    controller_id: str,
    store_url: str | StoreRef,
    lease: Callable[[], Instance | None] | None = None,
) -> Credential:
    """Read the credential for ``controller_id`` from ``path`` for acting with it.

    Args:
        lease: reads the lease now; needed only to settle a pending grant (see :func:`settle`).

    Raises:
        CredentialError: ``credential_missing``, ``credential_insecure``, ``credential_corrupt``,
            ``credential_store_mismatch``.
        RefusedError: ``caller_not_controller``: the credential is bound to a process this one
            does not descend from.
    """
    stored = read(path, controller_id, store_url)
    if stored is None:
        raise CredentialError(
            f"no credential for controller {controller_id!r} at {path}: acquire, resume or take over the lease first",
            code="credential_missing",
            path=str(path),
            controller_id=controller_id,
        )
    if stored.binding is not None:
        stored.binding.check(str(path), controller_id)
    if stored.pending and lease is not None:
        return settle(stored, lease())
    return stored.credential


# --- writing ---------------------------------------------------------------------------------------


def _encode(stored: Stored) -> bytes:
    c = stored.credential
    doc: dict[str, Any] = {
        "format": FORMAT,
        "controller_id": c.controller_id,
        "lease_id": c.lease_id,
        "generation": c.generation,
        "token": c.token,
    }
    ref = StoreRef.of(stored.store)
    doc["store"] = ref.url  # canonical: never a password
    if ref.store_id is not None:
        doc["store_id"] = ref.store_id
    if stored.binding is not None:
        doc["binding"] = stored.binding.to_dict()
    if stored.pending:
        doc["pending"] = True
        p = stored.previous
        doc["previous"] = None if p is None else {"lease_id": p.lease_id, "generation": p.generation, "token": p.token}
    return json.dumps(doc, indent=2).encode("utf-8") + b"\n"


def _ensure_directory(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_directory(directory)


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write(path: Path, stored: Stored) -> None:
    """Replace ``path`` atomically; the caller holds the lock."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, _encode(stored))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    _fsync_dir(path.parent)
    return True


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the credential's lock file (``.<name>.lock`` beside it) exclusively.

    ``flock`` is released by the kernel when the holder dies, so a ``kill -9`` never leaves it held.
    """
    _ensure_directory(path.parent)
    lock = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise _insecure(lock, f"the lock file cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise _insecure(lock, "the lock file is not a regular file of this user")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save(
    path: Path,
    credential: Credential,
    store_url: str | StoreRef,
    *,
    binding: Binding | None = None,
    keep_binding: bool = False,
) -> None:
    """Write ``credential`` to ``path`` atomically with mode 0600 (the directory is made 0700).

    Args:
        binding: the process lineage to bind it to (``--bind-process``).
        keep_binding: keep the binding the file has now (a plan saving a credential it re-granted).
    """
    with locked(path):
        if keep_binding and binding is None:
            with contextlib.suppress(CredentialError):
                current = read(path, credential.controller_id, store_url)
                binding = current.binding if current is not None else None
        _write(path, Stored(credential, store_url, binding))


def discard(path: Path, controller_id: str, store_url: str | StoreRef, credential: Credential) -> bool:
    """Remove the file only if it still holds ``credential``'s grant (after that grant was released).

    Returns False, touching nothing, when the file is gone, unreadable, or about another grant (a
    successor's credential written meanwhile).
    """
    with locked(path):
        try:
            current = read(path, controller_id, store_url)
        except CredentialError:
            return False
        if current is None or not current.holds(credential):
            return False
        return _unlink(path)


def remove(path: Path) -> bool:
    """Delete a credential file unconditionally (under its lock); False if it was not there.

    Only for a caller that knows no grant can be in it; after a release use :func:`discard`.
    """
    with locked(path):
        return _unlink(path)


class HasCredential(Protocol):
    @property
    def credential(self) -> Credential: ...


G = TypeVar("G", bound=HasCredential)


def grant(
    path: Path,
    controller_id: str,
    store_url: str | StoreRef,
    lease: Instance | None,
    fire: Callable[[Proposal], G],
    *,
    binding: Binding | None = None,
    keep_binding: bool = False,
) -> G:
    """Run ``fire(proposal)`` (a grant) with its credential saved first, crash-safely.

    Under the lock: record the proposal as pending (with the credential in force as ``previous``),
    fire, then record the granted credential. A refused or failed grant puts the file back as it was.
    A process killed after the grant commits leaves a pending file that :func:`settle` resolves.

    Args:
        lease: the lease as read before the grant (predicts the generation; settles the old file).
        keep_binding: keep the file's current binding when ``binding`` is None (a resume).
    """
    with locked(path):
        prior = read(path, controller_id, store_url)
        in_force = settle(prior, lease) if prior is not None else None
        if keep_binding and binding is None and prior is not None:
            binding = prior.binding
        proposal = Proposal.new()
        current = int((lease.data.get("generation") if lease is not None else 0) or 0)
        proposed = Credential(controller_id, proposal.lease_id, current + 1, proposal.token)
        _write(path, Stored(proposed, store_url, binding, pending=True, previous=in_force))
        faults.point("credential_before_grant")
        try:
            granted = fire(proposal)
        except BaseException:
            if prior is None:
                _unlink(path)
            else:
                _write(path, prior)
            raise
        faults.point("credential_after_grant")
        _write(path, Stored(granted.credential, store_url, binding))
        return granted
