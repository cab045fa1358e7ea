"""Confine one agent run on the process host under Bubblewrap: read-only everywhere but what it owns.

The run's command becomes ``bwrap … -- ARGV…`` (fixed argv, paths as separate arguments)::

    bwrap --unshare-all [--share-net] --cap-drop ALL --die-with-parent
          --ro-bind / /  --dev /dev  --proc /proc           (the whole host, read-only)
          --tmpfs /tmp  [--tmpfs $TMPDIR]                   (a private tmp, and the agent's TMPDIR)
          --tmpfs AGENTS --ro-bind SLOT SLOT                (other agents' slots hidden; its own read-only)
          --ro-bind WORKTREE WORKTREE  (and its gitdir and common dir, read-only)
          --bind OWNED OWNED …                              (a writer: each owned scope, read-write)
          --ro-bind LOCKED LOCKED …  --ro-bind WORKTREE/.git …   (re-bound read-only: later binds win)
          --bind STATE STATE …                              (the driver's state dirs: ~/.claude, ~/.codex)

What it guarantees, by the kernel's mount rules rather than by the agent's good will: a write
anywhere but an owned scope, the private ``/tmp`` and the agent's own state dirs fails with
``EROFS``, whichever route it takes (a child process, ``/proc/self/cwd/..``, a symlink planted in a
scope: the write lands on the read-only mount it resolves to). A rename or hard link across a bind
mount fails with ``EXDEV``; an owned scope's mount point cannot be removed or replaced (``EBUSY``).
``--cap-drop ALL`` (the sandbox's user namespace would otherwise hold every capability) means nobody
inside can remount a bind read-write; a nested user namespace (Codex's own sandbox) is still allowed.

Scopes are literal paths (:mod:`runner.scopes`). An existing owned scope is bound read-write
unless a component of its path from the worktree down is a symlink (refused, wherever it points:
said in the run's notes beside its log). A missing one (a new file or directory the writer is to create) opens its
parent directory, made if missing, with every entry already there re-bound read-only: the agent may
create new names beside the scope but change nothing that exists (release's scope check reports a
stray new file); where that parent holds a symlink or more than :data:`MAX_SIBLINGS` entries the
scope is not writable this run. A locked scope that is missing but would lie inside an owned one is
made an empty directory first (git does not see empty directories) so that it can be re-bound
read-only.

The uid on disk stays corral's, so the worktree and the agent's state dirs keep their owners and
stay writable to it; in a user namespace of its own, with no capability. Run by root, the agent is
``nobody`` inside that namespace (:data:`ROOT_INSIDE_UID`, still root on disk: root's own files stay
writable where bound, others' are not, having no ``CAP_DAC_OVERRIDE``), so that a nested sandbox
(Codex's bwrap) can map it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from runner.sandbox.bwrap import SandboxUnavailableError

BWRAP_ENV = "CORRAL_BWRAP"
"""The Bubblewrap binary the process host confines agents with (default ``bwrap`` on PATH)."""

MAX_SIBLINGS = 256
"""The most entries a missing owned scope's directory may hold to be opened for it (one bind each)."""

_PROBED: dict[tuple[str, bool], str] = {}


def bwrap_binary() -> str:
    return os.environ.get(BWRAP_ENV) or "bwrap"


ROOT_INSIDE_UID = 65534
"""The uid a run of root's has inside its user namespace (``nobody``): still root on disk, but a nested
user namespace (Codex's own sandbox) may then map it, which a map of the parent's root forbids
without ``CAP_SETFCAP`` (never granted: a file capability set inside would hold for root outside)."""


def _namespaces(network: bool) -> list[str]:
    argv = ["--unshare-all", *(["--share-net"] if network else []), "--cap-drop", "ALL", "--die-with-parent"]
    if os.geteuid() == 0:
        argv += ["--unshare-user", "--uid", str(ROOT_INSIDE_UID), "--gid", str(ROOT_INSIDE_UID)]
    return argv


