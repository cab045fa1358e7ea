"""One spec cache per test process, for the tests that need the shipped machines but do not test caching.

Validating the shipped machines (YAML, JSON Schema, the lint) costs more than most tests do with them:
with a fresh cache directory for each test it was about a sixth of the fast suite's CPU. The cache is
content-addressed (every key is the digest of the bytes that decide a verdict, corral's version
included), so one directory shared by the tests of one process gives each the verdicts it would have
computed itself: the first test of a process validates, the others read the entries back through the
same verified path (header, key, body digest) a warm ``corral`` does.

A test of the cache itself (damage, rebuilds, the ledger) keeps a directory of its own.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from runner.definitions.library import Library


@cache
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="corral-test-specs-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def spec_cache() -> Path:
    """This process's shared spec cache directory (its parent holds the parse cache beside it)."""
    return _root() / "specs"


def shared_library() -> Library:
    """A fresh :class:`Library` (no local machines) over this process's shared spec cache."""
    return Library(cache_dir=spec_cache())
