"""The handoff memory component (issue 18) on every store: the checkpoint rules, sessions that start
themselves, closing by project with 0, 1 and 2 open sessions, pins, retention recorded as counts in the
event log (never the text), auto_files against a real git repository, readiness that writes nothing,
and a controller release pointing at a memory checkpoint (and refused for a mismatching one)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.errors import CorralError, InvalidError, RefusedError
from runner.service import AcquireInput, ReleaseInput, Service
from runner.service.inputs.memory import (
    CheckpointInput,
    MemoryListInput,
    PinInput,
    ProjectInput,
    SearchInput,
    SessionCloseInput,
    ShowInput,
)
from runner.service.memory import Memory, MemoryLimits, canonical, content_sha256
from runner.store import Store
from runner.store.memory import memory_store
from tests.support.gitrepo import commit, git
from tests.support.specs import shared_library
from tests.support.stores import StoreKind, any_store, store_kind

__all__ = ["any_store", "store_kind"]  # the fixtures: every store kind

AUTHORITY = "a" * 64
SECRET = "the-text-that-must-never-reach-the-event-log"


@pytest.fixture
def service(any_store: Store, tmp_path: Path) -> Iterator[Service]:
    yield Service(any_store, shared_library(), actor="test")


def memory(service: Service, per_session: int = 500, total: int = 10_000) -> Memory:
    return Memory(service.core, MemoryLimits(per_session, total))


def cp(project: str | None = "p", **fields: Any) -> CheckpointInput:
    base: dict[str, Any] = {"agent": "agent-1", "summary": "did a thing", "project": project, "goal": "the goal"}
    if fields.get("session_id"):
        base.pop("project")
        base.pop("goal")
    if "next_steps" not in fields and fields.get("status") != "completed":
        base["next_steps"] = ("the next thing",)
    return CheckpointInput(**{**base, **fields})


def code_of(call: Any) -> str:
    with pytest.raises(CorralError) as caught:
        call()
    return caught.value.code


def events_text(store: Store) -> str:
    return json.dumps([e.to_dict() if hasattr(e, "to_dict") else e.__dict__ for e in store.iter_events()])


# --- the rules ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"status": "active", "next_steps": ()}, "memory_next_steps_required"),
        ({"status": "paused", "next_steps": ()}, "memory_next_steps_required"),
        ({"status": "completed", "next_steps": ("more",)}, "memory_completed_open"),
        ({"status": "completed", "blockers": ("the server is down",)}, "memory_completed_open"),
        ({"status": "blocked", "next_steps": ("wait",)}, "memory_blocker_required"),
        ({"work_done": ("TODO: write the docs",)}, "memory_work_not_done"),
        ({"work_done": ("will add tests",)}, "memory_work_not_done"),
        ({"work_done": ("the next thing",)}, "memory_work_not_done"),
        ({"blockers": ("the next thing",)}, "memory_blocker_not_external"),
    ],
)
def test_the_meanings_are_enforced(fields: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidError) as caught:
        cp(**fields)
    assert caught.value.code == code and caught.value.status.exit == 3 and caught.value.details["field"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"summary": " "}, "summary"),
        ({"project": None}, "session"),
        ({"session_id": "ses_0123456789abcdef", "project": "p"}, "session"),
        ({"project": "../x"}, "project"),
        ({"status": "done"}, "status"),
        ({"repository": "relative/path"}, "repository"),
        ({"subdir": "../up", "repository": "/r"}, "subdir"),
        ({"next_steps": ("x",) * 201}, "next_steps"),
    ],
)
def test_bad_input_names_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidError) as caught:
        CheckpointInput(**{"agent": "a", "summary": "s", "project": "p", "next_steps": ("n",), **fields})
    assert caught.value.code == "input_invalid" and caught.value.details["field"] == field


def test_valid_checkpoints_of_each_status(service: Service) -> None:
    m = memory(service)
    first = m.checkpoint(cp(work_done=("wrote the port",)))
    assert first["session_started"] and first["project_created"] and first["checkpoint"]["seq"] == 1
    sid = first["session_id"]
    paused = m.checkpoint(cp(session_id=sid, status="paused"))
    assert paused["session"]["status"] == "paused" and not paused["session_started"]
    blocked = m.checkpoint(cp(project="p", status="blocked", blockers=("CI is down",), next_steps=("rerun CI",)))
    assert blocked["session_id"] == sid, "a blocked session is still open: a checkpoint by project goes to it"
    done = m.checkpoint(cp(session_id=sid, status="completed", next_steps=()))
    assert done["session"]["status"] == "completed" and done["session"]["closed_at"]
    assert [c["seq"] for c in m.show(ShowInput(sid))["checkpoints"]] == [4, 3, 2, 1]
    # A checkpoint cannot be added to a completed session; by project, a new one starts.
    assert code_of(lambda: m.checkpoint(cp(session_id=sid))) == "memory_session_completed"
    again = m.checkpoint(cp())
    assert again["session_started"] and again["session_id"] != sid


def test_a_session_must_start_with_a_goal(service: Service) -> None:
    m = memory(service)
    assert code_of(lambda: m.checkpoint(cp(goal=None))) == "memory_goal_required"
    assert memory_store(service.store).info() and m.readiness(ProjectInput("p"))["project"] is None, "nothing written"


def test_unknown_session_and_checkpoint(service: Service) -> None:
    m = memory(service)
    assert code_of(lambda: m.checkpoint(cp(session_id="ses_0123456789abcdef"))) == "memory_session_unknown"
    assert code_of(lambda: m.pin(PinInput("cp_0123456789abcdef"))) == "memory_checkpoint_unknown"
    assert code_of(lambda: m.show(ShowInput("cp_0123456789abcdef"))) == "memory_checkpoint_unknown"


# --- session close by project ------------------------------------------------------------------------------


def test_session_close_by_project_with_0_1_and_2_open_sessions(service: Service) -> None:
    m = memory(service)
    m.bootstrap(ProjectInput("p"))
    assert code_of(lambda: m.close(SessionCloseInput("completed", project="p"))) == "memory_session_none"
    one = m.checkpoint(cp())["session_id"]
    two = m.checkpoint(cp(), new_session=True)["session_id"]
    assert one != two
    with pytest.raises(InvalidError) as caught:
        m.close(SessionCloseInput("completed", project="p"))
    assert caught.value.code == "memory_session_ambiguous" and set(caught.value.details["sessions"]) == {one, two}
    assert code_of(lambda: m.checkpoint(cp())) == "memory_session_ambiguous", "a checkpoint by project too"
    assert m.close(SessionCloseInput("completed", session_id=two))["session"]["status"] == "completed"
    closed = m.close(SessionCloseInput("completed", project="p"))
    assert closed["session"]["id"] == one and closed["session"]["status"] == "completed"
    assert code_of(lambda: m.close(SessionCloseInput("completed", session_id=one))) == "memory_session_closed"


def test_closing_blocked_needs_a_blocker_in_the_newest_checkpoint(service: Service) -> None:
    m = memory(service)
    sid = m.checkpoint(cp())["session_id"]
    assert code_of(lambda: m.close(SessionCloseInput("blocked", session_id=sid))) == "memory_blocker_required"
    m.checkpoint(cp(session_id=sid, status="blocked", blockers=("no access to the bucket",)))
    assert code_of(lambda: m.close(SessionCloseInput("completed", session_id=sid))) == "memory_completed_open"
    assert m.close(SessionCloseInput("blocked", session_id=sid))["session"]["status"] == "blocked"


def test_exactly_one_of_session_and_project_to_close() -> None:
    for fields in ({}, {"session_id": "ses_0123456789abcdef", "project": "p"}):
        with pytest.raises(InvalidError) as caught:
            SessionCloseInput("completed", **fields)
        assert caught.value.details["field"] == "session"


# --- pins, retention, the event log ------------------------------------------------------------------------


def test_pins_and_the_prune_policy_are_recorded_as_counts_only(service: Service) -> None:
    m = memory(service, per_session=2, total=3)
    first = m.checkpoint(cp(summary=SECRET, work_done=(SECRET,)))
    sid = first["session_id"]
    assert m.pin(PinInput(first["checkpoint_id"]))["changed"] is True
    assert m.pin(PinInput(first["checkpoint_id"]))["changed"] is False
    made = [m.checkpoint(cp(session_id=sid, summary=f"n{i} {SECRET}")) for i in range(4)]
    # Unpinned: n0..n3, the newest exempt; the window keeps 2 countable, so n0 went at the last write.
    assert made[-1]["pruned"] == {"session": 1, "total": 0}
    listed = [c["summary"][:2] for c in m.listing(MemoryListInput(session_id=sid, limit=10))["checkpoints"]]
    assert listed == ["n3", "n2", "n1", SECRET[:2]]
    assert m.show(ShowInput(first["checkpoint_id"]))["checkpoint"]["pinned"] is True
    events = list(service.store.iter_events())
    pruned = [e.payload["pruned"] for e in events if e.trigger == "memory_checkpoint"]
    assert pruned[-1] == {"session": 1, "total": 0} and sum(p["session"] for p in pruned) == 1
    assert {e.trigger for e in events} == {"memory_session_start", "memory_checkpoint", "memory_pin"}
    assert SECRET not in events_text(service.store), "checkpoint text never reaches the event log"
    checkpoint_event = next(e for e in events if e.trigger == "memory_checkpoint")
    assert set(checkpoint_event.payload) == {
        "checkpoint_id",
        "session_id",
        "project",
        "seq",
        "content_sha256",
        "pinned",
        "pruned",
    }


def test_closing_a_session_prunes_its_newest_once_it_counts(service: Service) -> None:
    m = memory(service, per_session=0, total=100)
    sid = m.checkpoint(cp())["session_id"]
    closed = m.close(SessionCloseInput("completed", session_id=sid))
    assert closed["pruned"] == {"session": 1, "total": 0}
    assert m.listing(MemoryListInput(session_id=sid))["checkpoints"] == []


def test_over_1000_pinned_warns(service: Service) -> None:
    m = memory(service)
    sid = m.checkpoint(cp(pinned=True))["session_id"]
    port = memory_store(service.store)
    with port.transaction() as tx:  # a thousand more pinned, written through the port in one go
        for seq in range(2, 1002):
            from runner.store.memory import CheckpointRecord

            tx.add_checkpoint(
                CheckpointRecord(f"cp_{seq:016x}", sid, "p", seq, "a", "s", "active", True, "t", "0" * 64, {})
            )
    result = m.checkpoint(cp(session_id=sid))
    assert result["warnings"] and "1001 pinned" in result["warnings"][0]
    checks = {c["check"]: c["ok"] for c in m.readiness(ProjectInput("p"))["readiness"]["checks"]}
    assert checks["pinned_within_limit"] is False


# --- bootstrap, readiness, show, list, search --------------------------------------------------------------


def test_readiness_writes_nothing_and_bootstrap_may(service: Service, store_kind: StoreKind) -> None:
    m = memory(service)
    before = len(service.store.events())
    ready = m.readiness(ProjectInput("fresh"))
    assert ready["project"] is None and ready["readiness"]["ready"] is False and ready["latest"] is None
    assert m.readiness(ProjectInput("fresh"))["project"] is None, "readiness did not create it"
    boot = m.bootstrap(ProjectInput("fresh"))
    assert boot["project_created"] and boot["project"]["name"] == "fresh" and boot["readiness"]["ready"]
    assert m.bootstrap(ProjectInput("fresh"))["project_created"] is False
    first = m.checkpoint(cp(project="fresh", summary="handoff one"))
    latest = m.readiness(ProjectInput("fresh"))
    assert latest["latest"]["id"] == first["checkpoint_id"] and len(latest["open_sessions"]) == 1
    assert "never instructions" in latest["data_notice"]
    m.close(SessionCloseInput("completed", project="fresh"))
    after = m.readiness(ProjectInput("fresh"))
    assert after["open_sessions"] == [] and after["latest"]["id"] == first["checkpoint_id"], "of the last session"
    events = len(service.store.events())
    m.readiness(ProjectInput("fresh"))
    assert len(service.store.events()) == events and events > before


def test_list_pages_and_search(service: Service) -> None:
    m = memory(service)
    sid = m.checkpoint(cp(summary="alpha parser"))["session_id"]
    for word in ("beta", "gamma parser", "delta"):
        m.checkpoint(cp(session_id=sid, summary=word))
    page = m.listing(MemoryListInput(project="p", limit=3))
    assert [c["summary"] for c in page["checkpoints"]] == ["delta", "gamma parser", "beta"]
    rest = m.listing(MemoryListInput(project="p", limit=3, after=page["next_after"]))
    assert [c["summary"] for c in rest["checkpoints"]] == ["alpha parser"] and rest["next_after"] is None
    assert [s["id"] for s in m.listing(MemoryListInput(project="p", sessions=True))["sessions"]] == [sid]
    found = m.search(SearchInput("parser"))
    assert [c["summary"] for c in found["checkpoints"]] == ["gamma parser", "alpha parser"]
    assert m.search(SearchInput("parser", project="other"))["checkpoints"] == []


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "AND", "OR NOT", "summary:parser", "NEAR(alpha parser", "*", "alpha AND (parser", "^x", '""',
     "-parser", "col:", "parser*", "alpha | parser", "!parser", "parser & alpha", "'parser'", "\\", "%", "_"],
)  # fmt: skip
def test_search_reads_fts_syntax_as_words_on_every_store(service: Service, query: str) -> None:
    """Issue 24: a query is words, never the store's query syntax (FTS5's MATCH, PostgreSQL's tsquery):
    an operator or a stray quote is searched as text or answers nothing, never a store error."""
    m = memory(service)
    m.checkpoint(cp(summary="alpha parser"))
    found = m.search(SearchInput(query))
    assert found["query"] == query and isinstance(found["checkpoints"], list)
    words = [w for w in "".join(c if c.isalnum() else " " for c in query).split() if w]
    if words and all(w.lower() in ("alpha", "parser") for w in words):
        assert [c["summary"] for c in found["checkpoints"]] == ["alpha parser"], "the words are still found"
    elif words:
        assert found["checkpoints"] == [], "words the checkpoint lacks find nothing"


# --- auto_files against a real git repository ---------------------------------------------------------------


@pytest.mark.usefixtures("hermetic_git")
def test_auto_files_are_what_git_shows_changed_under_the_project_directory(service: Service, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "base", {"app/a.py": "a\n", "app/old.py": "o\n", "docs/d.md": "d\n", ".gitignore": "*.log\n"})
    (repo / "app" / "a.py").write_text("changed\n")
    (repo / "app" / "new file.py").write_text("new\n")
    (repo / "app" / "ignored.log").write_text("ignored\n")
    (repo / "docs" / "d.md").write_text("outside the project's directory\n")
    git(repo, "mv", "app/old.py", "app/renamed.py")
    m = memory(service)
    result = m.checkpoint(cp(project="app", repository=str(repo), subdir="app", auto_files=True, files=("notes.txt",)))
    assert result["checkpoint"]["files"] == ["notes.txt", "app/a.py", "app/new file.py", "app/renamed.py"]
    # A linked worktree of the same repository is the same project; another repository is not.
    git(repo, "commit", "-qam", "wip")
    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "lane", str(lane))
    (lane / "app" / "lane.py").write_text("x\n")
    again = m.checkpoint(cp(project="app", repository=str(lane), auto_files=True))
    assert again["checkpoint"]["files"] == ["app/lane.py"]
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    assert code_of(lambda: m.checkpoint(cp(project="app", repository=str(other)))) == "memory_project_conflict"
    assert code_of(lambda: m.checkpoint(cp(project="plain", auto_files=True))) == "memory_no_repository"


# --- ties: a controller release pointing at a memory checkpoint ---------------------------------------------


def test_controller_release_with_a_memory_checkpoint_and_a_mismatching_one(service: Service) -> None:
    m = service.memory
    grant = service.controller.acquire(AcquireInput("proj", "T-1", AUTHORITY, 900, "t@h"))
    mine = m.checkpoint(cp(project="proj"))
    theirs = m.checkpoint(cp(project="elsewhere"))
    with pytest.raises(RefusedError) as caught:
        service.controller.release(ReleaseInput("proj", grant.credential, theirs["ref"], None))
    assert caught.value.code == "memory_project_mismatch"
    with pytest.raises(RefusedError) as caught:
        service.controller.release(ReleaseInput("proj", grant.credential, mine["ref"], "f" * 64))
    assert caught.value.code == "memory_digest_mismatch"
    assert service.controller.controller_lease("proj").state == "active", "refusals released nothing"  # type: ignore[union-attr]
    lease = service.controller.release(ReleaseInput("proj", grant.credential, mine["ref"], None))
    assert lease.state == "released"
    assert (lease.data["checkpoint_ref"], lease.data["checkpoint_sha256"]) == (mine["ref"], mine["content_sha256"])
    view = m.show(ShowInput(mine["checkpoint_id"]))["checkpoint"]
    assert content_sha256({k: view[k] for k in canonical_keys()}) == mine["content_sha256"]


def canonical_keys() -> list[str]:
    from runner.store.memory import CheckpointRecord

    return list(canonical(CheckpointRecord("cp_0", "s", "p", 1, "a", "s", "active", False, "t", "", {})))


def test_a_tampered_checkpoint_is_refused_at_release(service: Service, store_kind: StoreKind) -> None:
    m = service.memory
    grant = service.controller.acquire(AcquireInput("proj", "T-1", AUTHORITY, 900, "t@h"))
    mine = m.checkpoint(cp(project="proj"))
    with memory_store(service.store).transaction() as tx:
        conn = tx.store_tx._conn  # type: ignore[attr-defined]  # reason: damage the row as raw SQL would
        conn.execute("UPDATE memory_checkpoints SET summary = 'rewritten' WHERE id = " + repr(mine["checkpoint_id"]))
    with pytest.raises(RefusedError) as caught:
        service.controller.release(ReleaseInput("proj", grant.credential, mine["ref"], None))
    assert caught.value.code == "memory_digest_mismatch"
    assert caught.value.details["content_sha256"] != mine["content_sha256"]


def test_a_plain_ref_still_needs_its_digest_and_a_memory_ref_a_checkpoint_id(service: Service) -> None:
    grant = service.controller.acquire(AcquireInput("proj", "T-1", AUTHORITY, 900, "t@h"))
    with pytest.raises(InvalidError) as caught:
        ReleaseInput("proj", grant.credential, "checkpoint/plain", None)
    assert caught.value.details["field"] == "checkpoint_sha256"
    bad = ReleaseInput("proj", grant.credential, "memory:nope", None)  # the service fills or refuses it
    assert code_of(lambda: service.controller.release(bad)) == "input_invalid"
    missing = ReleaseInput("proj", grant.credential, "memory:cp_0123456789abcdef", None)
    assert code_of(lambda: service.controller.release(missing)) == "memory_checkpoint_unknown"


def test_checkpoint_digest_is_of_its_canonical_content(service: Service) -> None:
    result = memory(service).checkpoint(cp())
    view = result["checkpoint"]
    assert content_sha256({k: view[k] for k in canonical_keys()}) == result["content_sha256"] == view["content_sha256"]
    assert view["ref"] == "memory:" + result["checkpoint_id"]


# --- ties: a writer lane's release on every store ------------------------------------------------------------


@pytest.mark.usefixtures("hermetic_git")
def test_writer_release_with_a_memory_checkpoint_on_every_store(any_store: Store, tmp_path: Path) -> None:
    """The lane's release points at a checkpoint of the project whose repository is the lane's; another
    repository's checkpoint and a wrong digest are refused, and nothing is released meanwhile."""
    from runner.agents.kinds import Kinds
    from runner.agents.process import ProcessHost
    from runner.service import WriterReleaseInput
    from tests.service.test_writers import make_repo
    from tests.support.gitrepo import head_of, status_digest

    kinds = Kinds.load([])
    host = ProcessHost(any_store, tmp_path / "agents", kinds)
    service = Service(any_store, shared_library(), actor="test", hosts=lambda name: host, kinds=kinds)
    credential = service.controller.acquire(AcquireInput("ctl", "T-7", AUTHORITY, 900, "t@h")).credential
    repo = make_repo(tmp_path / "repo")
    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "lane", str(lane))
    from runner.service import WriterStartInput

    service.writers.start(
        WriterStartInput(
            "ctl", credential, name="alpha", kind="script", worktree=str(lane), branch="lane",
            base_commit=git(repo, "rev-parse", "HEAD~1"), expected_head=head_of(lane),
            expected_status_sha256=status_digest(lane), owned_scopes=("src",), purpose="p", ticket_ref="T-7",
            authority_ref="plan.md", authority_sha256=AUTHORITY,
        )
    )  # fmt: skip
    mine = service.memory.checkpoint(cp(project="app", repository=str(lane), auto_files=True))
    other = make_repo(tmp_path / "other")
    theirs = service.memory.checkpoint(cp(project="other", repository=str(other)))

    def release(ref: str, digest: str | None) -> Any:
        inp = WriterReleaseInput(
            "ctl", credential, "alpha", 0, head_of(lane), status_digest(lane), ref, digest, 20
        )  # fmt: skip
        return service.writers.release(inp)

    for ref, digest, code in (
        (theirs["ref"], None, "memory_project_mismatch"),
        (mine["ref"], "e" * 64, "memory_digest_mismatch"),
    ):
        with pytest.raises(RefusedError) as caught:
            release(ref, digest)
        assert caught.value.code == code
    (found,) = service.writers()
    assert found.state == "active"
    done = release(mine["ref"], mine["content_sha256"])
    assert done.lease.state == "released"
    assert (done.lease.data["checkpoint_ref"], done.lease.data["checkpoint_sha256"]) == (
        mine["ref"],
        mine["content_sha256"],
    )


