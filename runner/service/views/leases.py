"""What agent lease operations return: a reviewer's, writer's or adopted agent's lease, a close."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.service.views.records import Record


class AgentLeaseView(Record):
    """A reviewer (or writer) lease as listings show it."""

    _fields = ("id", "machine", "state", "version", "data")
    id: str
    machine: str
    state: str
    version: int
    data: Mapping[str, Any]

    def __init__(self, id: str, machine: str, state: str, version: int, data: Mapping[str, Any]) -> None:
        self._set(id=id, machine=machine, state=state, version=version, data=data)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "machine": self.machine, "state": self.state, "version": self.version, **self.data}


class CloseResult(Record):
    """A closed agent's lease and the output captured at its settled cursor."""

    _fields = ("lease", "output")
    _hidden = ("output",)
    lease: AgentLeaseView
    output: str

    def __init__(self, lease: AgentLeaseView, output: str) -> None:
        self._set(lease=lease, output=output)

    def to_dict(self) -> dict[str, Any]:
        return {"lease": self.lease.to_dict(), "output": self.output}
