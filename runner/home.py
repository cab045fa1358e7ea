"""The state home: where corral keeps its database, credentials and caches on this machine.

``$CORRAL_HOME``, else ``$XDG_STATE_HOME/corral``, else ``~/.local/state/corral``; created with mode
0700 because it holds fence credentials. The store URL defaults to the SQLite file inside it.

Invariant: the home and the directories under it that corral uses (``credentials/`` above all) are
never used as found unless they are private: a directory of ours with group/other bits is tightened
to 0700; a symlink, a non-directory, or a directory owned by another user is refused
(``home_insecure``), since whoever controls it could read or plant credentials.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.errors import HomeInsecureError
from runner.log import get_logger

logger = get_logger(__name__)  # imports logging only to log (cold start)


def private_dir(path: Path) -> Path:
    """Make ``path`` a private directory of this user: created 0700 if missing, tightened if loose.

    Checked on a descriptor opened with ``O_NOFOLLOW``, so what is checked is what is tightened.

    Raises:
        HomeInsecureError: ``home_insecure`` for a symlink, a non-directory, or another user's directory.
    """
    with contextlib.suppress(FileExistsError):  # whatever is there is checked below
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        info = os.lstat(path)
        what = f"a symlink (to {os.readlink(path)})" if stat.S_ISLNK(info.st_mode) else "not a directory"
        raise _insecure(path, f"is {what}", info) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise _insecure(path, f"is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})", info)
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning("tightening %s from mode %o to 0700", path, stat.S_IMODE(info.st_mode))
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def _insecure(path: Path, why: str, info: os.stat_result) -> HomeInsecureError:
    return HomeInsecureError(
        f"the corral state directory {path} {why} (mode {stat.S_IMODE(info.st_mode):o}); corral keeps fence "
        "credentials there, so it must be a directory of yours: move it away or point --home elsewhere",
        path=str(path),
        mode=f"{stat.S_IMODE(info.st_mode):o}",
        owner=info.st_uid,
    )


@dataclass(frozen=True)
class Home:
    """Paths under one state home. Nothing is created until :meth:`ensure` is called."""

    root: Path

    @classmethod
    def locate(cls, explicit: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Home:
        """The home named explicitly, else by the environment (``environ``, default ``os.environ``),
        else the XDG default."""
        env = os.environ if environ is None else environ
        if explicit:
            return cls(Path(explicit).expanduser().absolute())
        if env.get("CORRAL_HOME"):
            return cls(Path(env["CORRAL_HOME"]).expanduser().absolute())
        state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        return cls(Path(state).absolute() / "corral")

    @property
    def credentials(self) -> Path:
        return self.root / "credentials"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def default_store_url(self) -> str:
        return f"sqlite:///{self.root / 'corral.db'}"

    def ensure(self, *parts: str) -> Path:
        """The root and ``root/parts…`` as private directories (see :func:`private_dir`); the last one."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        path = private_dir(self.root)
        for part in parts:
            path = private_dir(path / part)
        return path
