"""The scope audit at the writer lanes' surface: ``writer audit``, and a release refused
(``scope_violation``) when the lane changed paths outside its owned scopes or inside its locked ones,
unless an operator accepts the violations with a reason (recorded with the lane and in the event log)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.errors import STATUS, InputError, RefusedError
from runner.service import WriterAuditInput
from tests.service.test_writers import Lab, lab, refused
from tests.support.gitrepo import commit, head_of, status_digest

__all__ = ["lab"]  # the fixture, re-used

pytestmark = pytest.mark.usefixtures("hermetic_git")


def audit_of(lab: Lab, name: str = "alpha") -> dict[str, Any]:
    return lab.service.writers.audit(WriterAuditInput("ctl", name))


def started(lab: Lab) -> Path:
    """A lane whose agent is not confined (the case the audit is the only check for: an agent on a host
    that cannot confine, or started --unconfined), so that its writes outside its scopes land."""
    wt = lab.worktree("wt-feat")
    lab.start(
        "alpha", wt, owned_scopes=("src",), locked_scopes=("docs",), unconfined=True,
        unconfined_reason="the audit's own tests: writes outside the scopes must land",
    )  # fmt: skip
    return wt


def test_a_clean_lane_audits_clean_and_releases(lab: Lab) -> None:
    wt = started(lab)
    lab.ask("alpha", "write src/x.py print('x')")
    report = audit_of(lab)
    assert report["clean"] is True and report["name"] == "alpha" and report["state"] == "active"
    assert [(c["path"], c["kind"], c["scope"]) for c in report["changes"]] == [("src/x.py", "added", "owned")]
    assert report["base_commit"] == head_of(wt), "audited from the HEAD the lane started at"
    lane = lab.release("alpha", 2, wt).lease
    assert lane.state == "released"
    assert lane.data["scope_audit"]["clean"] is True and "violation_acceptance" not in lane.data


def test_a_write_outside_the_owned_scopes_refuses_the_release(lab: Lab) -> None:
    wt = started(lab)
    lab.ask("alpha", "write README.md changed")
    report = audit_of(lab)
    assert report["clean"] is False
    assert [(v["path"], v["kind"], v["scope"]) for v in report["violations"]] == [("README.md", "modified", "outside")]

    error = refused("scope_violation", lambda: lab.release("alpha", 2, wt))
    assert isinstance(error, RefusedError) and STATUS[error.category].exit == 4
    details = error.details
    assert details["count"] == 1 and details["truncated"] is False
    assert [(v["path"], v["scope"]) for v in details["violations"]] == [("README.md", "outside")]
    assert lab.lane("alpha").state == "active", "nothing was released"


def test_a_write_in_a_locked_scope_or_a_commit_outside_refuses_too(lab: Lab) -> None:
    wt = started(lab)
    (wt / "docs" / "guide.md").write_text("# rewritten\n")
    commit(wt, "outside", {"notes.txt": "n\n"})
    error = refused(
        "scope_violation",
        lambda: lab.release("alpha", 0, wt, expected_head=head_of(wt), expected_status_sha256=status_digest(wt)),
    )
    found = {v["path"]: v["scope"] for v in error.details["violations"]}
    assert found == {"docs/guide.md": "locked", "notes.txt": "outside"}


def test_accepting_a_violation_needs_a_reason_and_is_recorded(lab: Lab) -> None:
    wt = started(lab)
    lab.ask("alpha", "write README.md changed")
    with pytest.raises(InputError) as caught:
        lab.release("alpha", 2, wt, accept_violation=True)
    assert caught.value.details["field"] == "reason"
    with pytest.raises(InputError):
        lab.release("alpha", 2, wt, violation_reason="without accepting")
    with pytest.raises(InputError):
        lab.release("alpha", 2, wt, accept_violation=True, violation_reason="x" * 1001)

    lane = lab.release("alpha", 2, wt, accept_violation=True, violation_reason="the README fix was asked for").lease
    assert lane.state == "released"
    accepted = lane.data["violation_acceptance"]
    assert (accepted["reason"], accepted["actor"], accepted["count"]) == ("the README fix was asked for", "test", 1)
    assert accepted["paths"] == [{"path": "README.md", "kind": "modified", "scope": "outside"}]
    assert lane.data["scope_audit"]["clean"] is False
    recorded = [e for e in lab.store.events() if e.trigger == "release"]
    assert "the README fix was asked for" in repr(recorded), "the acceptance is in the event log"


def test_accepting_with_nothing_to_accept_records_no_acceptance(lab: Lab) -> None:
    wt = started(lab)
    lane = lab.release("alpha", 0, wt, accept_violation=True, violation_reason="just in case").lease
    assert lane.state == "released" and "violation_acceptance" not in lane.data


def test_audit_of_an_unknown_lane(lab: Lab) -> None:
    started(lab)
    error = refused("target_unknown", lambda: audit_of(lab, "nobody"))
    assert error.details["target"] == "nobody"
    with pytest.raises(InputError):
        WriterAuditInput("ctl", "alpha", 0)


def test_release_input_accept_violation_is_a_boolean(lab: Lab) -> None:
    wt = started(lab)
    with pytest.raises(InputError) as caught:
        lab.release("alpha", 0, wt, accept_violation="yes", violation_reason="r")
    assert caught.value.details["field"] == "accept_violation"
