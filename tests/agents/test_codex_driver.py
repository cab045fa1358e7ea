"""What the codex driver reads that is codex's own (codex-cli 0.171.0; the transcripts of
tests/agents/transcripts/ are the real CLI's): running usage totals, a resume that started another
thread, the sandbox's refusals, the writer's sandbox without /tmp. The contract every driver keeps
is tests/agents/test_driver_contract.py."""

from __future__ import annotations

import json
from pathlib import Path

from runner.agents.drivers import RunSpec, driver

TRANSCRIPTS = Path(__file__).parent / "transcripts"
CODEX = driver("codex")


def lines(case: str) -> list[str]:
    return (TRANSCRIPTS / f"codex-{case}.log").read_text().splitlines()


def test_a_runs_usage_is_the_difference_of_the_threads_running_totals() -> None:
    first = CODEX.parse(lines("success"), RunSpec(cwd="/w/tree"))
    assert first.usage == first.session_usage == {"input_tokens": 11, "output_tokens": 5, "cache_read_tokens": 3}
    spec = RunSpec(cwd="/w/tree", session_id=first.session_id, session_usage=first.session_usage)
    later = CODEX.parse(lines("resumed"), spec)
    assert later.session_usage == {"input_tokens": 22, "output_tokens": 10, "cache_read_tokens": 6}
    assert later.usage == first.usage
    # Totals below what was known are another conversation's: taken whole, never negative.
    spec = RunSpec(cwd="/w/tree", session_id=first.session_id, session_usage={"input_tokens": 500})
    assert CODEX.parse(lines("resumed"), spec).usage == later.session_usage


def test_a_resume_that_started_another_thread_is_a_lost_session() -> None:
    # `codex exec resume NAME` that names no thread starts a fresh one and says so only by its id.
    spec = RunSpec(cwd="/w/tree", session_id="review-thread")
    result = CODEX.parse(lines("success"), spec)
    assert result.session_lost is True and result.error is not None and "instead of resuming" in result.error
    assert result.session_id == "review-thread"  # the lease keeps its own; the fresh thread is not adopted


def test_the_agents_error_is_the_apis_message_not_its_body() -> None:
    failed = CODEX.parse(lines("failed"), RunSpec(cwd="/w/tree"))
    assert failed.error == "scripted failure"
    said = {"type": "turn.failed", "error": {"message": "stream disconnected before completion: gone"}}
    assert CODEX.parse([json.dumps(said)], RunSpec()).error == "stream disconnected before completion: gone"


def test_a_writers_sandbox_is_its_worktree_without_tmp_or_network() -> None:
    writer = CODEX.argv(["codex", "exec"], RunSpec(role="writer", cwd="/w/tree"))
    assert 'sandbox_mode="workspace-write"' in writer and 'approval_policy="never"' in writer
    for override in ("exclude_slash_tmp=true", "exclude_tmpdir_env_var=true", "network_access=false"):
        assert f"sandbox_workspace_write.{override}" in writer
    reviewer = CODEX.argv(["codex", "exec"], RunSpec(role="reviewer", cwd="/w/tree"))
    assert 'sandbox_mode="read-only"' in reviewer and not any("sandbox_workspace_write" in a for a in reviewer)
    resumed = CODEX.argv(["codex", "exec"], RunSpec(role="reviewer", session_id="T"))
    # codex exec resume takes no --sandbox: the -c overrides hold on every run.
    assert resumed[:4] == ["codex", "exec", "resume", "T"] and 'sandbox_mode="read-only"' in resumed
    assert resumed[-1] == "-"
