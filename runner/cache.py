"""A content-addressed cache of validated documents under ``$CORRAL_HOME/cache/``.

Validation (YAML parsing, JSON Schema) costs more than the transition it guards, so a validated
document is stored as JSON under the SHA-256 of everything that decided its validity (corral's version,
the schema, the file's bytes). A damaged entry is ignored and rebuilt; an unwritable cache is skipped:
the cache only ever saves time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from runner import jsonvalues
from runner._version import __version__

logger = logging.getLogger(__name__)

FORMAT = 1


def key_for(*parts: bytes) -> str:
    """The cache key of a document validated from ``parts`` (schema bytes, file bytes…)."""
    digest = hashlib.sha256(b"%d\0%s" % (FORMAT, __version__.encode()))
    for part in parts:
        digest.update(b"\0%d\0" % len(part))
        digest.update(part)
    return digest.hexdigest()


class ContentCache:
    """JSON documents by key in one directory (created 0700 on first write)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def get(self, key: str) -> Any | None:
        if self.directory is None:
            return None
        try:
            return jsonvalues.loads((self.directory / f"{key}.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # a damaged entry: validate afresh
            logger.warning("ignoring damaged cache entry %s: %s", key, exc)
            return None

    def put(self, key: str, doc: Any) -> None:
        if self.directory is None:
            return
        try:
            for directory in reversed([self.directory, *self.directory.parents]):
                if not directory.exists():
                    directory.mkdir(mode=0o700)
            target = self.directory / f"{key}.json"
            tmp = target.with_name(f".{key}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:  # a read-only home must not break commands
            logger.debug("could not write cache entry %s: %s", key, exc)
