"""Path scopes a writer lane owns or locks: literal repo-relative paths, and when two overlap.

A scope is a file or directory path relative to the repository's top level, written literally: no
globs (``*?[]{}``), no backslashes, no leading ``/``, no ``.`` or ``..`` segments, no empty segments.
``./`` prefixes and trailing ``/`` are stripped; the list is de-duplicated and sorted. Two scopes
overlap when they are equal or one is an ancestor directory of the other (``src`` overlaps
``src/a.py``; ``src`` does not overlap ``srcx``).
"""

from __future__ import annotations

from collections.abc import Iterable

from runner.errors import InputError

GLOB_CHARACTERS = frozenset("*?[]{}")
MAX_SCOPE_LENGTH = 4096


def normalize_one(raw: str, field: str = "scope") -> str:
    """One scope in its canonical form, or :class:`InputError` (code ``scope_invalid``) saying why."""
    if not isinstance(raw, str) or not raw.strip():
        raise InputError(field, "an empty scope", code="scope_invalid", scope=raw)
    if len(raw) > MAX_SCOPE_LENGTH:
        raise InputError(field, f"a scope longer than {MAX_SCOPE_LENGTH} characters", code="scope_invalid")
    if any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in raw):  # C0, DEL and C1 controls
        raise InputError(field, f"{raw!r} contains control characters", code="scope_invalid", scope=raw)
    if "\\" in raw:
        raise InputError(field, f"{raw!r} contains a backslash; scopes use '/'", code="scope_invalid", scope=raw)
    globs = sorted(GLOB_CHARACTERS.intersection(raw))
    if globs:
        raise InputError(
            field,
            f"{raw!r} contains glob characters {''.join(globs)}; scopes are literal paths",
            code="scope_invalid",
            scope=raw,
        )
    if raw.startswith("/"):
        raise InputError(
            field, f"{raw!r} is absolute; scopes are relative to the repository", code="scope_invalid", scope=raw
        )
    path = raw
    while path.startswith("./"):
        path = path[2:]
    path = path.rstrip("/")
    if path in ("", "."):
        raise InputError(
            field, f"{raw!r} names the whole repository; name the paths you own", code="scope_invalid", scope=raw
        )
    for segment in path.split("/"):
        if segment == "":
            raise InputError(field, f"{raw!r} has an empty path segment", code="scope_invalid", scope=raw)
        if segment in (".", ".."):
            raise InputError(field, f"{raw!r} has a {segment!r} segment", code="scope_invalid", scope=raw)
    return path


def normalize(raw: Iterable[str], field: str = "scope") -> tuple[str, ...]:
    """Every scope normalized, de-duplicated and sorted."""
    if isinstance(raw, str):  # a string is an iterable of one-letter "scopes": never what was meant
        raise InputError(field, f"give a list of scopes, not the string {raw!r}", code="scope_invalid")
    return tuple(sorted({normalize_one(item, field) for item in raw}))


def overlaps(a: str, b: str) -> bool:
    """Equal, or one is an ancestor directory of the other (both normalized)."""
    return a == b or b.startswith(a + "/") or a.startswith(b + "/")


def ancestors(scope: str) -> Iterable[str]:
    """The proper ancestor directories of a normalized scope, nearest last (``a/b/c``: ``a``, ``a/b``)."""
    index = scope.find("/")
    while index != -1:
        yield scope[:index]
        index = scope.find("/", index + 1)


_ancestors = ancestors

# What a writer lane claims in the store's claim index (runner.context.Claim): its owned and locked
# scopes and its branch in its repository's common dir, and its worktree in the filesystem space.
OWNED, LOCKED, BRANCH, WORKTREE = "owned", "locked", "branch", "worktree"
FILESYSTEM = "/"
"""The space of worktree claims: every repository's worktrees on this host, by resolved path."""


def worktree_scope(realpath: str) -> str:
    """A resolved absolute path as a scope of the :data:`FILESYSTEM` space (without its leading ``/``)."""
    return realpath.lstrip("/")


def lane_claims(
    common_dir: object, branch: object, realpath: object, owned: Iterable[str], locked: Iterable[str]
) -> tuple[tuple[str, str, str], ...]:
    """The ``(space, kind, scope)`` claims of a lane: what ``record_writer_lane`` declares.

    A fact that is missing (not a string) claims nothing: the guards refuse such a lane before.
    """
    claims: list[tuple[str, str, str]] = []
    if isinstance(common_dir, str):
        claims += [(common_dir, OWNED, scope) for scope in owned]
        claims += [(common_dir, LOCKED, scope) for scope in locked]
        if isinstance(branch, str):
            claims.append((common_dir, BRANCH, branch))
    if isinstance(realpath, str) and worktree_scope(realpath):
        claims.append((FILESYSTEM, WORKTREE, worktree_scope(realpath)))
    return tuple(claims)


def conflicts(mine: Iterable[str], theirs: Iterable[str]) -> list[tuple[str, str]]:
    """Every overlapping pair (mine, theirs), sorted.

    Not pair by pair: ``theirs`` is indexed by scope and by each of its ancestors, so the cost is
    (len(mine) + len(theirs)) x path depth plus the pairs found, not len(mine) x len(theirs) (it runs
    inside the store's write transaction of ``writer start``, once per live lane)."""
    exact: set[str] = set()
    below: dict[str, list[str]] = {}  # an ancestor directory -> their scopes under it
    for scope in theirs:
        exact.add(scope)
        for ancestor in _ancestors(scope):
            below.setdefault(ancestor, []).append(scope)
    found: set[tuple[str, str]] = set()
    for scope in mine:
        if scope in exact:
            found.add((scope, scope))
        found.update((scope, ancestor) for ancestor in _ancestors(scope) if ancestor in exact)
        found.update((scope, under) for under in below.get(scope, ()))
    return sorted(found)
