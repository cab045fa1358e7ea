"""Git preflight: the facts about a worktree that a writer lane is gated on, read afresh each time.

Everything comes from git itself (the ``git`` command, run directly: a process per question, as
GitPython ran it, without the ~0.1 s GitPython costs to import), never from the caller:

===================  ========================================================================
fact                 how
===================  ========================================================================
``toplevel``         ``rev-parse --show-toplevel`` (must equal the worktree's realpath)
``git_dir``          ``rev-parse --absolute-git-dir``
``common_dir``       ``rev-parse --git-common-dir``, made absolute; differs from git_dir only in
                     a *linked* worktree (not the main checkout, not an independent clone)
``branch``           ``symbolic-ref --short -q HEAD`` (None when HEAD is detached)
``head``             ``rev-parse HEAD``
``status_sha256``    SHA-256 of ``status --porcelain=v1 --untracked-files=all``, byte for byte
``default_branch``   origin's HEAD if there is one, else ``init.defaultBranch`` from git's config
                     (None when neither is known; never the branch some checkout happens to be on)
``protected_default`` the branches protected when a lane names none: ``default_branch`` plus
                     ``main`` and ``master`` wherever those branches exist (locally or on origin)
``content_sha256``   (only from :func:`content_digest`, ``corral preflight``) SHA-256 over the
                     *contents* of every tracked and untracked, not ignored, file (see there)
``scope_links``      (only from :func:`scope_links`) each scope one of whose components is a
                     symlink, on disk in the worktree or tracked as one at HEAD
===================  ========================================================================
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from runner.errors import InputError


@dataclass(frozen=True)
class GitFacts:
    """One fresh reading of a worktree."""

    worktree: str
    realpath: str
    toplevel: str
    git_dir: str
    common_dir: str
    branch: str | None
    head: str
    status_sha256: str
    default_branch: str | None
    protected_default: tuple[str, ...] = ()
    content_sha256: str | None = None
    """Set only when asked for (:func:`read` with ``content=True``): it reads every file."""

    @property
    def linked(self) -> bool:
        """A linked worktree: its git dir is not the common dir."""
        return self.git_dir != self.common_dir

    def to_dict(self) -> dict[str, Any]:
        facts = {**asdict(self), "protected_default": list(self.protected_default)}
        return {**facts, "linked": self.linked, "is_toplevel": self.toplevel == self.realpath}


class GitReadError(InputError):
    """The path is not a git worktree git can read. Give the worktree's own directory."""

    default_code = "git_unreadable"


class GitFailed(Exception):
    """``git`` exited with a non-zero status (``status``) and said ``stderr`` (stripped)."""

    def __init__(self, argv: list[str], status: int, stderr: str) -> None:
        super().__init__(f"{' '.join(argv)} exited with status {status}: {stderr}")
        self.status, self.stderr = status, stderr


# git's messages in English whatever the user's locale (as GitPython ran it): they go into errors.
_GIT_ENV = {"LC_ALL": "C", "LANGUAGE": "C"}


# The three directories in one question (git >= 2.31 answers --git-common-dir absolute).
DIRS = ("--show-toplevel", "--absolute-git-dir", "--path-format=absolute", "--git-common-dir")


class Repo:
    """A worktree found from a path inside it (searching upwards, as git does): where to run git."""

    def __init__(self, path: str) -> None:
        if not os.path.exists(path):
            raise GitReadError("worktree", f"{path} is not a git worktree (no such path)", path=path)
        self.working_tree_dir: str | None = None
        self.dirs: list[str] | None = None
        """The top level, git dir and common dir (absolute) when the first question answered them."""
        try:  # one git process in a work tree (the usual case, git >= 2.31) …
            dirs = _run(path, ["rev-parse", *DIRS]).split("\n")
        except GitFailed:
            dirs = []
        if len(dirs) == 3:
            self.working_tree_dir, self.git_dir, _ = dirs
            self.dirs = dirs
        else:  # … else an older git, a path with a newline, a bare repository or a .git directory
            try:
                self.git_dir = _run(path, ["rev-parse", "--absolute-git-dir"])
            except GitFailed:
                raise GitReadError(
                    "worktree", f"{path} is not a git worktree (not in a git repository)", path=path
                ) from None
            try:
                self.working_tree_dir = _run(path, ["rev-parse", "--show-toplevel"]) or None
            except GitFailed:  # no work tree here
                self.working_tree_dir = None
        # Invariant: git runs at the top of the work tree (its git dir for a bare repository), wherever
        # inside it the caller pointed, so its answers (status paths …) do not depend on the subdirectory.
        self.cwd = self.working_tree_dir or self.git_dir

    def text(self, *args: str) -> str:
        """git's answer as text, one trailing newline stripped."""
        return _run(self.cwd, list(args))

    def data(self, *args: str) -> bytes:
        """git's answer, byte for byte."""
        return _run_bytes(self.cwd, list(args))


