"""Name-keyed registries of guards, updates and effects, open to other packages.

A definition names a guard (``fence``); the name resolves only through a registry, never by
importing a dotted path from YAML, so loading a definition cannot run code. Built-ins register at
import; other distributions add entries through the entry point groups ``corral.guards``,
``corral.updates`` and ``corral.effects`` (``name = "package.module:function"``), loaded the
first time a name is not found among the built-ins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from runner.log import get_logger

logger = get_logger(__name__)  # imports logging only to log (cold start)

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class Entry(Generic[F]):
    """A registered callable with the one-line summary shown by ``corral draw`` and review packs."""

    name: str
    fn: F
    summary: str


class Registry(Generic[F]):
    """Callables of one kind, keyed by name."""

    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind
        self.group = group
        self._entries: dict[str, Entry[F]] = {}
        self._plugins_loaded = False

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register ``fn`` under ``name``; the docstring's first line is its summary."""

        def decorate(fn: F) -> F:
            self.add(name, fn)
            return fn

        return decorate

    def add(self, name: str, fn: F) -> None:
        """Register ``fn`` under ``name``; registering a different callable twice is a bug."""
        existing = self._entries.get(name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        summary = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        self._entries[name] = Entry(name, fn, summary)

    def lazy(self, name: str, target: str, summary: str) -> None:
        """Register the callable ``target`` (``"package.module:name"``, a fixed string of corral's own
        code, never one read from a definition) under ``name``, imported the first time it is called:
        so a port names its built-in adapters without importing them (no import circle, no cost
        until one is used)."""
        self.add(name, cast("F", _Deferred(target, summary)))

    def preload(self, name: str) -> None:
        """Import the built-in registered lazily under ``name`` now, without calling it: for a process
        that has time to spare before it needs the adapter (a no-op for any other entry)."""
        entry = self._entries.get(name)
        if entry is not None and isinstance(entry.fn, _Deferred):
            entry.fn.load()

    def get(self, name: str) -> Entry[F] | None:
        """The entry named ``name``, loading plugins on the first miss; None if nobody has it."""
        entry = self._entries.get(name)
        if entry is None and not self._plugins_loaded:
            self._load_plugins()
            entry = self._entries.get(name)
        return entry

    def names(self) -> list[str]:
        """Every registered name, plugins included."""
        self._load_plugins()
        return sorted(self._entries)

    def __iter__(self) -> Iterator[Entry[F]]:
        self._load_plugins()
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points  # costs ~10 ms: only on a miss

        for point in entry_points(group=self.group):
            if point.name in self._entries:
                logger.warning("%s %r from %s ignored: a built-in has that name", self.kind, point.name, point.value)
                continue
            try:
                self.add(point.name, point.load())
            except Exception:  # a broken plugin must not take the built-ins down with it
                logger.exception("could not load %s %r from %s", self.kind, point.name, point.value)


class _Deferred:
    """A callable that imports ``module:name`` on its first call and calls that (:meth:`Registry.lazy`)."""

    def __init__(self, target: str, summary: str) -> None:
        self.target = target
        self.__doc__ = summary
        self._fn: Callable[..., Any] | None = None

    def load(self) -> Callable[..., Any]:
        """The target, imported on the first call."""
        if self._fn is None:
            from importlib import import_module

            module, _, attr = self.target.partition(":")
            self._fn = getattr(import_module(module), attr)
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)
