"""The REST routes of ``corral serve``: each one the tool of an operation (:mod:`runner.service.operations`).

A route names the tool it calls and where that tool's arguments come from: the path (``{name}``
segments, each filling one argument), the query (GET) or a JSON object body (POST). The HTTP layer
holds no business rule: the tool checks its arguments against its input schema, builds the service's
Input and calls the service, exactly as the MCP server does; the OpenAPI document is generated from the
same schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Route:
    """``method path`` -> ``tool``; ``path_args`` maps a path parameter to the tool argument it fills."""

    method: str
    path: str
    tool: str
    summary: str = ""
    path_args: dict[str, str] = field(default_factory=dict)
    background: bool = False
    """A plan run: answered 202 at once, the plan runs in the server (watch its event stream)."""


R = Route
ROUTES: tuple[Route, ...] = (
    R("GET", "/api/status", "corral_status"),
    # controller leases
    R("GET", "/api/controllers", "corral_controller_list"),
    R(
        "POST",
        "/api/controllers/{controller}/acquire",
        "corral_controller_acquire",
        path_args={"controller": "controller"},
    ),
    R("POST", "/api/controllers/{controller}/renew", "corral_controller_renew", path_args={"controller": "controller"}),
    R(
        "POST",
        "/api/controllers/{controller}/resume",
        "corral_controller_resume",
        path_args={"controller": "controller"},
    ),
    R(
        "POST",
        "/api/controllers/{controller}/takeover",
        "corral_controller_takeover",
        path_args={"controller": "controller"},
    ),
    R(
        "POST",
        "/api/controllers/{controller}/release",
        "corral_controller_release",
        path_args={"controller": "controller"},
    ),
    # reviewers
    R("GET", "/api/reviewers", "corral_reviewer_list"),
    R("POST", "/api/reviewers", "corral_reviewer_start"),
    R("POST", "/api/reviewers/cleanup", "corral_reviewer_cleanup"),
    R("POST", "/api/reviewers/reconcile", "corral_reviewer_reconcile"),
    R("POST", "/api/reviewers/{name}/close", "corral_reviewer_close", path_args={"name": "name"}),
    # receipts
    R("POST", "/api/relay", "corral_relay"),
    R("POST", "/api/ask", "corral_ask"),
    R("POST", "/api/ask-many", "corral_ask_many"),
    R("POST", "/api/collect", "corral_collect"),
    R("POST", "/api/wait-any", "corral_wait_any"),
    R("GET", "/api/receipts", "corral_receipts"),
    R("POST", "/api/receipts/{receipt}/abandon", "corral_abandon", path_args={"receipt": "receipt"}),
    # agents
    R("GET", "/api/agents", "corral_agents"),
    R("POST", "/api/agents/reconcile", "corral_agent_reconcile"),
    R("GET", "/api/agents/{target}", "corral_agent_get", path_args={"target": "target"}),
    R("GET", "/api/agents/{target}/output", "corral_agent_read", path_args={"target": "target"}),
    R("POST", "/api/agents/{target}/close", "corral_agent_close", path_args={"target": "target"}),
    # writer lanes
    R("GET", "/api/writers", "corral_writer_list"),
    R("POST", "/api/writers", "corral_writer_start"),
    R("POST", "/api/writers/reconcile", "corral_writer_reconcile"),
    R("POST", "/api/writers/{name}/verify", "corral_writer_verify", path_args={"name": "name"}),
    R("POST", "/api/writers/{name}/release", "corral_writer_release", path_args={"name": "name"}),
    R("GET", "/api/writers/{name}/audit", "corral_writer_audit", path_args={"name": "name"}),
    R("GET", "/api/preflight", "corral_preflight"),
    R("POST", "/api/scopes/check", "corral_scopes_check"),
    # adopted panes
    R("GET", "/api/adopted", "corral_adopted_list"),
    R("POST", "/api/adopted", "corral_adopt"),
    R("POST", "/api/adopted/reconcile", "corral_adopted_reconcile"),
    R("POST", "/api/adopted/{target}/close", "corral_adopted_close", path_args={"target": "target"}),
    R("POST", "/api/adopted/{target}/release", "corral_adopted_release", path_args={"target": "target"}),
    # plans
    R("GET", "/api/plans", "corral_plans_list"),
    R("POST", "/api/plans", "corral_run", background=True),
    R("GET", "/api/plans/{plan_id}", "corral_plans_show", path_args={"plan_id": "plan_id"}),
    R("POST", "/api/plans/{plan_id}/retry", "corral_plans_retry", path_args={"plan_id": "plan_id"}, background=True),
    R("POST", "/api/plans/{plan_id}/resume", "corral_plans_resume", path_args={"plan_id": "plan_id"}, background=True),
    R("POST", "/api/plans/{plan_id}/cancel", "corral_plans_cancel", path_args={"plan_id": "plan_id"}),
    # definitions
    R("GET", "/api/recipes", "corral_recipe_list"),
    R("GET", "/api/recipes/{name}", "corral_recipe_show", path_args={"name": "name"}),
    R("GET", "/api/machines", "corral_machines"),
    R("GET", "/api/machines/{machine}/drawing", "corral_draw", path_args={"machine": "machine"}),
    # the agent mesh: an inbox read renews presence (and may spend a wake token), so it is a POST
    R("GET", "/api/mesh/agents", "corral_mesh_agents"),
    R("POST", "/api/mesh/agents/{agent_id}/checkin", "corral_mesh_checkin", path_args={"agent_id": "agent_id"}),
    R("POST", "/api/mesh/agents/{agent_id}/inbox", "corral_mesh_inbox", path_args={"agent_id": "agent_id"}),
    R("POST", "/api/mesh/agents/{agent_id}/ack", "corral_mesh_ack", path_args={"agent_id": "agent_id"}),
    R("POST", "/api/mesh/messages", "corral_mesh_send"),
    # handoff memory: the corral_memory_* tools
    R("POST", "/api/memory/checkpoints", "corral_memory_checkpoint"),
    R("GET", "/api/memory/checkpoints", "corral_memory_list"),
    R("GET", "/api/memory/search", "corral_memory_search"),
    R("GET", "/api/memory/items/{id}", "corral_memory_show", path_args={"id": "item_id"}),
    R(
        "POST",
        "/api/memory/checkpoints/{checkpoint}/pin",
        "corral_memory_pin",
        path_args={"checkpoint": "checkpoint_id"},
    ),
    R("POST", "/api/memory/projects/{project}/bootstrap", "corral_memory_bootstrap", path_args={"project": "project"}),
    R("GET", "/api/memory/projects/{project}/readiness", "corral_memory_readiness", path_args={"project": "project"}),
    R("POST", "/api/memory/sessions/close", "corral_memory_session_close"),
)


@dataclass(frozen=True)
class OwnRoute:
    """A route the server answers itself, no tool's (behind the same token and ``Host``/``Origin`` checks)."""

    method: str
    path: str
    summary: str
    extra: str = ""
    """The optional extra it needs (absent: the route is 404)."""


OWN_ROUTES: tuple[OwnRoute, ...] = (
    OwnRoute("GET", "/metrics", "Prometheus metrics, text exposition format", extra="metrics"),
)


@dataclass(frozen=True)
class View:
    """``GET path`` -> a read-only view of :class:`runner.service.board.Board` (``board.<view>``), for the
    dashboard: no tool of the operation table (it is no operation a coordinator scripts), a JSON document.

    ``path_args`` maps a path parameter to the view's argument; ``query`` names the Input whose
    ``from_query`` reads the query string (None: the view takes no query)."""

    path: str
    view: str
    summary: str
    path_args: dict[str, str] = field(default_factory=dict)
    query: str | None = None
    """``module.Class`` under :mod:`runner.service.inputs`."""


VIEWS: tuple[View, ...] = (
    View("/api/dashboard/attention", "attention", "What needs a person, each with the command that settles it"),
    View(
        "/api/dashboard/plans/{plan_id}/timeline",
        "timeline",
        "A plan's steps as a waterfall: attempts, waits, decisions, spend",
        path_args={"plan_id": "plan_id"},
    ),
    View("/api/dashboard/events", "events", "A search of the event log", query="board.EventSearchInput"),
)
