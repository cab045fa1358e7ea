"""The adopted-lease guard (:mod:`runner.guards.adopted`): protected panes are never adopted or closed."""

from __future__ import annotations

import pytest

from runner.sql.store_sqlite import SQLiteStore
from tests.support.contexts import Contexts


@pytest.fixture
def contexts(store: SQLiteStore) -> Contexts:
    return Contexts(store)


def test_a_protected_pane_is_refused_by_request_or_by_record(contexts: Contexts) -> None:
    adopt = contexts.absent("adopted/a1")
    protected = {"protected_panes": ["w1:p1", "w1:p9"]}
    assert contexts.guard("pane_not_protected", adopt, params={"pane_id": "w1:p2"}, observations=protected) is None
    refused = contexts.refusal("pane_not_protected", adopt, params={"pane_id": "w1:p9"}, observations=protected)
    assert (refused.code, refused.details) == ("pane_protected", {"pane_id": "w1:p9"})
    # A close of an adoption judges the pane the lease recorded, whatever the request names.
    held = contexts.put("adopted/a2", "active", {"pane_id": "w1:p1"})
    assert contexts.refusal("pane_not_protected", held, observations=protected).details == {"pane_id": "w1:p1"}


def test_protected_panes_never_observed_protect_every_pane(contexts: Contexts) -> None:
    adopt = contexts.absent("adopted/a1")
    for observations in ({}, {"protected_panes": None}, {"protected_panes": "w1:p1"}):
        refused = contexts.refusal("pane_not_protected", adopt, params={"pane_id": "w1:p2"}, observations=observations)
        assert refused.code == "pane_protected" and "were not observed" in refused.message
    assert (
        contexts.guard("pane_not_protected", adopt, params={"pane_id": "w1:p2"}, observations={"protected_panes": []})
        is None
    )
