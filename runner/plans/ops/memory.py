"""``memory.checkpoint``: a handoff checkpoint written by a plan, for its release to point at.

An empty ``project`` names the project after the repository: the directory holding the git common
directory of ``repository`` (``/src/app/.git`` → ``app``), so lanes of different repositories go to
projects of their own by default.

Safe to run again: the checkpoint is written with the plan's id and the step's as its ``origin``, so a
plan resumed after a crash in this step (or a retried attempt whose commit's answer was lost) gets the
checkpoint the first run wrote, never a second one.

``fallback_ref`` and ``fallback_sha256`` (both or neither): when the checkpoint cannot be written (a
rule refuses it, the project is another repository's, ...), the step still succeeds with
``written: false``, the refusal in ``error`` and these as its ``ref`` and ``sha256``, so the release
that points at the handoff still runs (a lane is never left held because its handoff failed). Without
them a refusal fails the step.
"""

from __future__ import annotations

import os
import re
from typing import Any

from runner.errors import InputError, InvalidError, RefusedError
from runner.plans.ops.base import operation
from runner.service.steps import OpContext, Outputs


def _texts(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    return tuple(str(item) for item in value if str(item).strip())


def _text(value: Any) -> str | None:
    return None if value is None or not str(value).strip() else str(value)


def project_of(project: Any, repository: str | None) -> str:
    """The step's project: as given, or (empty) named after the repository (see the module docstring)."""
    if project is not None and str(project).strip():
        return str(project)
    name = ""
    if repository is not None:
        from runner.git import preflight

        common = preflight.common_dir(repository)
        name = os.path.basename(os.path.dirname(common) if os.path.basename(common) == ".git" else common)
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", name.removesuffix(".git")).lstrip("-._")[:100]
    return name or "lanes"


@operation("memory.checkpoint")
async def memory_checkpoint(ctx: OpContext, args: dict[str, Any]) -> Outputs:
    fallback_ref, fallback_sha256 = _text(args.get("fallback_ref")), _text(args.get("fallback_sha256"))
    if (fallback_ref is None) != (fallback_sha256 is None):
        raise InputError("fallback_ref", "fallback_ref and fallback_sha256 go together: give both or neither")
    try:
        result = _write(ctx, args)
    except (InvalidError, RefusedError) as exc:  # what a rule or a guard refuses; conflicts still fail it
        if fallback_ref is None:
            raise
        return Outputs(
            {
                "written": False,
                "error": {"code": exc.code, "message": exc.message},
                "ref": fallback_ref,
                "sha256": fallback_sha256,
            }
        )
    return Outputs(
        {
            "written": True,
            "replayed": result["replayed"],
            "checkpoint_id": result["checkpoint_id"],
            "session_id": result["session_id"],
            "session_started": result["session_started"],
            "ref": result["ref"],
            "sha256": result["content_sha256"],
        }
    )


def _write(ctx: OpContext, args: dict[str, Any]) -> dict[str, Any]:
    from runner.service.inputs.memory import CheckpointInput

    return ctx.service.memory.checkpoint(
        CheckpointInput(
            str(args["agent"]),
            str(args["summary"]),
            project=project_of(args.get("project"), _text(args.get("repository"))),
            goal=_text(args.get("goal")),
            work_done=_texts(args.get("work_done")),
            current_state=_text(args.get("current_state")),
            next_steps=_texts(args.get("next_steps")),
            blockers=_texts(args.get("blockers")),
            files=_texts(args.get("files")),
            commands=_texts(args.get("commands")),
            verify=_text(args.get("verify")),
            status=str(args.get("status") or "active"),
            auto_files=bool(args.get("auto_files")),
            repository=_text(args.get("repository")),
            subdir=_text(args.get("subdir")),
        ),
        # One key per step, not per attempt: an attempt whose commit's answer was lost (and then retried)
        # wrote the checkpoint the next attempt must find.
        origin=f"corral-plan:{ctx.plan_id}/{ctx.step_id}",
    )
