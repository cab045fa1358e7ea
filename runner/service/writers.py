"""Writer lanes: start an agent in a linked worktree owning path scopes, verify, release.

Git facts are read by the runner itself (``runner.git.preflight``) just before every transition and
handed to the writer machine's guards as the ``git`` observation; the caller's expectations (HEAD,
status digest, branch, base) are params the guards compare against. Release records a checkpoint and
closes the agent's pane; nothing here ever commits, stashes, resets, cleans or deletes in a worktree.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import scopes
from runner.agents.abc import SETTLED
from runner.context import Instance
from runner.errors import ConflictError, InputError, RefusedError
from runner.guards.agents import same_identity
from runner.guards.git import LANE_STATES, inside, scope_conflicting
from runner.service.checks import budget_options, check_controller_id
from runner.service.core import Core
from runner.service.inputs.base import check_page
from runner.service.inputs.writers import (
    ScopesCheckInput,
    WriterAuditInput,
    WriterReleaseInput,
    WriterStartInput,
    WriterVerifyInput,
)
from runner.service.views.leases import AgentLeaseView, CloseResult
from runner.service.views.pages import Page
from runner.service.views.writers import ValidationFailedError, VerifyResult

if TYPE_CHECKING:
    from runner.git.audit import Audit

__all__ = ["ValidationFailedError", "VerifyResult", "Writers"]


def hooks_of(lane_id: str) -> Path:
    """Where the scope hook of lane ``lane_id`` lives: under the state home, private."""
    from runner.home import Home

    return Home.locate().root / "hooks" / lane_id.replace("/", "-")


def remove_scope_hook(lease: Instance) -> None:
    """The scope hook of a lane on a host that cannot confine goes with the lane (released or reconciled)."""
    directory = hooks_of(lease.id)
    if directory.is_dir():
        from runner.git import hook

        hook.remove(str(lease.data["cwd"]), directory)


class Writers:
    """Writer lanes."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def __call__(
        self,
        controller_id: str | None = None,
        include_ended: bool = False,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> Page[AgentLeaseView]:
        """``service.writers(...)``: :meth:`leases` (the listing's spelling before writers were a component)."""
        return self.leases(controller_id, include_ended, after=after, limit=limit)

    def _git(self, worktree: str, content: bool = False) -> dict[str, Any]:
        from runner.git import preflight

        return preflight.read(worktree, content).to_dict()

    def preflight(self, worktree: str) -> dict[str, Any]:
        """The facts a coordinator needs to fill ``expected_*``: branch, HEAD, status and content
        digests, linked."""
        if not isinstance(worktree, str) or not worktree.startswith("/"):
            raise InputError("worktree", f"{worktree!r} is not an absolute path")
        return self._git(worktree, content=True)

    def start(self, inp: WriterStartInput) -> AgentLeaseView:
        """Start a lane. Refused with the git fact or scope that is wrong (``git_*``, ``scope_*``…)."""
        from runner.git import preflight

        options = self.core.agent_options(  # cheap: before git and the host
            inp.kind,
            inp.model,
            inp.effort,
            inp.host,
            role="writer",
            limits=budget_options(inp.budget_usd, inp.budget_tokens, inp.max_turns),
            owned=tuple(inp.owned_scopes),
            locked=tuple(inp.locked_scopes),
            unconfined_reason=inp.unconfined_reason,
        )
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
        host = self.core.host(inp.host)
        in_worktree = [o.to_dict() for o in host.list() if o.cwd and inside(os.path.realpath(o.cwd), facts["realpath"])]
        lane_id = f"writer/{inp.lease_id or uuid.uuid4()}"
        installed = self._install_hook(host, lane_id, str(facts["realpath"]), inp)
        try:
            return self._start(inp, lane_id, facts, options, protected, scope_links, in_worktree, host)
        except BaseException:
            if installed is not None:  # a hook this call installed, for a lane that did not start
                from runner.git import hook

                hook.remove(str(facts["realpath"]), installed)
            raise

    def _install_hook(self, host: Any, lane_id: str, realpath: str, inp: WriterStartInput) -> Path | None:
        """On a host that cannot confine writes, the scope hook (:mod:`runner.git.hook`); the directory
        when this call installed it (None when the host confines, or the lane's hook exists already)."""
        if getattr(host, "confines_writes", True):
            return None
        from runner.git import hook
        from runner.home import Home

        directory = hooks_of(lane_id)
        if directory.exists():
            return None  # a repeated start of the same lane: its hook is its own
        Home.locate().ensure("hooks", directory.name)
        hook.install(realpath, directory, inp.owned_scopes, inp.locked_scopes)
        return directory

    def _start(
        self,
        inp: WriterStartInput,
        lane_id: str,
        facts: dict[str, Any],
        options: Any,
        protected: list[str],
        scope_links: list[dict[str, Any]],
        in_worktree: list[dict[str, Any]],
        host: Any,
    ) -> AgentLeaseView:
        with self.core.starting() as starting:
            result = self.core.fire_on(
                "writer",
                lane_id,
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
                    **starting,
                },
                {
                    "git": facts,
                    "kinds": self.core.kinds.names(),
                    "worktree_agents": in_worktree,
                    "scope_links": scope_links,
                    "cwd": {"given": inp.worktree, "real": facts["realpath"], "is_dir": True},
                },
                host=host,
            )
        view = self.core.settled(result, "agent_start_failed", "starting the agent")
        return view

    def release(self, inp: WriterReleaseInput) -> CloseResult:
        """Checkpoint the lane and close its agent's pane; the worktree is left exactly as it is."""
        states = ("active", "release_failed")
        if inp.lease_id is not None:
            lease = self.core.lease_by_id(inp.controller_id, inp.name, inp.lease_id, states, "writer")
        else:
            lease = self.core.lease_by_name(inp.controller_id, inp.name, states, ("writer",))
        checkpoint_ref, checkpoint_sha256 = inp.checkpoint_ref, inp.checkpoint_sha256
        if checkpoint_ref.startswith("memory:"):
            # A handoff checkpoint of this lane's repository, its digest from its content.
            from runner.service.memory import Memory

            checkpoint_ref, checkpoint_sha256 = Memory(self.core).resolve_ref(
                checkpoint_ref, checkpoint_sha256, common_dir=str(lease.data.get("common_dir") or "")
            )
        params = {
            "expected_state_change_seq": inp.expected_state_change_seq,
            "expected_head": inp.expected_head,
            "expected_status_sha256": inp.expected_status_sha256,
            "checkpoint_ref": checkpoint_ref,
            "checkpoint_sha256": checkpoint_sha256,
            "blocked_reason": inp.blocked_reason,
            "expected_content_sha256": inp.expected_content_sha256,
            "accept_violation": inp.accept_violation,
            "violation_reason": inp.violation_reason,
        }
        content = inp.expected_content_sha256 is not None  # read every file only when it is compared
        closed = self.core.close_lease(
            lease,
            "release",
            inp.credential,
            params,
            inp.lines,
            # The audit is read in the same moment as the git facts the guards judge (after the capture).
            lambda: {"git": self._git(lease.data["cwd"], content), "audit": self._audit_evidence(lease)},
        )
        remove_scope_hook(lease)
        return closed

    def _audit_evidence(self, lease: Instance) -> dict[str, Any]:
        """The audit as the ``scopes_respected`` guard reads it: the verdict, counts and the first
        violations (bounded: observations travel with the transition)."""
        from runner.guards.git import VIOLATIONS_SHOWN

        document = self._audit_of(lease).to_dict(limit=VIOLATIONS_SHOWN)
        del document["changes"], document["ignored"]
        return document

    def _audit_of(self, lease: Instance) -> Audit:
        from runner.git.audit import audit

        data = lease.data
        # From the HEAD git read when the lane was admitted (it descends from base_commit): commits
        # between base_commit and it predate the lane and are not its writes.
        return audit(
            str(data["cwd"]),
            str(data.get("start_head") or data["base_commit"]),
            list(data.get("owned_scopes") or ()),
            list(data.get("locked_scopes") or ()),
        )

    def audit(self, inp: WriterAuditInput) -> dict[str, Any]:
        """Read-only: every change of a live lane's worktree since its base commit, judged against its
        owned and locked scopes (:func:`runner.git.audit.audit`)."""
        check_controller_id(inp.controller_id)
        lane = self.core.lease_by_name(inp.controller_id, inp.name, LANE_STATES, ("writer",))
        return {"lane": lane.id, "name": inp.name, "state": lane.state, **self._audit_of(lane).to_dict(limit=inp.limit)}

    def verify(self, inp: WriterVerifyInput, scratch: Path | None = None) -> VerifyResult:
        """Run the validations in the sandbox and record the result against the lane and its digest.

        Raises:
            SandboxUnavailableError: no Bubblewrap here (nothing runs unsandboxed).
            RefusedError: ``validation_invalidated`` when the fence changed during the run.
            ConflictError: ``git_status_changed`` when the worktree changed while it was copied.
            RefusedError: ``bootstrap_lock_invalid`` / ``bootstrap_lock_mismatch`` when a bootstrap lock
                is not a regular file or differs from the base commit's (nothing ran).
        """
        from runner.sandbox import bootstrap
        from runner.sandbox.bwrap import Sandbox
        from runner.sandbox.validation import load, snapshot

        if inp.lease_id is not None:
            lease = self.core.lease_by_id(inp.controller_id, inp.name, inp.lease_id, ("active",), "writer")
        else:
            lease = self.core.lease_by_name(inp.controller_id, inp.name, ("active",), ("writer",))
        self.core.check_fence(inp.credential)
        self._check_quiet(lease, inp.expected_state_change_seq)
        sandbox = Sandbox()
        sandbox.check()
        worktree = str(lease.data["cwd"])
        commands, steps = load(worktree, str(lease.data["base_commit"]))
        started = time.monotonic()
        content = inp.expected_content_sha256 is not None
        content_params = {"expected_content_sha256": inp.expected_content_sha256}
        before = self._git(worktree, content)
        if content:
            # Refused before anything runs, by the machine's own guard (git_content), judged as the
            # recording transition will judge it.
            self.core.engine.plan(
                self.core.library.builtin("writer"),
                self.core.request(lease.id, "verify", inp.credential, content_params, {"git": before}),
            )
        import tempfile  # (cold start: tempfile imports shutil, bz2 and lzma)

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
            self.core.check_fence(inp.credential)
            booted: list[bootstrap.StepResult] = []
            if steps:
                # Locks are judged on the snapshot, the very bytes the stage installs from.
                booted, prepared = bootstrap.run(
                    worktree, str(lease.data["base_commit"]), snap, home, steps, sandbox, tail=inp.tails
                )
                commands = [prepared.gate(c) for c in commands]
            # The gate runs only on a complete bootstrap (its results would say nothing otherwise).
            ready = all(b.passed for b in booted)
            results = sandbox.run_all(snap, home, commands, tail=inp.tails) if ready else []
        verification = {
            "passed": ready and all(r.passed for r in results),
            "head": before["head"],
            "status_sha256": before["status_sha256"],
            **({"content_sha256": before["content_sha256"]} if content else {}),
            "base_commit": lease.data["base_commit"],
            "fence_generation": inp.credential.generation,
            "duration_seconds": round(time.monotonic() - started, 3),
            "results": [r.to_record() for r in results],
            **({"bootstrap": [b.to_record() for b in booted]} if steps else {}),
        }
        try:
            result = self.core.fire_on(
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
        tails = {r.name: r.tail for r in [*(b.result for b in booted), *results] if r.tail is not None}
        return VerifyResult(self.core.lease_view(result.instance), verification, tails)

    def _check_quiet(self, lease: Instance, expected_seq: int | None) -> None:
        """A lane is verified only while its agent is settled (not mid-edit), at the cursor the caller saw."""
        observed = self.core.observe(self.core.host(lease.data["host"]), lease.data.get("pane_id"))
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

    def leases(
        self,
        controller_id: str | None = None,
        include_ended: bool = False,
        *,
        after: str | None = None,
        limit: int | None = None,
    ) -> Page[AgentLeaseView]:
        """Writer lanes, live ones only unless ``include_ended``; a page of at most ``limit`` after the
        lane instance id ``after`` (validated as a listing input's, :func:`~runner.service.inputs.check_page`)."""
        check_page(after, limit)
        if controller_id is not None:
            check_controller_id(controller_id)
        states = None if include_ended else LANE_STATES
        return self.core.leases("writer", states, controller_id, after=after, limit=limit)

    def scopes_check(self, inp: ScopesCheckInput) -> dict[str, Any]:
        """Read-only: the normalized scopes, their own overlaps, and conflicts with live lanes."""
        facts = self._git(inp.worktree) if inp.worktree else None
        common_dir = facts["common_dir"] if facts else None
        links: list[dict[str, Any]] = []
        if facts is not None and inp.worktree is not None:
            from runner.git import preflight

            links = preflight.scope_links(inp.worktree, str(facts["head"]), [*inp.owned_scopes, *inp.locked_scopes])
        conflicts = []
        # The claim index names the lanes whose scopes overlap (of the worktree's repository, or of
        # every repository); only those are read.
        with self.core.store.read() as reader:
            ids = scope_conflicting(reader, common_dir, inp.owned_scopes, inp.locked_scopes)
            lanes = [lane for lane in map(reader.get, sorted(ids)) if lane is not None and lane.machine == "writer"]
        for lane in lanes:
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
