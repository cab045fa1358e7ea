"""Git preflight: the facts about a worktree that a writer lane is gated on, read afresh each time.

Everything comes from git itself, through GitPython, never from the caller:

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


def _repo(path: str) -> Any:
    import git  # GitPython costs ~0.2 s to import: only writer operations pay it

    try:
        # Search upwards: a subdirectory must be *read* (and then refused by the top-level guard),
        # not mistaken for an unreadable path.
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise GitReadError("worktree", f"{path} is not a git worktree ({type(exc).__name__})", path=path) from None


def read(worktree: str, content: bool = False) -> GitFacts:
    """Read every fact about ``worktree`` (an absolute path); with ``content``, also
    :func:`content_digest` (it reads every file, so only the operations that compare it pay).

    Raises:
        GitReadError: ``git_unreadable`` when git cannot read it at all.
    """
    import git

    if not os.path.isabs(worktree):
        raise InputError("worktree", f"{worktree!r} is not an absolute path", code="git_worktree_invalid")
    realpath = os.path.realpath(worktree)
    if not os.path.isdir(realpath):
        raise GitReadError("worktree", f"{worktree} is not a directory", path=worktree)
    repo = _repo(realpath)
    cmd = repo.git
    try:
        # One git process for the three directories (git >= 2.31 answers --git-common-dir absolute).
        try:
            answer = cmd.rev_parse(
                "--show-toplevel", "--absolute-git-dir", "--path-format=absolute", "--git-common-dir"
            )
            dirs = answer.split("\n")
        except git.GitCommandError:
            dirs = []
        if len(dirs) != 3:  # an older git, or a path with a newline in it: one question at a time
            # git answers --git-common-dir relative to the directory it runs in (the top level
            # GitPython found): resolve it against that directory.
            common = cmd.rev_parse("--git-common-dir")
            base = repo.working_tree_dir or realpath
            dirs = [
                cmd.rev_parse("--show-toplevel"),
                cmd.rev_parse("--absolute-git-dir"),
                common if os.path.isabs(common) else os.path.join(base, common),
            ]
        toplevel, git_dir, common_dir = (os.path.realpath(d) for d in dirs)
        try:
            branch: str | None = cmd.symbolic_ref("--short", "-q", "HEAD") or None
        except git.GitCommandError:
            branch = None
        head = cmd.rev_parse("HEAD")
        status = cmd.execute(
            ["git", "status", "--porcelain=v1", "--untracked-files=all"],
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
    except git.GitCommandError as exc:
        raise GitReadError(
            "worktree", f"git could not read {worktree}: {exc.stderr.strip() or exc}", path=worktree
        ) from None
    assert isinstance(status, bytes)
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


def _default_branch(repo: Any) -> str | None:
    """origin's HEAD, else ``init.defaultBranch``. Never the main checkout's *current* branch: that is
    wherever somebody happens to stand, and guessing from it left ``main`` unprotected while the main
    checkout sat on a topic branch."""
    import git

    try:
        ref = repo.git.symbolic_ref("--short", "-q", "refs/remotes/origin/HEAD")
        if ref:
            return str(ref).split("/", 1)[1] if "/" in ref else str(ref)
    except git.GitCommandError:
        pass
    try:
        configured = str(repo.git.config("--get", "init.defaultBranch")).strip()
    except git.GitCommandError:  # exit 1: not set
        return None
    return configured or None


def _protected_default(repo: Any, default: str | None) -> tuple[str, ...]:
    import git

    found = {default} if default else set()
    for name in CONVENTIONAL_DEFAULTS:
        for ref in (f"refs/heads/{name}", f"refs/remotes/origin/{name}"):
            try:
                repo.git.show_ref("--verify", "-q", ref)
            except git.GitCommandError:
                continue
            found.add(name)
            break
    return tuple(sorted(found))


def scope_links(worktree: str, head: str, scopes: list[str]) -> list[dict[str, Any]]:
    """Every scope one of whose path components is a symlink, with the first such component.

    A component counts when it is a symlink on disk in the worktree (``lstat``) or is tracked as a
    symlink (mode 120000) at ``head``: a scope through ``lib -> src`` would let a lane owning
    ``lib/a.py`` edit ``src/a.py`` that another lane owns, and a link pointing outside the repository
    would reach files corral never judged. Each entry: ``scope``, ``link`` (the component, repo-relative),
    ``target`` (what it points to, as stored) and ``where`` (``worktree``, ``head`` or both).
    """
    import git

    realpath = os.path.realpath(worktree)
    prefixes = sorted({"/".join(s.split("/")[: i + 1]) for s in scopes for i in range(s.count("/") + 1)})
    tracked: dict[str, str] = {}
    if prefixes:
        repo = _repo(realpath)
        try:
            listing = repo.git.execute(
                ["git", "ls-tree", "-z", head, "--", *prefixes], stdout_as_string=False, strip_newline_in_stdout=False
            )
        except git.GitCommandError as exc:
            raise GitReadError("worktree", f"git could not list {head} in {worktree}: {exc}", path=worktree) from None
        assert isinstance(listing, bytes)
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
    import git

    repo = _repo(os.path.realpath(worktree))
    try:
        repo.git.merge_base("--is-ancestor", ancestor, descendant)
    except git.GitCommandError as exc:
        if exc.status == 1:
            return False
        raise GitReadError(
            "base_commit", f"git cannot compare {ancestor} with {descendant}: {exc.stderr.strip()}", path=worktree
        ) from None
    return True


def file_at(worktree: str, commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``commit`` (None when the file does not exist there)."""
    import git

    repo = _repo(os.path.realpath(worktree))
    try:
        data = repo.git.execute(
            ["git", "show", f"{commit}:{path}"], stdout_as_string=False, strip_newline_in_stdout=False
        )
    except git.GitCommandError:
        return None
    assert isinstance(data, bytes)
    return data