# --- a caller's idempotency key (a plan step's) ------------------------------------------------------------


def test_a_checkpoint_written_again_under_its_origin_is_the_first_one_replayed(service: Service) -> None:
    """A plan step run again after a crash (or an attempt whose commit's answer was lost) passes the same
    origin: the second call writes nothing, no event, and answers with the first checkpoint."""
    m = memory(service)
    first = m.checkpoint(cp(summary="the handoff"), origin="corral-plan:p-1/handoff")
    events = len(list(service.core.store.iter_events()))
    again = m.checkpoint(cp(summary="a different text the second time"), origin="corral-plan:p-1/handoff")
    assert first["replayed"] is False and again["replayed"] is True
    assert (again["checkpoint_id"], again["session_id"], again["ref"], again["content_sha256"]) == (
        first["checkpoint_id"],
        first["session_id"],
        first["ref"],
        first["content_sha256"],
    )
    assert again["checkpoint"]["summary"] == "the handoff" and again["session_started"] is False
    assert len(list(service.core.store.iter_events())) == events, "a replay writes no event"
    with memory_store(service.core.store).snapshot() as reader:
        assert reader.count(project="p") == 1
    other = m.checkpoint(cp(summary="another step's"), origin="corral-plan:p-1/other")
    assert other["replayed"] is False and other["checkpoint_id"] != first["checkpoint_id"]
    plain = m.checkpoint(cp(summary="no origin"))
    assert plain["replayed"] is False and plain["checkpoint_id"] not in (first["checkpoint_id"], other["checkpoint_id"])