def _run_bytes(cwd: str, args: list[str]) -> bytes:
    argv = ["git", *args]
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=os.environ | _GIT_ENV, stdin=subprocess.DEVNULL, capture_output=True, check=False
        )
    except OSError as exc:  # no git, or the directory vanished
        raise GitFailed(argv, -1, exc.strerror or str(exc)) from None
    if done.returncode != 0:
        raise GitFailed(argv, done.returncode, done.stderr.decode("utf-8", "replace").strip())
    return done.stdout


def _run(cwd: str, args: list[str]) -> str:
    out = _run_bytes(cwd, args).decode("utf-8", "surrogateescape")
    return out[:-1] if out.endswith("\n") else out


def _repo(path: str) -> Repo:
    # Search upwards: a subdirectory must be *read* (and then refused by the top-level guard),
    # not mistaken for an unreadable path.
    return Repo(path)


def read(worktree: str, content: bool = False) -> GitFacts:
    """Read every fact about ``worktree`` (an absolute path); with ``content``, also
    :func:`content_digest` (it reads every file, so only the operations that compare it pay).

    Raises:
        GitReadError: ``git_unreadable`` when git cannot read it at all.
    """
    if not os.path.isabs(worktree):
        raise InputError("worktree", f"{worktree!r} is not an absolute path", code="git_worktree_invalid")
    realpath = os.path.realpath(worktree)
    if not os.path.isdir(realpath):
        raise GitReadError("worktree", f"{worktree} is not a directory", path=worktree)
    repo = _repo(realpath)
    try:
        # The three directories came with the repository's first question (:data:`DIRS`) …
        dirs = repo.dirs or []
        if len(dirs) != 3:  # … unless an older git, or a path with a newline in it: one question at a time
            # git answers --git-common-dir relative to the directory it runs in (the top level
            # found above): resolve it against that directory.
            common = repo.text("rev-parse", "--git-common-dir")
            base = repo.working_tree_dir or realpath
            dirs = [
                repo.text("rev-parse", "--show-toplevel"),
                repo.text("rev-parse", "--absolute-git-dir"),
                common if os.path.isabs(common) else os.path.join(base, common),
            ]
        toplevel, git_dir, common_dir = (os.path.realpath(d) for d in dirs)
        try:
            branch: str | None = repo.text("symbolic-ref", "--short", "-q", "HEAD") or None
        except GitFailed:
            branch = None
        head = repo.text("rev-parse", "HEAD")
        status = repo.data("status", "--porcelain=v1", "--untracked-files=all")
    except GitFailed as exc:
        raise GitReadError("worktree", f"git could not read {worktree}: {exc.stderr or exc}", path=worktree) from None
    default = _default_branch(repo)
    return GitFacts(
        worktree=worktree,
        realpath=realpath,
        toplevel=toplevel,
        git_dir=git_dir,
        common_dir=common_dir,
        branch=branch,
        head=head,
        status_sha256=hashlib.sha256(status).hexdigest(),
        default_branch=default,
        protected_default=_protected_default(repo, default),
        content_sha256=content_digest(realpath) if content else None,
    )


CHUNK = 1 << 20


def content_digest(worktree: str) -> str:
    """SHA-256 over the contents of the worktree's tracked and untracked (not ignored) files.

    Why: the status digest only sees ``M file``; a dirty file edited again keeps the same status line,
    so a release or verify bound to the status alone could accept content nobody looked at. This
    digest changes with any byte. Deterministic: paths in byte order, each entry framed as
    ``kind, path length, path, payload`` so no two listings collide; kinds: ``F`` a regular file (its
    size and the SHA-256 of its bytes, read streaming, opened ``O_NOFOLLOW | O_NONBLOCK`` so a FIFO
    or a swapped-in link cannot hang or redirect it), ``L`` a symlink (its target text, never
    followed), ``D`` a directory (a submodule: not descended into), ``O`` anything else, ``-`` a
    tracked file that is missing. Nothing under a ``.git`` component is read.

    Raises:
        GitReadError: a file git lists cannot be read (``git_unreadable``, naming it).
    """
    total = hashlib.sha256()
    root = os.path.realpath(worktree)
    for path in sorted(listed_files(root), key=lambda p: p.encode("utf-8", "surrogateescape")):
        if ".git" in path.split("/"):
            continue
        name = path.encode("utf-8", "surrogateescape")
        kind, payload = _entry(os.path.join(root, path), path)
        total.update(kind + len(name).to_bytes(8, "big") + name + len(payload).to_bytes(8, "big") + payload)
    return total.hexdigest()