def regular_file_at(worktree: str, commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``commit`` when it is a regular file there (mode 100644 or 100755);
    None when it is missing, a symlink (mode 120000), a directory or a submodule, or lies below one."""
    import git

    repo = _repo(os.path.realpath(worktree))
    try:
        listed = repo.git.execute(["git", "ls-tree", "-z", commit, "--", path], strip_newline_in_stdout=False)
    except git.GitCommandError:
        return None
    assert isinstance(listed, str)
    entry, _, name = listed.rstrip("\0").partition("\t")
    fields = entry.split()
    if name != path or len(fields) != 3 or fields[0] not in ("100644", "100755") or fields[1] != "blob":
        return None
    data = repo.git.execute(
        ["git", "cat-file", "blob", fields[2]], stdout_as_string=False, strip_newline_in_stdout=False
    )
    assert isinstance(data, bytes)
    return data


def listed_files(worktree: str) -> list[str]:
    """Tracked and untracked, not ignored, files of the worktree (what a snapshot copies)."""
    repo = _repo(os.path.realpath(worktree))
    out = repo.git.execute(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        stdout_as_string=False,
        strip_newline_in_stdout=False,
    )
    assert isinstance(out, bytes)
    return sorted({p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p})


def changed_files(directory: str) -> list[str]:
    """The paths ``git status`` shows as changed (modified, added, deleted, renamed, untracked) under
    ``directory``, relative to the repository's top level, sorted (a checkpoint's
    ``auto_files``). Read with the porcelain format, as :func:`read` reads the status digest; a
    rename counts by its new path.

    Raises:
        GitReadError: ``git_unreadable`` when git cannot read the directory.
    """
    import git

    realpath = os.path.realpath(directory)
    if not os.path.isdir(realpath):
        raise GitReadError("directory", f"{directory} is not a directory", path=directory)
    repo = _repo(realpath)
    try:
        out = repo.git.execute(
            ["git", "-C", realpath, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "."],
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
    except git.GitCommandError as exc:
        raise GitReadError(
            "directory", f"git could not read {directory}: {exc.stderr.strip() or exc}", path=directory
        ) from None
    assert isinstance(out, bytes)
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
    import git

    realpath = os.path.realpath(path)
    repo = _repo(realpath)
    try:
        found = repo.git.rev_parse("--path-format=absolute", "--git-common-dir")
    except git.GitCommandError as exc:
        raise GitReadError("repository", f"git could not read {path}: {exc.stderr.strip() or exc}", path=path) from None
    return os.path.realpath(found if os.path.isabs(found) else os.path.join(repo.working_tree_dir or realpath, found))


def toplevel(path: str) -> str:
    """The real path of the top level of the worktree holding ``path``.

    Raises:
        GitReadError: ``git_unreadable`` when ``path`` is not in a git repository.
    """
    repo = _repo(os.path.realpath(path))
    return os.path.realpath(repo.working_tree_dir or path)
