"""An error's HTTP answer: its status (:func:`http_status`) and its JSON document (:func:`error_response`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.errors import CorralError
from runner.observe import meter

RETRY_AFTER_BUSY = "1"

_NOT_FOUND = {"not_found", "controller_unknown", "machine_unknown", "target_unknown", "receipt_unknown", "plan_unknown",
              "recipe_unknown", "instance_unknown", "tool_unknown", "lease_unknown", "decision_unknown"}  # fmt: skip
_FORBIDDEN = {"caller_not_controller", "fence_stale", "not_owner", "path_outside_root", "mesh_agent_token_invalid"}
_UNAUTHORIZED = {
    "credential_missing",
    "credential_corrupt",
    "credential_invalid",
    "unauthorized",
    "mesh_agent_token_missing",
}


def http_status(error: CorralError) -> int:
    """The HTTP status of an error: the category's row of :data:`runner.errors.STATUS`, refined where a
    code says more (absent things 404, a credential 401, another holder's fence 403, a timed-out wait
    408, a busy store 503)."""
    code = error.code
    if code in _NOT_FOUND or code.endswith("_unknown"):
        return 404
    if code in _UNAUTHORIZED:
        return 401
    if code in _FORBIDDEN:
        return 403
    if code == "wait_timeout":
        return 408
    if code in {"store_busy", "store_unavailable"}:
        return 503
    if code == "request_too_large":
        return 413
    return error.status.http


def error_response(error: CorralError, extra: Mapping[str, Any] | None = None) -> Any:
    """``{"error": ...}`` (and ``extra``) with ``error``'s status; a 503 says when to retry (``Retry-After``)."""
    from starlette.responses import JSONResponse

    status = http_status(error)
    if meter.SINK is not None and error.category == "refused":  # /metrics: the refusals this server answered
        meter.SINK.refused(error.code)
    headers = {"Retry-After": RETRY_AFTER_BUSY} if status == 503 else None
    return JSONResponse({"error": error.to_dict(), **(extra or {})}, status_code=status, headers=headers)