def _entry(full: str, path: str) -> tuple[bytes, bytes]:
    import stat

    try:
        info = os.lstat(full)
    except FileNotFoundError:
        return b"-", b""
    except OSError as exc:
        raise GitReadError("worktree", f"cannot read {path}: {exc.strerror}", path=path) from None
    if stat.S_ISLNK(info.st_mode):
        return b"L", os.fsencode(os.readlink(full))
    if stat.S_ISDIR(info.st_mode):
        return b"D", b""
    if not stat.S_ISREG(info.st_mode):
        return b"O", b""
    digest = hashlib.sha256()
    size = 0
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise GitReadError("worktree", f"cannot read {path}: {exc.strerror}", path=path) from None
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return b"F", size.to_bytes(8, "big") + digest.digest()


# Branches protected whenever they exist, whatever the remote or the configuration says.
CONVENTIONAL_DEFAULTS = ("main", "master")


def _default_branch(repo: Repo) -> str | None:
    """origin's HEAD, else ``init.defaultBranch``. Never the main checkout's *current* branch: that is
    wherever somebody happens to stand, and guessing from it left ``main`` unprotected while the main
    checkout sat on a topic branch."""
    try:
        ref = repo.text("symbolic-ref", "--short", "-q", "refs/remotes/origin/HEAD")
        if ref:
            return ref.split("/", 1)[1] if "/" in ref else ref
    except GitFailed:
        pass
    try:
        configured = repo.text("config", "--get", "init.defaultBranch").strip()
    except GitFailed:  # exit 1: not set
        return None
    return configured or None


def _protected_default(repo: Repo, default: str | None) -> tuple[str, ...]:
    found = {default} if default else set()
    wanted = {
        ref: name for name in CONVENTIONAL_DEFAULTS for ref in (f"refs/heads/{name}", f"refs/remotes/origin/{name}")
    }
    # One question for all four refs; a pattern also matches refs below it, so only exact names count.
    try:
        listed = repo.text("for-each-ref", "--format=%(refname)", *wanted).split("\n")
    except GitFailed as exc:  # refs git cannot list: refuse, never guess them unprotected
        raise GitReadError("worktree", f"git could not list the branches: {exc.stderr or exc}") from None
    found |= {wanted[ref] for ref in listed if ref in wanted}
    return tuple(sorted(found))


def scope_links(worktree: str, head: str, scopes: list[str]) -> list[dict[str, Any]]:
    """Every scope one of whose path components is a symlink, with the first such component.

    A component counts when it is a symlink on disk in the worktree (``lstat``) or is tracked as a
    symlink (mode 120000) at ``head``: a scope through ``lib -> src`` would let a lane owning
    ``lib/a.py`` edit ``src/a.py`` that another lane owns, and a link pointing outside the repository
    would reach files corral never judged. Each entry: ``scope``, ``link`` (the component, repo-relative),
    ``target`` (what it points to, as stored) and ``where`` (``worktree``, ``head`` or both).
    """
    realpath = os.path.realpath(worktree)
    prefixes = sorted({"/".join(s.split("/")[: i + 1]) for s in scopes for i in range(s.count("/") + 1)})
    tracked: dict[str, str] = {}
    if prefixes:
        repo = _repo(realpath)
        try:
            listing = repo.data("ls-tree", "-z", head, "--", *prefixes)
        except GitFailed as exc:
            raise GitReadError("worktree", f"git could not list {head} in {worktree}: {exc}", path=worktree) from None
        for entry in listing.split(b"\0"):
            meta, _, name = entry.partition(b"\t")
            fields = meta.split()
            if len(fields) == 3 and fields[0] == b"120000":
                path = name.decode("utf-8", "surrogateescape")
                blob = file_at(worktree, head, path) or b""
                tracked[path] = blob.decode("utf-8", "surrogateescape")
    found = []
    for scope in scopes:
        parts = scope.split("/")
        for i in range(len(parts)):
            link = "/".join(parts[: i + 1])
            on_disk = os.path.islink(os.path.join(realpath, link))
            if on_disk or link in tracked:
                target = os.readlink(os.path.join(realpath, link)) if on_disk else tracked[link]
                where = "both" if on_disk and link in tracked else ("worktree" if on_disk else "head")
                found.append({"scope": scope, "link": link, "target": target, "where": where})
                break
    return found


