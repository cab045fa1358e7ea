"""The operation table: every operation corral offers, declared once, and where each surface shows it.

An :class:`Operation` names what it does (its title and truthful hints), the Input it takes (whose
fields carry their surface names and descriptions, :mod:`runner.service.inputs.fields`), the façade's
method that does it, the JSON document it answers (:meth:`Operation.document`, the one envelope the
CLI's ``--json``, the MCP tools and the HTTP API all print), and whether it waits. Its ``tool`` and
``command`` are its MCP tool and CLI command; ``not_on`` says why an operation is missing from a
surface. The MCP tools are drawn from this table (:mod:`runner.mcp.tools`), the HTTP routes name its
tools (:mod:`runner.http.routes`), and ``tests/test_operations.py`` fails when an operation is on no
surface without saying why, or when a tool's argument names differ from its command's options.

Nothing here is imported but strings and the Input classes an operation asks for (lazily): the
table costs a CLI command nothing it does not use.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NamedTuple


class Hints(NamedTuple):
    """What an operation does to the world, stated per operation (the MCP annotations), and checked by
    a test against what it does."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


READ = Hints(read_only=True, destructive=False, idempotent=True, open_world=False)
"""Reads corral's own store or definitions; changes nothing."""
OBSERVE = Hints(read_only=True, destructive=False, idempotent=True, open_world=True)
"""Observes agents (processes outside corral, on a host); changes nothing."""


def acts(*, destructive: bool = False, idempotent: bool = False, agents: bool = True) -> Hints:
    """An operation that changes something: ``agents`` when it reaches agents on a host (open world)."""
    return Hints(read_only=False, destructive=destructive, idempotent=idempotent, open_world=agents)


class Operation:
    """One operation: what it is, what it takes and answers, and where the surfaces show it.

    A plain class with slots, not a dataclass: the table is built by every command that prints
    through it, and a dataclass costs a cold process most of a millisecond to create."""

    __slots__ = ("command", "hints", "http", "input", "method", "name", "not_on", "result", "title", "tool", "waits")

    def __init__(
        self,
        name: str,
        tool: str | None,
        command: str | None,
        title: str,
        hints: Hints,
        input: str | None = None,
        method: str | None = None,
        result: str | None = None,
        *,
        waits: bool = False,
        not_on: Mapping[str, str] | None = None,
        http: str | None = None,
    ) -> None:
        self.name = name
        """``component.verb``: the CLI command's words joined by dots."""
        self.tool = tool
        """Its MCP tool (and so its HTTP route's tool): ``corral_`` and its command's words joined by
        ``_`` (``plans list`` -> ``corral_plans_list``, ``ask-many`` -> ``corral_ask_many``;
        ``tests/test_naming.py``); None: see ``not_on``."""
        self.command = command
        """Its CLI command (``"controller renew"``); None: see ``not_on``."""
        self.title = title
        self.hints = hints
        self.input = input
        """Its Input class, ``module.Class`` under :mod:`runner.service.inputs`; None: it takes no Input."""
        self.method = method
        """The component method that does it, given the Input (``"controller.renew"``); None: the
        surface composes it (a grant that stores a credential, a wait that reports progress)."""
        self.result = result
        """Its document: ``"lease"`` wraps the view as ``{"lease": ...}``; ``"page:leases"`` is a page
        ``{"leases": [...], "next_after": ...}``; None: the view's own document."""
        self.waits = waits
        """It waits on agents (server-side, with progress and cancellation)."""
        self.not_on: Mapping[str, str] = not_on or {}
        """Surface (``mcp``, ``cli``, ``http``) -> why the operation is not on it."""
        self.http = http
        """Where the HTTP API serves it beside the route table (a stream, a long poll), if it does."""

    def __repr__(self) -> str:
        return f"Operation({self.name!r})"

    @property
    def input_type(self) -> type | None:
        """The Input class (imported on first use)."""
        if self.input is None:
            return None
        module, _, name = self.input.rpartition(".")
        found: type = getattr(importlib.import_module("runner.service.inputs." + module), name)
        return found

    def document(self, value: Any) -> dict[str, Any]:
        """The JSON document of the operation's result ``value`` (a view, a page of views, a dict)."""
        if self.result is None:
            return dict(value if isinstance(value, Mapping) else value.to_dict())
        if self.result.startswith("page:"):
            return page(self.result.removeprefix("page:"), value)
        return {self.result: value if isinstance(value, Mapping) else value.to_dict()}


def page(key: str, rows: Any) -> dict[str, Any]:
    """A listing's document: its rows' documents under ``key`` and where the next page starts."""
    return {key: [row if isinstance(row, Mapping) else row.to_dict() for row in rows], "next_after": rows.next_after}


