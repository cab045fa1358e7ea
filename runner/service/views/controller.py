"""What the controller lease's operations return: a lease as listings show it, a newly issued lease."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.fence import Credential
from runner.service.views.records import Record


class LeaseView(Record):
    """A lease as listings show it: every public field, the expiry judged by the store's clock."""

    _fields = ("controller_id", "state", "version", "expired", "data")
    controller_id: str
    state: str
    version: int
    expired: bool
    data: Mapping[str, Any]

    def __init__(self, controller_id: str, state: str, version: int, expired: bool, data: Mapping[str, Any]) -> None:
        self._set(controller_id=controller_id, state=state, version=version, expired=expired, data=data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id,
            "state": self.state,
            "expired": self.expired,
            "version": self.version,
            **{k: v for k, v in self.data.items() if k != "controller_id"},
        }


class Grant(Record):
    """A newly issued lease. ``credential`` holds the token: hand it over once, never log it."""

    _fields = ("lease", "credential", "event_seq")
    _hidden = ("credential",)
    lease: LeaseView
    credential: Credential
    event_seq: int

    def __init__(self, lease: LeaseView, credential: Credential, event_seq: int) -> None:
        self._set(lease=lease, credential=credential, event_seq=event_seq)
