"""Scope audit: what a writer lane actually changed since its base commit, judged against its scopes.

The admission guards (:mod:`runner.guards.git`) judge the scopes a lane *claims*; this module reads
what its worktree *holds*, afresh, with git's plumbing and ``-z`` output only (fixed argv, no shell,
``--no-optional-locks`` and ``GIT_OPTIONAL_LOCKS=0``, so a read never takes or refreshes the index
lock the agent may be using; ``core.fsmonitor`` off, so no configured program runs). Five git
processes run side by side, none per file:

==============  =====================================================================================
source          how
==============  =====================================================================================
``head``        ``diff-tree -r -z -M --raw base HEAD``: what the branch's commits changed
``index``       ``diff --cached -z -M --raw base``: what a commit now would hold (staged work)
``worktree``    ``diff -z -M --raw base``: the files on disk that git tracks (stat refreshed in
                memory, never written: a file only touched is no change)
``untracked``   ``ls-files -z --others --exclude-standard``: new files not yet added
``ignored``     ``ls-files -z --others --ignored --exclude-standard --directory``: reported apart
==============  =====================================================================================

Every path is judged by the scope rules of :mod:`runner.scopes` (a literal path, and every path
under it): ``locked`` when it overlaps one of the lane's locked scopes (nobody may write there),
``owned`` when it lies inside an owned scope, else ``outside``. A rename is judged on both its old
and its new path, and takes the worse verdict. Violations are the ``locked`` and ``outside`` changes.

Ignored files are listed (``ignored``, those not inside an owned scope) but are not violations: git
cannot tell an ignored file written by the agent from one that was there before the lane (a
virtualenv, build output), and an ignored file reaches neither the branch nor the checkpoint unless
it is force-added, when it shows up in ``index`` or ``head`` and is judged like any change. What the
audit does not see: a commit that changed a path and a later commit that changed it back (the net
effect is judged), and anything outside the worktree.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from runner import scopes
from runner.git.preflight import GitReadError

OWNED, LOCKED, OUTSIDE = "owned", "locked", "outside"
SEVERITY = {OWNED: 0, OUTSIDE: 1, LOCKED: 2}
KINDS = ("added", "modified", "deleted", "renamed", "mode", "symlink", "submodule")
SOURCES = ("head", "index", "worktree", "untracked")
LINK, GITLINK = "120000", "160000"
# Variables that would point git at another repository, index or object store than the worktree's.
REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY")


@dataclass(frozen=True)
class Change:
    """One changed path: its ``kind``, its verdict ``scope`` (owned, locked, outside) and where git saw
    it (``sources``). A rename has ``old_path`` (judged too); ``old_mode``/``new_mode`` as git gives them."""

    path: str
    kind: str
    scope: str
    sources: tuple[str, ...]
    old_path: str | None = None
    old_mode: str | None = None
    new_mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"path": self.path, "kind": self.kind, "scope": self.scope}
        if self.old_path is not None:
            found["old_path"] = self.old_path
        if self.old_mode is not None or self.new_mode is not None:
            found["old_mode"], found["new_mode"] = self.old_mode, self.new_mode
        found["sources"] = list(self.sources)
        return found


@dataclass(frozen=True)
class Audit:
    """Every change of a worktree since ``base_commit`` (read at ``head``), judged against its scopes."""

    worktree: str
    base_commit: str
    head: str
    owned_scopes: tuple[str, ...]
    locked_scopes: tuple[str, ...]
    changes: tuple[Change, ...]
    ignored: tuple[str, ...] = field(default=())
    """Ignored paths (a directory ends in ``/``) not inside an owned scope: reported, not violations."""

    @property
    def violations(self) -> tuple[Change, ...]:
        """The changes in a locked scope or outside every owned one."""
        return tuple(c for c in self.changes if c.scope != OWNED)

    @property
    def clean(self) -> bool:
        return not self.violations

    def counts(self) -> dict[str, int]:
        found = {"changes": len(self.changes), OWNED: 0, LOCKED: 0, OUTSIDE: 0}
        for change in self.changes:
            found[change.scope] += 1
        return {**found, "violations": found[LOCKED] + found[OUTSIDE], "ignored": len(self.ignored)}

    def to_dict(self, limit: int | None = None) -> dict[str, Any]:
        """The audit as JSON; with ``limit``, at most that many of each list (``counts`` says how many)."""

        def cut(items: Iterable[Any]) -> list[Any]:
            items = list(items)
            return items if limit is None else items[:limit]

        return {
            "worktree": self.worktree,
            "base_commit": self.base_commit,
            "head": self.head,
            "owned_scopes": list(self.owned_scopes),
            "locked_scopes": list(self.locked_scopes),
            "clean": self.clean,
            "counts": self.counts(),
            "changes": [c.to_dict() for c in cut(self.changes)],
            "violations": [c.to_dict() for c in cut(self.violations)],
            "ignored": cut(self.ignored),
            "truncated": limit is not None and max(len(self.changes), len(self.ignored)) > limit,
        }


def audit(worktree: str, base_commit: str, owned: Iterable[str], locked: Iterable[str]) -> Audit:
    """Read every change of ``worktree`` (absolute) since ``base_commit`` and judge it.

    Raises:
        GitReadError: ``git_unreadable`` when git cannot read the worktree or does not know the base.
    """
    if not isinstance(worktree, str) or not os.path.isabs(worktree):
        raise GitReadError("worktree", f"{worktree!r} is not an absolute path", path=worktree)
    realpath = os.path.realpath(worktree)
    if not os.path.isdir(realpath):
        raise GitReadError("worktree", f"{worktree} is not a directory", path=worktree)
    owned_scopes, locked_scopes = tuple(sorted(set(owned))), tuple(sorted(set(locked)))
    head = _run(realpath, ["rev-parse", "--verify", "-q", "HEAD^{commit}"], "worktree").decode().strip()
    base = _run(
        realpath, ["rev-parse", "--verify", "-q", "--end-of-options", f"{base_commit}^{{commit}}"], "base_commit"
    )
    base_id = base.decode().strip()
    raw = ["-z", "-M", "--raw", "--no-abbrev", "--ignore-submodules=none"]
    # diff (not diff-index) refreshes stat information in memory: a file merely touched is no change.
    porcelain = ["--no-relative", "--no-ext-diff", "--no-textconv", "--no-color"]
    outputs = _run_all(
        realpath,
        {
            "head": ["diff-tree", "-r", *raw, base_id, head],
            "index": ["diff", "--cached", *raw, *porcelain, base_id],
            "worktree": ["diff", *raw, *porcelain, base_id],
            "untracked": ["ls-files", "-z", "--others", "--exclude-standard"],
            "ignored": ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
        },
    )
    judge = Judge(owned_scopes, locked_scopes)
    found: dict[str, Change] = {}
    for source in ("worktree", "index", "head"):
        for entry in _raw_entries(outputs[source]):
            _merge(found, judge.change(source, *entry))
    for path in _paths(outputs["untracked"]):
        # A nested repository is listed as its directory ("sub/"): reported as a submodule.
        mode = GITLINK if path.endswith("/") else "000000"
        _merge(found, judge.change("untracked", "000000", mode, "A", path.rstrip("/") or path, None))
    ignored = tuple(p for p in _paths(outputs["ignored"]) if judge.scope(p.rstrip("/")) != OWNED)
    changes = tuple(sorted(found.values(), key=lambda c: c.path.encode("utf-8", "surrogateescape")))
    return Audit(worktree, base_id, head, owned_scopes, locked_scopes, changes, ignored)


def _merge(found: dict[str, Change], change: Change) -> None:
    """The first reading of a path wins (worktree, then index, then head); its sources accumulate."""
    known = found.get(change.path)
    if known is None:
        found[change.path] = change
        return
    sources = tuple(s for s in SOURCES if s in {*known.sources, *change.sources})
    found[change.path] = Change(
        known.path, known.kind, known.scope, sources, known.old_path, known.old_mode, known.new_mode
    )


class Judge:
    """Judges paths by :mod:`runner.scopes`' rules: a set lookup per ancestor, never scope by scope."""

    def __init__(self, owned: tuple[str, ...], locked: tuple[str, ...]) -> None:
        self.owned = frozenset(owned)
        self.locked = frozenset(locked)
        self.locked_ancestors = frozenset(a for s in locked for a in scopes.ancestors(s))

    def scope(self, path: str) -> str:
        """``locked`` when ``path`` overlaps a locked scope (is one, lies under one, or holds one: a
        directory entry such as a submodule), ``owned`` when it lies inside an owned scope, else ``outside``."""
        above = (path, *scopes.ancestors(path))
        if path in self.locked_ancestors or any(a in self.locked for a in above):
            return LOCKED
        if any(a in self.owned for a in above):
            return OWNED
        return OUTSIDE

    def change(self, source: str, old_mode: str, new_mode: str, status: str, path: str, old_path: str | None) -> Change:
        verdict = self.scope(path)
        if old_path is not None:
            verdict = max(verdict, self.scope(old_path), key=SEVERITY.__getitem__)
        modes = (old_mode, new_mode) if old_mode != new_mode and "000000" not in (old_mode, new_mode) else (None, None)
        return Change(path, _kind(status, old_mode, new_mode), verdict, (source,), old_path, *modes)