_O = Operation
_WRITE = acts(agents=False)
_HOUSEKEEPING = acts(destructive=True, idempotent=True)

OPERATIONS: tuple[Operation, ...] = (
    # --- the controller lease
    _O("controller.acquire", "corral_controller_acquire", "controller acquire", "Acquire a controller lease",
       _WRITE, "controller.AcquireInput", result="lease"),
    _O("controller.renew", "corral_controller_renew", "controller renew", "Renew a controller lease",
       acts(idempotent=True, agents=False), "controller.RenewInput", "controller.renew", "lease"),
    _O("controller.resume", "corral_controller_resume", "controller resume", "Resume a controller lease",
       _WRITE, "controller.ResumeInput", result="lease"),
    _O("controller.takeover", "corral_controller_takeover", "controller takeover",
       "Take over an expired controller lease", acts(destructive=True, agents=False), "controller.TakeoverInput",
       result="lease"),
    _O("controller.release", "corral_controller_release", "controller release", "Release a controller lease",
       acts(destructive=True, agents=False), "controller.ReleaseInput", result="lease"),
    _O("controller.list", "corral_controller_list", "controller list", "List controller leases", READ,
       "controller.ListLeasesInput", "controller.leases", "page:leases"),
    # --- reviewers
    _O("reviewer.start", "corral_reviewer_start", "reviewer start", "Start a reviewer agent", acts(),
       "reviewers.ReviewerStartInput", "reviewers.start", "lease"),
    _O("reviewer.close", "corral_reviewer_close", "reviewer close", "Close a reviewer at its cursor",
       acts(destructive=True), "reviewers.ReviewerCloseInput", "reviewers.close"),
    _O("reviewer.list", "corral_reviewer_list", "reviewer list", "List reviewer leases", READ,
       "reviewers.ReviewerListInput", "reviewers", "page:reviewers"),
    _O("reviewer.cleanup", "corral_reviewer_cleanup", "reviewer cleanup", "Clean up idle reviewers", _HOUSEKEEPING,
       "inventory.ControllerInput", "inventory.reviewer_cleanup"),
    _O("reviewer.reconcile", "corral_reviewer_reconcile", "reviewer reconcile", "Reconcile reviewers",
       _HOUSEKEEPING, "inventory.ControllerInput", "inventory.reviewer_reconcile"),
    # --- receipts
    _O("relay", "corral_relay", "relay", "Relay a prompt with a receipt", acts(), "receipts.RelayInput",
       "receipts.relay", "receipt"),
    _O("ask", "corral_ask", "ask", "Ask a leased agent and wait for its answer", acts(), "receipts.CollectInput",
       waits=True),
    _O("ask_many", "corral_ask_many", "ask-many", "Ask several leased agents", acts(), "receipts.AskManyInput",
       waits=True),
    _O("collect", "corral_collect", "collect", "Collect receipts", acts(idempotent=True), "receipts.CollectInput",
       waits=True),
    _O("abandon", "corral_abandon", "abandon", "Abandon a receipt", acts(destructive=True),
       "receipts.AbandonInput", "receipts.abandon", "receipt"),
    _O("receipts", "corral_receipts", "receipts", "List receipts", READ, "receipts.ReceiptsInput", "receipts",
       "page:receipts"),
    # --- waits and observations
    _O("wait_any", "corral_wait_any", "wait-any", "Wait for the first of several agents to settle", OBSERVE,
       "waits.WaitAnyInput", waits=True),
    _O("agent.get", "corral_agent_get", "agent get", "Observe one agent", OBSERVE, "waits.AgentInput", "waits.get",
       "observation"),
    _O("agent.read", "corral_agent_read", "agent read", "Read one agent's visible output", OBSERVE,
       "waits.AgentInput"),
    _O("agent.wait", "corral_agent_wait", "agent wait", "Wait for one agent's status", OBSERVE,
       "waits.AgentWaitInput", result="observation", waits=True, http="GET /api/agents/{target}?wait=DURATION"),
    _O("agents", "corral_agents", "agents", "List a host's agent panes (observed)", OBSERVE),
    _O("agent.close", "corral_agent_close", "agent close", "Close a pane no lease holds", acts(destructive=True),
       "inventory.PaneCloseInput", "inventory.pane_close", "close"),
    _O("agent.reconcile", "corral_agent_reconcile", "agent reconcile", "Reconcile operator closes", _HOUSEKEEPING,
       "inventory.ControllerInput", "inventory.pane_reconcile"),
    # --- writer lanes
    _O("writer.start", "corral_writer_start", "writer start", "Start a writer lane", acts(),
       "writers.WriterStartInput", result="lease"),
    _O("writer.verify", "corral_writer_verify", "writer verify", "Verify a writer lane", acts(idempotent=True),
       "writers.WriterVerifyInput"),
    _O("writer.release", "corral_writer_release", "writer release", "Release a writer lane with a checkpoint",
       acts(destructive=True), "writers.WriterReleaseInput", "writers.release"),
    _O("writer.audit", "corral_writer_audit", "writer audit", "Audit a writer lane's changes against its scopes",
       READ, "writers.WriterAuditInput", "writers.audit"),
    _O("writer.list", "corral_writer_list", "writer list", "List writer lanes", READ, "leases.LeaseListInput",
       result="page:writers"),
    _O("writer.reconcile", "corral_writer_reconcile", "writer reconcile", "Reconcile writer lanes", _HOUSEKEEPING,
       "inventory.ControllerInput"),
    _O("preflight", "corral_preflight", "preflight", "Git preflight of a worktree", READ),
    _O("scopes.check", "corral_scopes_check", "scopes check", "Check path scopes", READ,
       "writers.ScopesCheckInput", "writers.scopes_check"),
    # --- adopted panes
    _O("adopt", "corral_adopt", "adopt", "Adopt a pane", acts(), "adopted.AdoptInput", "adopted.adopt", "lease"),
    _O("adopted.close", "corral_adopted_close", "adopted close", "Close an adopted pane", acts(destructive=True),
       "adopted.AdoptedCloseInput", "adopted.close"),
    _O("adopted.release", "corral_adopted_release", "adopted release", "Release an adopted pane", _WRITE,
       "adopted.AdoptedReleaseInput", "adopted.release", "lease"),
    _O("adopted.list", "corral_adopted_list", "adopted list", "List adopted panes", READ,
       "adopted.AdoptedListInput", "adopted.leases", "page:adopted"),
    _O("adopted.reconcile", "corral_adopted_reconcile", "adopted reconcile", "Reconcile adopted panes",
       _HOUSEKEEPING, "inventory.ControllerInput", "adopted.reconcile"),
    # --- status, events, definitions
    _O("status", "corral_status", "status", "corral's status", READ, method="inventory.status"),
    _O("events", "corral_events", "events", "Read the event log", READ, "events.EventsInput",
       http="GET /api/events (a resumable server-sent stream)"),
    _O("events.prune", None, "events prune", "Prune the event log", acts(destructive=True, agents=False),
       not_on={"mcp": "deleting history is an operator's act on the store, not a coordinator's",
               "http": "deleting history is an operator's act on the store, not a coordinator's"}),
    _O("machines", "corral_machines", "machines", "List machines", READ),
    _O("draw", "corral_draw", "draw", "Draw a machine, recipe or plan", READ),
    _O("recipe.list", "corral_recipe_list", "recipe list", "List recipes", READ),
    _O("recipe.show", "corral_recipe_show", "recipe show", "Show a recipe", READ),
    _O("validate", None, "validate", "Validate definition files", READ,
       not_on={"mcp": "it reads files on the caller's machine", "http": "it reads files on the caller's machine"}),
    _O("check", "corral_check", "check", "Model-check machines and recipes for their invariants", READ,
       not_on={"http": "a review aid for an author (CLI) or an agent (MCP); it can run for a minute"}),
    _O("paths", None, "paths", "A machine's paths through its states", READ,
       not_on={"mcp": "a review aid for a person at a terminal", "http": "a review aid for a person at a terminal"}),
    _O("init", None, "init", "Make a demo project", acts(),
       not_on={"mcp": "it writes a demo project on the caller's disk",
               "http": "it writes a demo project on the caller's disk"}),
    _O("review_pack", None, "review-pack", "Write the review pack", READ,
       not_on={"mcp": "it writes a document for a pull request on the caller's disk",
               "http": "it writes a document for a pull request on the caller's disk"}),
    # --- plans
    _O("run", "corral_run", "run", "Submit and run a plan", acts(idempotent=True),
       "plans.PlanSubmitInput", waits=True),
    _O("plans.show", "corral_plans_show", "plans show", "Show a plan", READ, "plans.PlanShowInput"),
    _O("plans.list", "corral_plans_list", "plans list", "List plans", READ, "plans.PlanListInput",
       result="page:plans"),
    _O("plans.decide", "corral_plans_decide", "plans decide", "Decide a step that waits on a person", acts(),
       "plans.PlanDecideInput", waits=True,
       http="POST /api/decisions/{id} (which names who decides)"),
    _O("plans.resume", "corral_plans_resume", "plans resume", "Resume a plan", acts(idempotent=True),
       "plans.PlanResumeInput", waits=True),
    _O("plans.retry", "corral_plans_retry", "plans retry", "Retry a failed plan", acts(), "plans.PlanRetryInput",
       waits=True),
    _O("plans.cancel", "corral_plans_cancel", "plans cancel", "Cancel a plan",
       acts(destructive=True, idempotent=True, agents=False), "plans.PlanCancelInput"),
    # --- the agent mesh: the agents' own tools (each called with the caller's own agent_id)
    _O("mesh.checkin", "corral_mesh_checkin", "mesh checkin", "Check in to the agent mesh",
       acts(idempotent=True, agents=False), "mesh.CheckinInput", "mesh.checkin"),
    _O("mesh.agents", "corral_mesh_agents", "mesh agents", "List the agents checked in to the mesh", READ,
       "mesh.AgentsInput", "mesh.agents"),
    _O("mesh.send", "corral_mesh_send", "mesh send", "Send a message to other agents", acts(), "mesh.SendInput",
       "mesh.send"),
    _O("mesh.inbox", "corral_mesh_inbox", "mesh inbox", "Read your messages", acts(idempotent=True, agents=False),
       "mesh.InboxInput", "mesh.inbox"),
    _O("mesh.ack", "corral_mesh_ack", "mesh ack", "Acknowledge messages", acts(idempotent=True, agents=False),
       "mesh.AckInput", "mesh.ack"),
    _O("mesh.wake", None, "mesh wake", "Enable or disable wake-ups", acts(),
       not_on={"mcp": "enabling wake-ups needs a controller's credential: a coordinator's act, not an agent's",
               "http": "enabling wake-ups needs a controller's credential: a coordinator's act, not an agent's"}),
    # --- handoff memory
    _O("memory.checkpoint", "corral_memory_checkpoint", "memory checkpoint", "Write a handoff checkpoint", _WRITE,
       "memory.CheckpointInput"),
    _O("memory.bootstrap", "corral_memory_bootstrap", "memory bootstrap", "Bootstrap a project's handoff memory",
       acts(idempotent=True, agents=False),
       "memory.ProjectInput", "memory.bootstrap"),
    _O("memory.readiness", "corral_memory_readiness", "memory readiness", "A project's readiness to resume", READ,
       "memory.ProjectInput", "memory.readiness"),
    _O("memory.pin", "corral_memory_pin", "memory pin", "Pin a checkpoint", acts(idempotent=True, agents=False),
       "memory.PinInput", "memory.pin"),
    _O("memory.session.close", "corral_memory_session_close", "memory session close", "Close a memory session",
       acts(destructive=True, agents=False),
       "memory.SessionCloseInput", "memory.close"),
    _O("memory.show", "corral_memory_show", "memory show", "Show a checkpoint or a session", READ, "memory.ShowInput",
       "memory.show"),
    _O("memory.list", "corral_memory_list", "memory list", "List checkpoints or sessions", READ,
       "memory.MemoryListInput", "memory.listing"),
    _O("memory.search", "corral_memory_search", "memory search", "Search checkpoints", READ, "memory.SearchInput",
       "memory.search"),
    # --- the store and the servers: a person's, at the machine
    _O("store.info", None, "store info", "Describe the store", READ,
       not_on={"mcp": "corral_status reports the store", "http": "GET /api/status reports the store"}),
    _O("store.migrate", None, "store migrate", "Copy a store to another backend", acts(agents=False),
       not_on={"mcp": "an operator's act on the machine, with the servers stopped",
               "http": "an operator's act on the machine, with the servers stopped"}),
    _O("serve", None, "serve", "Serve the HTTP API and dashboard", READ,
       not_on={"mcp": "it is a server", "http": "it is the server"}),
    _O("mcp.config", None, "mcp config", "Configure an MCP client", acts(agents=False),
       not_on={"mcp": "it writes the client's own configuration on the caller's machine",
               "http": "it writes the client's own configuration on the caller's machine"}),
)  # fmt: skip

BY_NAME: dict[str, Operation] = {op.name: op for op in OPERATIONS}
BY_TOOL: dict[str, Operation] = {op.tool: op for op in OPERATIONS if op.tool is not None}
BY_COMMAND: dict[str, Operation] = {op.command: op for op in OPERATIONS if op.command is not None}


def by_tool(name: str) -> Operation:
    """The operation of MCP tool ``name``.

    Raises:
        KeyError: no operation has that tool.
    """
    return BY_TOOL[name]


def by_command(command: str) -> Operation:
    """The operation of CLI command ``command`` (``"controller renew"``)."""
    return BY_COMMAND[command]
