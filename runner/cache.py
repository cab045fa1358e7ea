"""A content-addressed cache of validated documents under ``$CORRAL_HOME/cache/``.

Validation (YAML parsing, JSON Schema) costs more than the transition it guards, so a validated
document is stored as JSON under the SHA-256 of everything that decided its validity (corral's version,
the schema, the file's bytes). An unwritable cache is skipped: the cache only ever saves time.

A cached spec decides which guards a transition runs, so an entry is not trusted as written. Each
file is one header line, ``{"format", "key", "body_sha256"}``, then the body (the document's JSON).
It is used only if the header is this format, names the key it is filed under (the digest of its
sources) and records the SHA-256 of the body bytes that follow. Anything else (damaged, truncated,
edited by hand) is ignored, validated afresh from the source and overwritten, and the rebuild is
appended to one ledger per cache root (``rebuilds.log``, a JSON line each) that ``corral status``
reports. The digests catch damage and naive edits, not a same-user process that rewrites an entry
and its header consistently (see ``docs/security.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from runner import jsonvalues
from runner._version import __version__
from runner.log import get_logger

logger = get_logger(__name__)  # imports logging only to log (cold start)

FORMAT = (
    3  # 2: header line with the body's digest; 3: machines carry invariants; older entries are filed under other keys
)
LEDGER = "rebuilds.log"


def key_for(*parts: bytes) -> str:
    """The cache key of a document validated from ``parts`` (schema bytes, file bytes…)."""
    digest = hashlib.sha256(b"%d\0%s" % (FORMAT, __version__.encode()))
    for part in parts:
        digest.update(b"\0%d\0" % len(part))
        digest.update(part)
    return digest.hexdigest()


class ContentCache:
    """JSON documents by key in one directory (created 0700 on first write).

    The directory's parent is the cache root; its ledger counts the entries rebuilt in every
    directory under it (``specs``, ``config``).
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def get(self, key: str) -> Any | None:
        """The verified document filed under ``key``; None on a miss or an entry that fails checks."""
        if self.directory is None:
            return None
        try:
            raw = (self.directory / f"{key}.json").read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.reject(key, f"unreadable: {exc.strerror}")
            return None
        head, newline, body = raw.partition(b"\n")
        try:
            header = json.loads(head)
        except ValueError:
            header = None
        if not newline or not isinstance(header, dict) or header.get("format") != FORMAT:
            self.reject(key, f"no format-{FORMAT} header")
            return None
        if header.get("key") != key:
            self.reject(key, "filed under another key")
            return None
        if header.get("body_sha256") != hashlib.sha256(body).hexdigest():
            self.reject(key, "body does not match its recorded digest")
            return None
        try:
            return jsonvalues.loads(body.decode("utf-8"))  # strict and bounded, like every JSON corral reads
        except ValueError:  # UnicodeDecodeError is a ValueError
            self.reject(key, "body is not JSON")
            return None

    def reject(self, key: str, reason: str) -> None:
        """Record that the entry under ``key`` was not used (its caller rebuilds and overwrites it)."""
        logger.warning("ignoring cache entry %s/%s (%s): rebuilding it from its source", self.directory, key, reason)
        if self.directory is None:
            return
        line = json.dumps(
            {"at": time.time(), "cache": self.directory.name, "key": key, "reason": reason}, sort_keys=True
        )
        try:
            # O_APPEND: one short write per line, so concurrent processes never interleave inside one.
            fd = os.open(self.directory.parent / LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line.encode() + b"\n")
            finally:
                os.close(fd)
        except OSError as exc:  # a read-only home must not break commands
            logger.debug("could not record the rebuild of %s: %s", key, exc)

    def put(self, key: str, doc: Any) -> None:
        """File ``doc`` under ``key`` atomically, with its header (replacing whatever was there)."""
        if self.directory is None:
            return
        body = json.dumps(doc).encode("utf-8")
        header = json.dumps({"format": FORMAT, "key": key, "body_sha256": hashlib.sha256(body).hexdigest()})
        try:
            for directory in reversed([self.directory, *self.directory.parents]):
                if not directory.exists():
                    directory.mkdir(mode=0o700)
            target = self.directory / f"{key}.json"
            tmp = target.with_name(f".{key}.{os.getpid()}.tmp")
            tmp.write_bytes(header.encode() + b"\n" + body)
            os.replace(tmp, target)
        except OSError as exc:  # a read-only home must not break commands
            logger.debug("could not write cache entry %s: %s", key, exc)


def rebuilds(root: Path | None) -> dict[str, int]:
    """How many entries were rebuilt under the cache root ``root``, by cache directory name."""
    counts: dict[str, int] = {}
    if root is None:
        return counts
    try:
        lines = (root / LEDGER).read_bytes().splitlines()
    except OSError:
        return counts
    for line in lines:
        try:
            name = str(json.loads(line)["cache"])
        except (ValueError, KeyError, TypeError):
            name = "unknown"  # a damaged ledger line still counts as a rebuild
        counts[name] = counts.get(name, 0) + 1
    return counts