def _kind(status: str, old_mode: str, new_mode: str) -> str:
    letter = status[:1]
    if letter in ("R", "C"):
        return "renamed" if letter == "R" else "added"
    if letter == "D":
        return "deleted"
    if GITLINK in (old_mode, new_mode):
        return "submodule"
    if LINK in (old_mode, new_mode):
        return "symlink"
    if letter == "A":
        return "added"
    if old_mode != new_mode and "000000" not in (old_mode, new_mode):
        return "mode"
    return "modified"


def _raw_entries(out: bytes) -> Iterable[tuple[str, str, str, str, str | None]]:
    """``(old_mode, new_mode, status, path, old_path)`` from ``--raw -z`` output: each record is
    ``:old new sha sha STATUS\\0path\\0``, and a rename or copy has two paths (old, then new)."""
    fields = out.split(b"\0")
    index = 0
    while index < len(fields):
        meta = fields[index]
        index += 1
        if not meta.startswith(b":"):
            continue
        parts = meta[1:].decode("ascii").split()
        old_mode, new_mode, status = parts[0], parts[1], parts[4]
        first = fields[index].decode("utf-8", "surrogateescape")
        index += 1
        if status[:1] in ("R", "C"):
            second = fields[index].decode("utf-8", "surrogateescape")
            index += 1
            # A copy leaves its source in place: only the new path is written.
            yield old_mode, new_mode, status, second, first if status[:1] == "R" else None
        else:
            yield old_mode, new_mode, status, first, None


