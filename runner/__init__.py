"""corral: a state-machine-driven workflow runner that lets one coordinator drive many coding agents.

The public names are re-exported here; see ``docs/architecture.md`` for the layers.
"""

from __future__ import annotations

from runner._version import __version__
from runner.errors import (
    ConflictError,
    CorralError,
    CredentialError,
    InputError,
    InvalidError,
    NotFoundError,
    RefusedError,
    SpecError,
    StoreBusyError,
    StoreVersionError,
    TransitionNotAllowedError,
    UsageError,
)

__all__ = [
    "ConflictError",
    "CorralError",
    "CredentialError",
    "InputError",
    "InvalidError",
    "NotFoundError",
    "RefusedError",
    "SpecError",
    "StoreBusyError",
    "StoreVersionError",
    "TransitionNotAllowedError",
    "UsageError",
    "__version__",
]
