"""Writer lanes: start an agent in a linked worktree owning path scopes, verify, release.

Git facts are read by the runner itself (``runner.git.preflight``) just before every transition and
handed to the writer machine's guards as the ``git`` observation; the caller's expectations (HEAD,
status digest, branch, base) are params the guards compare against. Release records a checkpoint and
closes the agent's pane; nothing here ever commits, stashes, resets, cleans or deletes in a worktree.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import scopes
from runner.agents.abc import SETTLED
from runner.context import Instance
from runner.errors import ConflictError, InputError, RefusedError
from runner.fence import Credential
from runner.guards.agents import same_identity
from runner.guards.git import LANE_STATES, inside
from runner.service.agents import (
    CAPTURE_LINES_DEFAULT,
    AgentLeaseView,
    AgentOps,
    CloseResult,
    _check_agent,
    _check_cursor,
    _check_instance_id,
    _check_key,
    _check_lines,
    _check_name,
    check_blocked_reason,
)
from runner.service.checks import check_controller_id, check_credential, check_ref, check_sha256

OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[^\x00-\x20~^:?*\[\\\x7f]{1,255}$")
SCOPES_MAX = 500
PROTECTED_MAX = 20


def _check_object_id(name: str, value: str) -> None:
    if not isinstance(value, str) or not OBJECT_ID.match(value):
        raise InputError(name, f"{value!r} is not a full commit id (40 or 64 lowercase hex digits)")


def _check_branch(name: str, value: str) -> None:
    if not isinstance(value, str) or not BRANCH.match(value) or value.endswith((".lock", "/", ".")):
        raise InputError(name, f"{value!r} is not a branch name")


def _scope_list(name: str, raw: tuple[str, ...], minimum: int) -> tuple[str, ...]:
    normalized = scopes.normalize(raw, name)
    if not minimum <= len(normalized) <= SCOPES_MAX:
        raise InputError(name, f"give {minimum}-{SCOPES_MAX} scopes, not {len(normalized)}", code="scope_invalid")
    return normalized


@dataclass(frozen=True)
class WriterStartInput:
    """Put an agent into a linked worktree, owning ``owned_scopes`` (and locking ``locked_scopes``)."""

    controller_id: str
    credential: Credential
    name: str
    kind: str
    worktree: str
    branch: str
    base_commit: str
    expected_head: str
    expected_status_sha256: str
    owned_scopes: tuple[str, ...]
    purpose: str
    ticket_ref: str
    authority_ref: str
    authority_sha256: str
    locked_scopes: tuple[str, ...] = ()
    protected_branches: tuple[str, ...] = ()
    """Added to the repository's default protected set (``protected_default``), or the whole set when
    ``protect_defaults`` is false."""
    host: str = "process"
    model: str | None = None
    effort: str | None = None
    lease_id: str | None = None
    """An idempotency key: the lane instance is ``writer/<lease_id>``."""
    protect_defaults: bool = True
    """False: ``protected_branches`` replaces the default set instead of adding to it."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_name("name", self.name)
        if not self.protect_defaults and not self.protected_branches:
            raise InputError("protected_branches", "name the protected branches that replace the default set")
        _check_agent(self.kind, self.host, self.model, self.effort)
        _check_key("lease_id", self.lease_id)
        if not isinstance(self.worktree, str) or not self.worktree.startswith("/"):
            raise InputError("worktree", f"{self.worktree!r} is not an absolute path")
        _check_branch("branch", self.branch)
        _check_object_id("base_commit", self.base_commit)
        _check_object_id("expected_head", self.expected_head)
        check_sha256("expected_status_sha256", self.expected_status_sha256)
        object.__setattr__(self, "owned_scopes", _scope_list("owned_scopes", self.owned_scopes, 1))
        object.__setattr__(self, "locked_scopes", _scope_list("locked_scopes", self.locked_scopes, 0))
        if len(self.protected_branches) > PROTECTED_MAX:
            raise InputError("protected_branches", f"give at most {PROTECTED_MAX} protected branches")
        for branch in self.protected_branches:
            _check_branch("protected_branches", branch)
        check_ref("purpose", self.purpose)
        check_ref("ticket_ref", self.ticket_ref)
        check_ref("authority_ref", self.authority_ref)
        check_sha256("authority_sha256", self.authority_sha256)


