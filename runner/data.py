"""Where the definitions that ship with corral live: ``machines/``, ``recipes/``, ``schemas/``.

In a source checkout they sit at the top of the repository, beside ``runner/``; in an installed
wheel the build copies them into the package (``runner/machines`` …). Both layouts are looked up
here and nowhere else.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def data_dir(name: str) -> Path:
    """The built-in ``machines``, ``recipes`` or ``schemas`` directory."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"corral's built-in {name}/ directory is missing: the installation is broken")
