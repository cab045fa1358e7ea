"""Local credential files: where the CLI keeps a fence token so it never travels through argv.

One file per controller id, ``$CORRAL_HOME/credentials/<controller>.json``, mode 0600 in a 0700
directory, written atomically (temporary file, fsync, rename). A file that is missing, unreadable,
readable by others, malformed, for another controller or for another store is refused with a
:class:`~runner.errors.CredentialError` naming the problem; nothing guesses around it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from runner import jsonvalues
from runner.errors import CredentialError
from runner.fence import Credential

FORMAT = 1


def path_for(directory: Path, controller_id: str) -> Path:
    """The credential file of ``controller_id`` (ids are ``[A-Za-z0-9_.-]``: no separators)."""
    return directory / f"{controller_id}.json"


def save(path: Path, credential: Credential, store_url: str) -> None:
    """Write ``credential`` to ``path`` atomically with mode 0600 (the directory is made 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = (
        json.dumps(
            {
                "format": FORMAT,
                "controller_id": credential.controller_id,
                "lease_id": credential.lease_id,
                "generation": credential.generation,
                "token": credential.token,
                "store": store_url,
            },
            indent=2,
        ).encode("utf-8")
        + b"\n"
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load(path: Path, controller_id: str, store_url: str) -> Credential:
    """Read the credential for ``controller_id`` from ``path``, checking it belongs to ``store_url``.

    Raises:
        CredentialError: ``credential_missing``, ``credential_insecure`` (group/other may read it),
            ``credential_corrupt`` (not the expected JSON, or for another controller),
            ``credential_store_mismatch`` (issued by another store).
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise CredentialError(
            f"no credential for controller {controller_id!r} at {path}: acquire, resume or take over the lease first",
            code="credential_missing",
            path=str(path),
            controller_id=controller_id,
        ) from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialError(
            f"the credential file {path} is accessible by other users (mode {stat.S_IMODE(info.st_mode):o}); "
            "it must be 0600",
            code="credential_insecure",
            path=str(path),
            mode=f"{stat.S_IMODE(info.st_mode):o}",
        )
    try:
        doc: Any = jsonvalues.loads(path.read_text(encoding="utf-8"))  # strict: no RecursionError, NaN
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _corrupt(path, f"unreadable ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _corrupt(path, f"not a format-{FORMAT} credential")
    fields = {"controller_id": str, "lease_id": str, "generation": int, "token": str, "store": str}
    for name, kind in fields.items():
        if not isinstance(doc.get(name), kind) or isinstance(doc.get(name), bool):
            raise _corrupt(path, f"field {name!r} is missing or not a {kind.__name__}")
    if doc["controller_id"] != controller_id:
        raise _corrupt(path, f"it is for controller {doc['controller_id']!r}, not {controller_id!r}")
    if doc["store"] != store_url:
        raise CredentialError(
            f"the credential {path} was issued by the store {doc['store']}, not {store_url}",
            code="credential_store_mismatch",
            path=str(path),
            credential_store=doc["store"],
            store=store_url,
        )
    return Credential(doc["controller_id"], doc["lease_id"], doc["generation"], doc["token"])


def remove(path: Path) -> bool:
    """Delete a credential file this tool wrote (after a release); False if it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _corrupt(path: Path, why: str) -> CredentialError:
    return CredentialError(
        f"the credential file {path} is corrupt: {why}; resume with a good copy or take the lease over",
        code="credential_corrupt",
        path=str(path),
    )
