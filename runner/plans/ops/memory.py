"""``memory.checkpoint``: a handoff checkpoint written by a plan (issue 18), for its release to point at.

An empty ``project`` names the project after the repository: the directory holding the git common
directory of ``repository`` (``/src/app/.git`` → ``app``), so lanes of different repositories go to
projects of their own by default.

Not safe to retry: a second run writes a second checkpoint (a plan resumed after a crash in this
step may leave two handoffs of one lane; both are honest records, the release points at the newer).
"""

from __future__ import annotations

import os
import re
from typing import Any

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
    from runner.service.inputs.memory import CheckpointInput

    result = ctx.service.memory.checkpoint(
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
        )
    )
    return Outputs(
        {
            "checkpoint_id": result["checkpoint_id"],
            "session_id": result["session_id"],
            "session_started": result["session_started"],
            "ref": result["ref"],
            "sha256": result["content_sha256"],
        }
    )
