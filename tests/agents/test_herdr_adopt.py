"""Adopting a Herdr pane corral did not start, against the contract fake of ``herdr``: the coordinator's own
pane (``$HERDR_PANE_ID``) is protected, the host lifetime (``terminal_id``) is recorded with the adoption,
and the close goes through ``pane close`` behind the fence."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from fake_herdr import FakeHerdr

from runner.agents.abc import StartOptions
from runner.agents.herdr import HerdrHost
from runner.agents.kinds import Kinds
from runner.errors import CorralError
from runner.service import AcquireInput, AdoptedCloseInput, AdoptInput, Service
from runner.sql.store_sqlite import SQLiteStore
from tests.support.specs import shared_library

SHA = hashlib.sha256(b"adopt on herdr").hexdigest()


def test_adopt_on_herdr_protects_the_coordinators_pane_and_closes_through_herdr(
    fake_herdr: FakeHerdr, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CORRAL_PROTECTED_PANES", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    host = HerdrHost(Kinds.load([]), workspace="w1", busy_timeout=2.0)
    mine = host.start("coord", "script", str(work), StartOptions())  # the coordinator's own pane
    stray = host.start("stray", "script", str(work), StartOptions())  # made outside corral: no lease
    store = SQLiteStore(tmp_path / "corral.db")
    service = Service(store, shared_library(), actor="test", hosts=lambda name: host)
    credential = service.controller.acquire(AcquireInput("ctl", "T-10", SHA, 900, "t@h")).credential
    monkeypatch.setenv("HERDR_PANE_ID", mine.pane_id)

    def adopt(pane: str, name: str) -> Any:
        seq = host.get(pane).seq
        return service.adopted.adopt(AdoptInput("ctl", credential, pane, name, "script", str(work), seq, host="herdr"))

    with pytest.raises(CorralError) as caught:
        adopt(mine.pane_id, "coord")
    assert caught.value.code == "pane_protected"
    lease = adopt(stray.pane_id, "stray")
    assert lease.state == "active" and lease.data["host"] == "herdr"
    assert lease.data["terminal_id"] == host.get(stray.pane_id).terminal_id, "the host lifetime, as observed"
    closed = service.adopted.close(AdoptedCloseInput("ctl", credential, "stray", lease.data["adopted_seq"]))
    assert closed.lease.state == "closed"
    assert [o.pane_id for o in host.list()] == [mine.pane_id], "only the adopted pane was closed"
    store.close()