def _paths(out: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in REDIRECTS}
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env["LC_ALL"] = "C"
    return env


def _argv(realpath: str, args: list[str]) -> list[str]:
    return [
        "git",
        "--no-optional-locks",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.quotePath=false",
        "-C",
        realpath,
        *args,
    ]


def _run(realpath: str, args: list[str], what: str) -> bytes:
    done = subprocess.run(_argv(realpath, args), capture_output=True, env=_env(), check=False)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()
        raise GitReadError(
            what, f"git could not read {what} in {realpath}: {said or 'unknown revision'}", path=realpath
        )
    return done.stdout


def _run_all(realpath: str, commands: dict[str, list[str]]) -> dict[str, bytes]:
    """Run the listings side by side (each a fixed argv), then collect them in order."""
    procs = {
        name: subprocess.Popen(
            _argv(realpath, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), stdin=subprocess.DEVNULL
        )
        for name, args in commands.items()
    }
    outputs: dict[str, bytes] = {}
    failed: list[str] = []
    for name, proc in procs.items():
        out, err = proc.communicate()
        outputs[name] = out
        if proc.returncode != 0:
            failed.append(f"{name}: {err.decode('utf-8', 'replace').strip()}")
    if failed:
        raise GitReadError(
            "worktree", f"git could not list the changes of {realpath}: {'; '.join(failed)}", path=realpath
        )
    return outputs