def is_ancestor(worktree: str, ancestor: str, descendant: str) -> bool:
    """Whether commit ``ancestor`` is an ancestor of (or equal to) ``descendant``."""
    repo = _repo(os.path.realpath(worktree))
    try:
        repo.text("merge-base", "--is-ancestor", ancestor, descendant)
    except GitFailed as exc:
        if exc.status == 1:
            return False
        raise GitReadError(
            "base_commit", f"git cannot compare {ancestor} with {descendant}: {exc.stderr}", path=worktree
        ) from None
    return True


def file_at(worktree: str, commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``commit`` (None when the file does not exist there)."""
    repo = _repo(os.path.realpath(worktree))
    try:
        return repo.data("show", f"{commit}:{path}")
    except GitFailed:
        return None


def regular_file_at(worktree: str, commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``commit`` when it is a regular file there (mode 100644 or 100755);
    None when it is missing, a symlink (mode 120000), a directory or a submodule, or lies below one."""
    repo = _repo(os.path.realpath(worktree))
    try:
        listed = repo.data("ls-tree", "-z", commit, "--", path).decode("utf-8", "surrogateescape")
    except GitFailed:
        return None
    entry, _, name = listed.rstrip("\0").partition("\t")
    fields = entry.split()
    if name != path or len(fields) != 3 or fields[0] not in ("100644", "100755") or fields[1] != "blob":
        return None
    return repo.data("cat-file", "blob", fields[2])


def listed_files(worktree: str) -> list[str]:
    """Tracked and untracked, not ignored, files of the worktree (what a snapshot copies)."""
    repo = _repo(os.path.realpath(worktree))
    out = repo.data("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return sorted({p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p})


def changed_files(directory: str) -> list[str]:
    """The paths ``git status`` shows as changed (modified, added, deleted, renamed, untracked) under
    ``directory``, relative to the repository's top level, sorted (a checkpoint's
    ``auto_files``). Read with the porcelain format, as :func:`read` reads the status digest; a
    rename counts by its new path.

    Raises:
        GitReadError: ``git_unreadable`` when git cannot read the directory.
    """
    realpath = os.path.realpath(directory)
    if not os.path.isdir(realpath):
        raise GitReadError("directory", f"{directory} is not a directory", path=directory)
    repo = _repo(realpath)
    try:
        out = repo.data("-C", realpath, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".")
    except GitFailed as exc:
        raise GitReadError(
            "directory", f"git could not read {directory}: {exc.stderr or exc}", path=directory
        ) from None
    entries = out.split(b"\0")
    paths: set[str] = set()
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4:
            continue
        paths.add(entry[3:].decode("utf-8", "surrogateescape"))
        if entry[:1] in (b"R", b"C"):
            index += 1  # the entry after a rename or copy is its old path
    return sorted(paths)


def common_dir(path: str) -> str:
    """The real path of the git common directory of the repository holding ``path`` (every linked
    worktree of one repository shares it).

    Raises:
        GitReadError: ``git_unreadable`` when ``path`` is not in a git repository.
    """
    realpath = os.path.realpath(path)
    repo = _repo(realpath)
    if repo.dirs is not None:
        return os.path.realpath(repo.dirs[2])
    try:
        found = repo.text("rev-parse", "--path-format=absolute", "--git-common-dir")
    except GitFailed as exc:
        raise GitReadError("repository", f"git could not read {path}: {exc.stderr or exc}", path=path) from None
    return os.path.realpath(found if os.path.isabs(found) else os.path.join(repo.working_tree_dir or realpath, found))


def toplevel(path: str) -> str:
    """The real path of the top level of the worktree holding ``path``.

    Raises:
        GitReadError: ``git_unreadable`` when ``path`` is not in a git repository.
    """
    repo = _repo(os.path.realpath(path))
    return os.path.realpath(repo.working_tree_dir or path)
