"""What operations return: read-only views of leases, receipts and results, never a secret.

Each has ``to_dict()``, the JSON shape the CLI prints (a contract: coordinators script against it).

The views live in one module per component (:mod:`~runner.service.views.controller`, ``leases``,
``receipts``, ``waits``, ``inventory``, ``writers``; a listing's :class:`Page` in ``pages``), and
this package resolves each name on first use (PEP 562). The views on every command's path
(``controller``, ``leases``, ``receipts``) are :class:`~runner.service.views.records.Record`
subclasses, cheaper to create than dataclasses and alike in behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import lazy_attributes

if TYPE_CHECKING:
    from runner.service.views.controller import Grant, LeaseView
    from runner.service.views.inventory import Housekeeping
    from runner.service.views.leases import AgentLeaseView, CloseResult
    from runner.service.views.pages import Page
    from runner.service.views.receipts import AskManyResult, CollectResult, ReceiptView
    from runner.service.views.waits import WaitAnyResult, Winner
    from runner.service.views.writers import ValidationFailedError, VerifyResult

# Where each public name lives: importing one component's views does not create the others'.
_WHERE: dict[str, str] = {
    "AgentLeaseView": "runner.service.views.leases",
    "AskManyResult": "runner.service.views.receipts",
    "CloseResult": "runner.service.views.leases",
    "CollectResult": "runner.service.views.receipts",
    "Grant": "runner.service.views.controller",
    "Housekeeping": "runner.service.views.inventory",
    "LeaseView": "runner.service.views.controller",
    "Page": "runner.service.views.pages",
    "ReceiptView": "runner.service.views.receipts",
    "ValidationFailedError": "runner.service.views.writers",
    "VerifyResult": "runner.service.views.writers",
    "WaitAnyResult": "runner.service.views.waits",
    "Winner": "runner.service.views.waits",
}


__all__ = [
    "AgentLeaseView",
    "AskManyResult",
    "CloseResult",
    "CollectResult",
    "Grant",
    "Housekeeping",
    "LeaseView",
    "Page",
    "ReceiptView",
    "ValidationFailedError",
    "VerifyResult",
    "WaitAnyResult",
    "Winner",
]

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals(), __all__)
