"""The state home: where corral keeps its database, credentials and caches on this machine.

``$CORRAL_HOME``, else ``$XDG_STATE_HOME/corral``, else ``~/.local/state/corral``; created with mode
0700 because it holds fence credentials. The store URL defaults to the SQLite file inside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Home:
    """Paths under one state home. Nothing is created until :meth:`ensure` is called."""

    root: Path

    @classmethod
    def locate(cls, explicit: str | os.PathLike[str] | None = None) -> Home:
        """The home named explicitly, else by the environment, else the XDG default."""
        if explicit:
            return cls(Path(explicit).expanduser().absolute())
        if os.environ.get("CORRAL_HOME"):
            return cls(Path(os.environ["CORRAL_HOME"]).expanduser().absolute())
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
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
        """Create the root and ``root/parts…`` with mode 0700 where missing; return the path."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(mode=0o700, exist_ok=True)
        path = self.root
        for part in parts:
            path = path / part
            path.mkdir(mode=0o700, exist_ok=True)
        return path
