"""corral: a state-machine-driven workflow runner that lets one coordinator drive many coding agents.

The public names are re-exported here, lazily (PEP 562): ``import runner`` stays cheap for the CLI,
which is started hundreds of times by coordinating agents. See ``docs/architecture.md`` for the layers.
"""

from __future__ import annotations

from importlib import import_module

from runner._version import __version__

# Not typing.TYPE_CHECKING: importing typing costs ~8 ms, paid by every process that imports corral
# (the supervisor of every prompt among them). Type checkers treat this name as true.
TYPE_CHECKING = False

_EXPORTS = {
    "ConflictError": "runner.errors",
    "CorralError": "runner.errors",
    "CredentialError": "runner.errors",
    "InputError": "runner.errors",
    "InvalidError": "runner.errors",
    "NotFoundError": "runner.errors",
    "RefusedError": "runner.errors",
    "SpecError": "runner.errors",
    "StoreBusyError": "runner.errors",
    "StoreUnavailableError": "runner.errors",
    "StoreVersionError": "runner.errors",
    "StoreCorruptError": "runner.errors",
    "StoreForeignError": "runner.errors",
    "HomeInsecureError": "runner.errors",
    "TransitionNotAllowedError": "runner.errors",
    "UsageError": "runner.errors",
    "Engine": "runner.engine",
    "Request": "runner.engine",
    "Result": "runner.engine",
    "Library": "runner.definitions",
    "MachineSpec": "runner.definitions",
    "Service": "runner.service",
    "Store": "runner.store",
    "open_store": "runner.store",
    "Credential": "runner.fence",
}

__all__ = [
    "ConflictError",
    "CorralError",
    "Credential",
    "CredentialError",
    "Engine",
    "HomeInsecureError",
    "InputError",
    "InvalidError",
    "Library",
    "MachineSpec",
    "NotFoundError",
    "RefusedError",
    "Request",
    "Result",
    "Service",
    "SpecError",
    "Store",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreForeignError",
    "StoreUnavailableError",
    "StoreVersionError",
    "TransitionNotAllowedError",
    "UsageError",
    "__version__",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runner' has no attribute {name!r}")
    return getattr(import_module(module), name)


if TYPE_CHECKING:
    from typing import Any

    from runner.definitions import Library, MachineSpec
    from runner.engine import Engine, Request, Result
    from runner.errors import (
        ConflictError,
        CorralError,
        CredentialError,
        HomeInsecureError,
        InputError,
        InvalidError,
        NotFoundError,
        RefusedError,
        SpecError,
        StoreBusyError,
        StoreCorruptError,
        StoreForeignError,
        StoreUnavailableError,
        StoreVersionError,
        TransitionNotAllowedError,
        UsageError,
    )
    from runner.fence import Credential
    from runner.service import Service
    from runner.store import Store, open_store