@dataclass(frozen=True)
class WriterReleaseInput:
    """Release lane ``name``: the agent settled at the cursor, git at the expected HEAD and status."""

    controller_id: str
    credential: Credential
    name: str
    expected_state_change_seq: int
    expected_head: str
    expected_status_sha256: str
    checkpoint_ref: str
    checkpoint_sha256: str
    lines: int = CAPTURE_LINES_DEFAULT
    blocked_reason: str | None = None
    """An operator's decision to release a lane whose agent is *blocked*, and why (recorded)."""
    lease_id: str | None = None
    """The lane instance id (``writer/…``) meant: the lane named ``name`` must be it (``lease_mismatch``)."""
    expected_content_sha256: str | None = None
    """The worktree's content digest (``corral preflight``'s ``content_sha256``) you reviewed; optional."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_name("name", self.name)
        _check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        _check_object_id("expected_head", self.expected_head)
        check_sha256("expected_status_sha256", self.expected_status_sha256)
        if self.expected_content_sha256 is not None:
            check_sha256("expected_content_sha256", self.expected_content_sha256)
        check_ref("checkpoint_ref", self.checkpoint_ref)
        check_sha256("checkpoint_sha256", self.checkpoint_sha256)
        _check_lines(self.lines)
        check_blocked_reason(self.blocked_reason)
        _check_instance_id("lease_id", self.lease_id)


@dataclass(frozen=True)
class WriterVerifyInput:
    """Run the repository's validations on a snapshot of lane ``name``'s worktree, in the sandbox."""

    controller_id: str
    credential: Credential
    name: str
    tails: bool = False
    expected_state_change_seq: int | None = None
    """The cursor the caller saw the writer settle at; verify refuses if it moved (default: any settled)."""
    lease_id: str | None = None
    """The lane instance id (``writer/…``) meant: the lane named ``name`` must be it (``lease_mismatch``)."""
    expected_content_sha256: str | None = None
    """Run only on exactly this worktree content (``corral preflight``'s ``content_sha256``); optional."""

    def __post_init__(self) -> None:
        check_controller_id(self.controller_id)
        check_credential(self.credential, self.controller_id)
        _check_name("name", self.name)
        if self.expected_state_change_seq is not None:
            _check_cursor("expected_state_change_seq", self.expected_state_change_seq)
        _check_instance_id("lease_id", self.lease_id)
        if self.expected_content_sha256 is not None:
            check_sha256("expected_content_sha256", self.expected_content_sha256)


@dataclass(frozen=True)
class ScopesCheckInput:
    """Normalize scopes and report conflicts with live lanes (of the worktree's repository, if given)."""

    owned_scopes: tuple[str, ...]
    locked_scopes: tuple[str, ...] = ()
    worktree: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "owned_scopes", _scope_list("owned_scopes", self.owned_scopes, 1))
        object.__setattr__(self, "locked_scopes", _scope_list("locked_scopes", self.locked_scopes, 0))
        if self.worktree is not None and not self.worktree.startswith("/"):
            raise InputError("worktree", f"{self.worktree!r} is not an absolute path")


@dataclass(frozen=True)
class VerifyResult:
    """A recorded validation; ``tails`` (output ends, when asked for) are in the reply only."""

    lease: AgentLeaseView
    verification: dict[str, Any]
    tails: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"lease": self.lease.to_dict(), "verification": self.verification, "tails": self.tails}

    @property
    def failed(self) -> list[str]:
        """The names of the validations that did not pass."""
        return [str(r["name"]) for r in self.verification["results"] if not r.get("passed")]

    def check(self) -> None:
        """Raise :class:`ValidationFailedError` (with this result) unless every validation passed: a
        failed validation must never read as success to a caller that only looks at the exit status."""
        if self.verification["passed"]:
            return
        raise ValidationFailedError(
            f"lane {self.lease.data.get('name')!r}: validation failed ({', '.join(self.failed)}); "
            "the result is recorded against the lane",
            lane=self.lease.id,
            failed=self.failed,
            result=self.to_dict(),
        )


class ValidationFailedError(RefusedError):
    """A lane's validations ran and at least one failed; the result *is* recorded against the lane.

    Raised by ``corral writer verify`` and a plan's ``writer.verify`` step (catchable with ``catch``)
    from :meth:`VerifyResult.check`; ``details["result"]`` holds the recorded result (and any tails).
    Fix the lane's work and verify again.
    """

    default_code = "validation_failed"