def probe(network: bool = True, bwrap: str | None = None) -> str:
    """The Bubblewrap binary, once a minimal confined run really started with it (cached per process).

    Raises:
        SandboxUnavailableError: Bubblewrap is missing or the kernel refuses its namespaces.
    """
    name = bwrap or bwrap_binary()
    found = _PROBED.get((name, network))
    if found is not None:
        return found
    binary = shutil.which(name)
    if binary is None:
        raise SandboxUnavailableError(f"Bubblewrap ({name}) is not installed: agents cannot be confined", bwrap=name)
    try:
        done = subprocess.run(
            [binary, *_namespaces(network), "--ro-bind", "/", "/", "true"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailableError(f"Bubblewrap could not start: {exc}", bwrap=binary) from None
    if done.returncode != 0:
        raise SandboxUnavailableError(
            f"the kernel refused Bubblewrap's namespaces: {done.stderr.strip() or done.returncode}", bwrap=binary
        )
    _PROBED[(name, network)] = binary
    return binary


@dataclass(frozen=True)
class Confinement:
    """What one run may write: by role, its worktree's scopes, its driver's state dirs."""

    role: str
    cwd: str
    owned: tuple[str, ...] = ()
    locked: tuple[str, ...] = ()
    state_dirs: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    """Directories the run must not read (the host's slot root), each a tmpfs."""
    readable: tuple[str, ...] = ()
    """Paths inside ``hidden`` or ``/tmp`` it reads (its own slot directory)."""
    network: bool = True
    whole_worktree: bool = False
    """A writer whose CLI runs its own sandbox (Codex): the worktree is one read-write mount (its locked
    scopes and ``.git`` still read-only), not one mount per owned scope. Such a sandbox cannot write
    through a mount nested in a read-only one; the release audit judges the owned scopes."""
    tmpdir: str | None = None
    """The agent's ``TMPDIR``: a private tmpfs at that path too (else ``TMPDIR`` is set to ``/tmp``)."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _git_dirs(worktree: str) -> list[str]:
    """The gitdir of a linked worktree (``.git`` is a file) and its common dir; a plain ``.git`` dir."""
    dot = os.path.join(worktree, ".git")
    if os.path.isdir(dot) and not os.path.islink(dot):
        return [dot]
    try:
        with open(dot, encoding="utf-8") as handle:
            first = handle.readline().strip()
    except OSError:
        return []
    if not first.startswith("gitdir:"):
        return []
    gitdir = os.path.realpath(os.path.join(worktree, first[len("gitdir:") :].strip()))
    found = [gitdir]
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as handle:
            found.append(os.path.realpath(os.path.join(gitdir, handle.readline().strip())))
    except OSError:
        pass
    return found


def _through_link(root: str, relative: str) -> bool:
    """Whether a component of ``root/relative`` (below ``root``) is a symlink."""
    path = root
    for part in relative.split("/"):
        path = os.path.join(path, part)
        if os.path.islink(path):
            return True
    return False


def _new_scope(root: str, scope: str, notes: list[str]) -> list[str]:
    """The binds that let a writer create the missing owned scope ``scope``: its parent directory
    (made, with its missing ancestors: git does not see empty directories) read-write, and every entry
    already in it re-bound read-only (a mount point cannot be removed, renamed or written through).
    So the agent may create new names beside the scope, never change what is there; none when an entry
    there is a symlink (removing it would be a change) or is too many to bind."""
    target = os.path.join(root, scope)
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
        entries = sorted(os.listdir(parent))
    except OSError as exc:
        notes.append(f"owned scope {scope} does not exist and its directory cannot be made: not writable ({exc})")
        return []
    if len(entries) > MAX_SIBLINGS or any(os.path.islink(os.path.join(parent, e)) for e in entries):
        notes.append(
            f"owned scope {scope} does not exist and its directory holds symlinks or more than {MAX_SIBLINGS} "
            "entries: not writable (create it before the run)"
        )
        return []
    argv = ["--bind", parent, parent]
    for entry in entries:
        path = os.path.join(parent, entry)
        argv += ["--ro-bind", path, path]
    return argv


def plan(c: Confinement) -> tuple[list[str], list[str]]:
    """The bwrap options for ``c`` (everything before ``--``) and the notes to log (scopes not bound)."""
    root = os.path.realpath(c.cwd)
    notes: list[str] = []
    argv = [*_namespaces(c.network), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    git = _git_dirs(root)
    for path in (root, *git):
        argv += ["--ro-bind", path, path] if os.path.exists(path) else []
    for hidden in c.hidden:
        if os.path.isdir(hidden) and not _inside(root, os.path.realpath(hidden)):
            argv += ["--tmpfs", os.path.realpath(hidden)]
    for path in c.readable:
        argv += ["--ro-bind", path, path] if os.path.exists(path) else []
    if c.role == "writer" and c.whole_worktree:
        argv += ["--bind", root, root]
    if c.role == "writer":
        for scope in () if c.whole_worktree else c.owned:
            target = os.path.join(root, scope)
            if _through_link(root, scope):
                notes.append(f"owned scope {scope} passes through a symlink: not writable")
            elif os.path.lexists(target):
                argv += ["--bind", target, target]
            else:
                argv += _new_scope(root, scope, notes)
        for scope in c.locked:
            target = os.path.join(root, scope)
            if _through_link(root, scope):
                continue  # not bound read-write either: a path through a link is never an owned bind
            inside_writable = c.whole_worktree or any(scope.startswith(o + "/") for o in c.owned)
            if not os.path.lexists(target) and inside_writable:
                os.makedirs(target, exist_ok=True)  # an empty directory: invisible to git
            if os.path.exists(target):
                argv += ["--ro-bind", target, target]
        for path in (os.path.join(root, ".git"), *git):
            if os.path.lexists(path):
                argv += ["--ro-bind", path, path]
    for state in c.state_dirs:
        if os.path.exists(state):
            argv += ["--bind", state, state]
    tmp = os.path.realpath(c.tmpdir) if c.tmpdir and os.path.isabs(c.tmpdir) else "/tmp"
    bound = [root, *git, *c.state_dirs, *c.readable]
    # Never over what it must see: a TMPDIR above the worktree or a state dir stays hidden by /tmp only.
    if (
        tmp != "/tmp"
        and (os.path.isdir(tmp) or _inside(tmp, "/tmp"))
        and not any(_inside(os.path.realpath(p), tmp) for p in bound)
    ):
        argv += ["--tmpfs", tmp]  # where the agent's TMPDIR points: private and empty, as /tmp is
    else:
        argv += ["--setenv", "TMPDIR", "/tmp"]
    return [*argv, "--chdir", root], notes


def wrap(binary: str, c: Confinement, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` run confined by ``c`` (with the notes of :func:`plan`)."""
    options, notes = plan(c)
    return [binary, *options, "--", *argv], notes
