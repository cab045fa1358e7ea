"""Loggers that import :mod:`logging` only when a record can be shown.

Importing ``logging`` (with ``traceback``, ``string`` and the rest) is a measurable part of a cold
``corral controller renew``, which logs nothing unless ``-v`` is given. A module on a cold path takes
``logger = runner.log.get_logger(__name__)`` instead of ``logging.getLogger(__name__)``:

- ``debug`` and ``info`` records are passed on only once ``logging`` is imported. Until then nobody
  can have configured a handler or a level, so the standard library would drop them anyway (the
  root logger's level is ``WARNING``); ``-v`` configures logging, which imports it.
- ``warning``, ``error`` and ``exception`` always import ``logging`` and log, so they reach
  ``logging.lastResort`` (stderr) exactly as before.

Records name the caller's file and line (``stacklevel``), not this module.
"""

from __future__ import annotations

import sys

# Not typing.TYPE_CHECKING, as in runner/__init__.py: this module must not import typing itself.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging
    from typing import Any


class LazyLogger:
    """The subset of :class:`logging.Logger` corral's modules use, importing ``logging`` on demand."""

    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: logging.Logger | None = None

    def _real(self) -> logging.Logger:
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self.name)
        return self._logger

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self._real().debug(msg, *args, stacklevel=2, **kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        if "logging" in sys.modules:
            self._real().info(msg, *args, stacklevel=2, **kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._real().warning(msg, *args, stacklevel=2, **kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._real().error(msg, *args, stacklevel=2, **kwargs)

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._real().exception(msg, *args, stacklevel=2, **kwargs)


def get_logger(name: str) -> LazyLogger:
    """The lazy logger of ``name`` (a module's ``__name__``)."""
    return LazyLogger(name)
