"""Opening a private file: a regular file of this user, never through a symbolic link, with a mode rule.

One check for every secret corral reads from a file (credential files, mesh agent token files): the file
is opened without following a symbolic link (``O_NOFOLLOW``: no swap between a check and the open), then
judged on the open descriptor, so what is judged is what is read. Each caller states its own mode rule
and turns a :class:`Refusal` into its own error (its code and message), so a surface may use this module
without importing the credential files' module.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class ModeRule:
    """The permission bits a private file may have: ``allows(mode)``, and ``says`` what it must be."""

    allows: Callable[[int], bool]
    says: str


EXACTLY_0600 = ModeRule(lambda mode: mode == 0o600, "exactly 0600")
"""A credential file's rule: read and write by its owner, nothing else (not even 0400)."""

NO_GROUP_OR_OTHER = ModeRule(lambda mode: not mode & 0o077, "0600 (chmod 600 it)")
"""A mesh agent token file's rule: 0600 or tighter (no bit for group or others)."""


@dataclass(frozen=True)
class Refusal:
    """Why a file is not private: ``kind`` for the caller to choose its error, ``why`` in words.

    ``mode`` is the file's permission bits when ``kind`` is ``"mode"`` (else None).
    """

    kind: Literal["symlink", "unopenable", "not_regular", "owner", "mode"]
    why: str
    mode: int | None = None


@contextlib.contextmanager
def open_private(
    path: Path, rule: ModeRule, refuse: Callable[[Refusal], Exception]
) -> Iterator[tuple[int, os.stat_result] | None]:
    """Open ``path`` to read, held to ``rule``: the descriptor and its status, or None if there is no file.

    The descriptor is closed when the block ends.

    Raises:
        Exception: ``refuse(refusal)``, the caller's own error, if ``path`` is a symbolic link, cannot be
            opened, is not a regular file, is another user's, or has a mode ``rule`` does not allow.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse(Refusal("symlink", "it is a symbolic link")) from None
        raise refuse(Refusal("unopenable", f"it cannot be opened ({exc.strerror})")) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refuse(Refusal("not_regular", "it is not a regular file"))
        if info.st_uid != os.geteuid():
            raise refuse(Refusal("owner", f"it is owned by uid {info.st_uid}"))
        mode = stat.S_IMODE(info.st_mode)
        if not rule.allows(mode):
            raise refuse(Refusal("mode", f"it has mode {mode:o}; it must be {rule.says}", mode))
        yield fd, info
    finally:
        os.close(fd)