class WriterOps(AgentOps):
    """Writer lanes."""

    def _git(self, worktree: str, content: bool = False) -> dict[str, Any]:
        from runner.git import preflight

        return preflight.read(worktree, content).to_dict()

    def preflight(self, worktree: str) -> dict[str, Any]:
        """The facts a coordinator needs to fill ``expected_*``: branch, HEAD, status and content
        digests, linked."""
        if not isinstance(worktree, str) or not worktree.startswith("/"):
            raise InputError("worktree", f"{worktree!r} is not an absolute path")
        return self._git(worktree, content=True)

    def writer_start(self, inp: WriterStartInput) -> AgentLeaseView:
        """Start a lane. Refused with the git fact or scope that is wrong (``git_*``, ``scope_*``…)."""
        from runner.git import preflight

        options = self._agent_options(inp.kind, inp.model, inp.effort, inp.host)  # cheap: before git and the host
        facts = self._git(inp.worktree)
        try:
            facts["base_is_ancestor"] = preflight.is_ancestor(inp.worktree, inp.base_commit, facts["head"])
        except InputError:
            facts["base_is_ancestor"] = False  # git does not know the commit at all
        defaults = list(facts.get("protected_default") or ()) if inp.protect_defaults else []
        protected = sorted({*defaults, *inp.protected_branches})
        if not protected:
            raise InputError(
                "protected_branches",
                "the repository's default branch is unknown (no origin HEAD, no init.defaultBranch, no main "
                "or master): name the protected branches",
            )
        head = str(facts["head"])
        scope_links = preflight.scope_links(str(facts["realpath"]), head, [*inp.owned_scopes, *inp.locked_scopes])
        host = self.host(inp.host)
        in_worktree = [o.to_dict() for o in host.list() if o.cwd and inside(os.path.realpath(o.cwd), facts["realpath"])]
        result = self._fire_on(
            "writer",
            f"writer/{inp.lease_id or uuid.uuid4()}",
            "start",
            inp.credential,
            {
                "name": inp.name,
                "kind": inp.kind,
                "cwd": facts["realpath"],
                "host": inp.host,
                "options": options,
                "worktree": inp.worktree,
                "branch": inp.branch,
                "base_commit": inp.base_commit,
                "expected_head": inp.expected_head,
                "expected_status_sha256": inp.expected_status_sha256,
                "owned_scopes": list(inp.owned_scopes),
                "locked_scopes": list(inp.locked_scopes),
                "protected_branches": protected,
                "purpose": inp.purpose,
                "ticket_ref": inp.ticket_ref,
                "authority_ref": inp.authority_ref,
                "authority_sha256": inp.authority_sha256,
                **self._start_params(),
            },
            {
                "git": facts,
                "kinds": self.kinds.names(),
                "worktree_agents": in_worktree,
                "scope_links": scope_links,
                "cwd": {"given": inp.worktree, "real": facts["realpath"], "is_dir": True},
            },
            host=host,
        )
        view = self._settled(result, "agent_start_failed", "starting the agent")
        return view

    def writer_release(self, inp: WriterReleaseInput) -> CloseResult:
        """Checkpoint the lane and close its agent's pane; the worktree is left exactly as it is."""
        states = ("active", "release_failed")
        if inp.lease_id is not None:
            lease = self._lease_by_id(inp.controller_id, inp.name, inp.lease_id, states, "writer")
        else:
            lease = self._lease_by_name(inp.controller_id, inp.name, states, ("writer",))
        params = {
            "expected_state_change_seq": inp.expected_state_change_seq,
            "expected_head": inp.expected_head,
            "expected_status_sha256": inp.expected_status_sha256,
            "checkpoint_ref": inp.checkpoint_ref,
            "checkpoint_sha256": inp.checkpoint_sha256,
            "blocked_reason": inp.blocked_reason,
            "expected_content_sha256": inp.expected_content_sha256,
        }
        content = inp.expected_content_sha256 is not None  # read every file only when it is compared
        return self._close_lease(
            lease,
            "release",
            inp.credential,
            params,
            inp.lines,
            lambda: {"git": self._git(lease.data["cwd"], content)},
        )

    def writer_verify(self, inp: WriterVerifyInput, scratch: Path | None = None) -> VerifyResult:
        """Run the validations in the sandbox and record the result against the lane and its digest.

        Raises:
            SandboxUnavailableError: no Bubblewrap here (nothing runs unsandboxed).
            RefusedError: ``validation_invalidated`` when the fence changed during the run.
            ConflictError: ``git_status_changed`` when the worktree changed while it was copied.
        """
        from runner.sandbox.bwrap import Sandbox
        from runner.sandbox.validation import load_commands, snapshot

        if inp.lease_id is not None:
            lease = self._lease_by_id(inp.controller_id, inp.name, inp.lease_id, ("active",), "writer")
        else:
            lease = self._lease_by_name(inp.controller_id, inp.name, ("active",), ("writer",))
        self._check_fence(inp.credential)
        self._check_quiet(lease, inp.expected_state_change_seq)
        sandbox = Sandbox()
        sandbox.check()
        worktree = str(lease.data["cwd"])
        commands = load_commands(worktree, str(lease.data["base_commit"]))
        started = time.monotonic()
        content = inp.expected_content_sha256 is not None
        content_params = {"expected_content_sha256": inp.expected_content_sha256}
        before = self._git(worktree, content)
        if content:
            # Refused before anything runs, by the machine's own guard (git_content), judged as the
            # recording transition will judge it.
            self.engine.plan(
                self.library.builtin("writer"),
                self._request(lease.id, "verify", inp.credential, content_params, {"git": before}),
            )
        root = scratch or Path(tempfile.gettempdir()) / "corral-snapshots"
        with snapshot(worktree, root, sandbox) as (snap, home):
            after = self._git(worktree, content)
            if (before["head"], before["status_sha256"], before["content_sha256"]) != (
                after["head"],
                after["status_sha256"],
                after["content_sha256"],
            ):
                raise ConflictError(
                    "the worktree changed while it was being copied; verify again",
                    code="git_status_changed",
                    lane=lease.id,
                )
            # The copy can take a while: the fence is judged again immediately before anything runs.
            self._check_fence(inp.credential)
            results = sandbox.run_all(snap, home, commands, tail=inp.tails)
        verification = {
            "passed": all(r.passed for r in results),
            "head": before["head"],
            "status_sha256": before["status_sha256"],
            **({"content_sha256": before["content_sha256"]} if content else {}),
            "base_commit": lease.data["base_commit"],
            "fence_generation": inp.credential.generation,
            "duration_seconds": round(time.monotonic() - started, 3),
            "results": [r.to_record() for r in results],
        }
        try:
            result = self._fire_on(
                "writer",
                lease.id,
                "verify",
                inp.credential,
                {"verification": verification, **content_params},
                {"git": before},
            )
        except RefusedError as exc:
            if exc.code not in ("fence_stale", "lease_expired"):
                raise
            raise RefusedError(
                f"the controller's fence changed during the validation run ({exc.message}); the result was discarded",
                code="validation_invalidated",
                lane=lease.id,
                cause=exc.code,
            ) from None
        tails = {r.name: r.tail for r in results if r.tail is not None}
        return VerifyResult(self._lease_view(result.instance), verification, tails)

    def _check_quiet(self, lease: Instance, expected_seq: int | None) -> None:
        """A lane is verified only while its agent is settled (not mid-edit), at the cursor the caller saw."""
        observed = self._observe(self.host(lease.data["host"]), lease.data.get("pane_id"))
        if not same_identity(observed, lease.data):
            raise RefusedError(
                f"the agent of lane {lease.data.get('name')!r} is gone or is not the leased one; reconcile it",
                code="identity_changed",
                lane=lease.id,
            )
        if observed.get("status") not in SETTLED:
            raise RefusedError(
                f"the writer {lease.data.get('name')!r} is {observed.get('status')} at seq {observed.get('seq')}: "
                "verify a lane only while its agent is settled (wait for it, then verify at that cursor)",
                code="agent_not_settled",
                lane=lease.id,
                status=observed.get("status"),
                seq=observed.get("seq"),
            )
        if expected_seq is not None and observed.get("seq") != expected_seq:
            raise RefusedError(
                f"writer {lease.data.get('name')!r} is at seq {observed.get('seq')}, not the expected {expected_seq}",
                code="cursor_mismatch",
                lane=lease.id,
                expected_seq=expected_seq,
                observed_seq=observed.get("seq"),
            )

    def writers(self, controller_id: str | None = None, include_ended: bool = False) -> list[AgentLeaseView]:
        return self._leases("writer", None if include_ended else LANE_STATES, controller_id)

    def scopes_check(self, inp: ScopesCheckInput) -> dict[str, Any]:
        """Read-only: the normalized scopes, their own overlaps, and conflicts with live lanes."""
        facts = self._git(inp.worktree) if inp.worktree else None
        common_dir = facts["common_dir"] if facts else None
        links: list[dict[str, Any]] = []
        if facts is not None and inp.worktree is not None:
            from runner.git import preflight

            links = preflight.scope_links(inp.worktree, str(facts["head"]), [*inp.owned_scopes, *inp.locked_scopes])
        conflicts = []
        for lane in self.store.find("writer", LANE_STATES):
            if common_dir is not None and lane.data.get("common_dir") != common_dir:
                continue
            for kind, mine, theirs in (
                ("owned/owned", inp.owned_scopes, lane.data.get("owned_scopes") or ()),
                ("owned/locked", inp.owned_scopes, lane.data.get("locked_scopes") or ()),
                ("locked/owned", inp.locked_scopes, lane.data.get("owned_scopes") or ()),
            ):
                for a, b in scopes.conflicts(mine, theirs):
                    conflicts.append({"lane": lane.data.get("name"), "kind": kind, "scope": a, "theirs": b})
        own = [list(p) for p in scopes.conflicts(inp.owned_scopes, inp.locked_scopes)]
        return {
            "owned_scopes": list(inp.owned_scopes),
            "locked_scopes": list(inp.locked_scopes),
            "own_overlaps": own,
            "conflicts": conflicts,
            "symlinks": links,
            "ok": not own and not conflicts and not links,
        }
