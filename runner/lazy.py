"""Package attributes imported on first use (PEP 562), for packages whose modules a cold command must not load.

A package keeps a table of its public names and the module each lives in, and ends with::

    __getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals(), __all__)

A name is imported from its module when first asked for, then kept in the package's namespace, so
the next lookup is an ordinary attribute read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any


def lazy_attributes(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``where`` maps a name to its module."""
    names = sorted(public)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__
