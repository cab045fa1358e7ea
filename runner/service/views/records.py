"""Frozen records made without :func:`dataclasses.dataclass`, for the views every command's path creates.

``@dataclass(frozen=True)`` writes and compiles six methods per class when its module is imported,
most of a millisecond each time, in every process: the views that ``controller renew`` imports (the
core's and the controller's) are :class:`Record` subclasses instead, with the same behaviour a frozen
dataclass has: fields in order, positional or by keyword, with defaults; equality and hash by the
fields when the class is the same; a ``repr`` of the fields not marked hidden; ``match`` by position;
assignment and deletion raise :class:`dataclasses.FrozenInstanceError`.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any, ClassVar


class Record:
    """A frozen record: subclasses name their fields in ``_fields`` and set them in ``__init__``."""

    _fields: ClassVar[tuple[str, ...]] = ()
    """The fields, in order: what equality, hash, ``repr`` and ``match`` use."""
    _hidden: ClassVar[tuple[str, ...]] = ()
    """Fields left out of ``repr`` (a credential, an agent's output)."""

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        setattr(cls, "__match_args__", cls._fields)  # noqa: B010  # positional match, as a dataclass allows (mypy refuses the assignment)

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            assert isinstance(other, Record)
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields if name not in self._hidden)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
