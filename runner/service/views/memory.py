"""The handoff memory's views: a checkpoint's canonical content and its digest, and the documents
of a checkpoint, a session and a project as every surface shows them (``--json``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from runner.store.memory import CheckpointRecord, ProjectRecord, SessionRecord

REF_PREFIX = "memory:"
"""A checkpoint's reference (``memory:<id>``): what a release takes as its checkpoint."""
BODY_FIELDS = ("work_done", "current_state", "next_steps", "blockers", "files", "commands", "verify")


def canonical(checkpoint: CheckpointRecord) -> dict[str, Any]:
    """A checkpoint's content: everything it says, without what may change later (``pinned``)."""
    return {
        "id": checkpoint.id,
        "project": checkpoint.project,
        "session_id": checkpoint.session_id,
        "seq": checkpoint.seq,
        "agent": checkpoint.agent,
        "summary": checkpoint.summary,
        "status": checkpoint.status,
        "created_at": checkpoint.created_at,
        **{name: checkpoint.body.get(name) for name in BODY_FIELDS},
    }


def content_sha256(content: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of a checkpoint's content."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def checkpoint_view(checkpoint: CheckpointRecord) -> dict[str, Any]:
    """A checkpoint as every surface shows it (``--json``): its content, ``pinned``, its ``ref``."""
    return {
        **canonical(checkpoint),
        "pinned": checkpoint.pinned,
        "content_sha256": checkpoint.content_sha256,
        "ref": REF_PREFIX + checkpoint.id,
    }


def session_view(session: SessionRecord) -> dict[str, Any]:
    return {
        "id": session.id,
        "project": session.project,
        "goal": session.goal,
        "agent": session.agent,
        "status": session.status,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "closed_at": session.closed_at,
        "checkpoints": session.last_seq,
    }


def project_view(project: ProjectRecord) -> dict[str, Any]:
    return {
        "name": project.name,
        "repository": project.repository,
        "subdir": project.subdir,
        "created_at": project.created_at,
    }
