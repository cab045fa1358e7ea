"""The OpenAPI 3.1 document of ``corral serve``, generated from the routes and the tools' schemas.

Request bodies and query parameters are the tool's input schema (without what the path fills);
responses are its output schema and the one error document. So the HTTP API, the MCP tools and the
service's Input types cannot drift apart.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "details": {"type": "object"}},
            "required": ["code", "message", "details"],
        }
    },
    "required": ["error"],
    "additionalProperties": True,
}
ERROR_STATUSES = {
    "400": "The request is malformed.",
    "401": "No or a wrong bearer token or credential.",
    "403": "Refused: another holder's fence, a foreign Origin, a path outside the root.",
    "404": "No such thing (controller, instance, plan, recipe, machine).",
    "408": "A wait ended before the agent settled (the last observation beside the error).",
    "409": "Refused by a guard, or the world changed underneath (re-read, decide again).",
    "413": "The request body is over --max-request-size.",
    "422": "An invalid input; nothing was written.",
    "502": "The agent's run failed, or its host failed to start or close it.",
    "503": "The store stayed busy or is unavailable (Retry-After).",
}


def _errors() -> dict[str, Any]:
    return {
        status: {
            "description": text,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        for status, text in ERROR_STATUSES.items()
    }


def _strip_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(schema)


@functools.cache
def document() -> dict[str, Any]:
    """The whole document (built once per process)."""
    from runner._version import __version__
    from runner.http.routes import ROUTES
    from runner.mcp.tools import TOOLS

    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        tool = TOOLS[route.tool]
        schema = _strip_defaults(tool.input_schema)
        properties: dict[str, Any] = schema["properties"]
        required = [name for name in schema.get("required", []) if name not in route.path_args.values()]
        parameters: list[dict[str, Any]] = [
            {"name": param, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
            for param in route.path_args
        ]
        for arg in route.path_args.values():
            properties.pop(arg, None)
        if properties.pop("agent_token", None) is not None:  # a header, never the body
            parameters.append(
                {
                    "name": "Corral-Agent-Token",
                    "in": "header",
                    "required": False,
                    "description": "Your agent token: the secret your first mesh check-in answered (once).",
                    "schema": {"type": "string"},
                }
            )
        operation: dict[str, Any] = {
            "operationId": route.tool.removeprefix("corral_"),
            "summary": tool.title,
            "description": tool.description,
            "responses": {
                "200" if not route.background else "202": {
                    "description": "The result (the document corral prints with --json).",
                    "content": {"application/json": {"schema": tool.output}},
                },
                **_errors(),
            },
        }
        if "controller" in tool.input_schema["properties"] and tool.name != "corral_controller_list":
            parameters.append(
                {
                    "name": "Corral-Credential",
                    "in": "header",
                    "required": False,
                    "description": "The credential a grant handed out (v1.LEASE.GENERATION.TOKEN).",
                    "schema": {"type": "string"},
                }
            )
        if route.method == "GET":
            for name, prop in properties.items():
                param: dict[str, Any] = {"name": name, "in": "query", "required": name in required, "schema": prop}
                if prop.get("type") == "array" or "array" in (prop.get("type") or []):
                    param["explode"] = True
                parameters.append(param)
        else:
            body = {**schema, "properties": properties}
            if required:
                body["required"] = required
            else:
                body.pop("required", None)
            operation["requestBody"] = {"required": bool(required), "content": {"application/json": {"schema": body}}}
            parameters.append(
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": "Replays the stored response for the same key and body (24 h).",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                }
            )
        if parameters:
            operation["parameters"] = parameters
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    paths.update(_extra_paths())
    paths.update(_view_paths())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "corral",
            "version": __version__,
            "description": "Drive coding agents through guarded leases.",
        },
        "paths": paths,
        "components": {"schemas": {"Error": ERROR}},
    }


SSE = {
    "description": "A stream of Server-Sent Events (id: <store id>:<seq>).",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}
SINCE = [
    {
        "name": "since",
        "in": "query",
        "required": False,
        "schema": {"type": "string"},
        "description": "Resume after this id or seq.",
    },
    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
]


def _json(schema: dict[str, Any], text: str = "The result.") -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {"schema": schema}}}


def _extra_paths() -> dict[str, Any]:
    """The routes that are not one tool: metrics, ping, the streams, instance snapshots, decisions."""
    obj = {"type": "object"}
    path_id = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
    plan_id = {"name": "plan_id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
    snapshot = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "machine": {"type": "string"},
            "state": {"type": "string"},
            "version": {"type": "integer"},
            "terminal": {"type": "boolean"},
            "data": obj,
            "last_event_seq": {"type": "integer"},
        },
        "required": ["id", "machine", "state", "version", "data", "last_event_seq"],
    }
    return {
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (with corral[metrics]; else 404)",
                "description": "The text exposition format; names and labels in docs/observability.md.",
                "responses": {
                    "200": {
                        "description": "Every metric, as Prometheus scrapes it.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors(),
                },
            }
        },
        "/api/ping": {
            "get": {
                "operationId": "ping",
                "summary": "Liveness and the store's identity",
                "responses": {"200": _json(obj), **_errors()},
            }
        },
        "/api/events": {
            "get": {
                "operationId": "events_stream",
                "summary": "Every event, replayed then live",
                "parameters": SINCE,
                "responses": {"200": SSE, **_errors()},
            }
        },
        "/api/instances/{id}": {
            "get": {
                "operationId": "instance",
                "summary": "An instance now, with last_event_seq",
                "parameters": [path_id],
                "responses": {"200": _json(snapshot), **_errors()},
            }
        },
        "/api/instances/{id}/events": {
            "get": {
                "operationId": "instance_events",
                "summary": "One instance's events, then instance_ended",
                "parameters": [path_id, *SINCE],
                "responses": {"200": SSE, **_errors()},
            }
        },
        "/api/plans/{plan_id}/events": {
            "get": {
                "operationId": "plan_events",
                "summary": "One plan's events",
                "parameters": [plan_id, *SINCE],
                "responses": {"200": SSE, **_errors()},
            }
        },
        "/api/decisions": {
            "get": {
                "operationId": "decisions",
                "summary": "What waits on a person",
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"decisions": {"type": "array", "items": obj}},
                            "required": ["decisions"],
                        }
                    ),
                    **_errors(),
                },
            }
        },
        "/api/decisions/{id}": {
            "post": {
                "operationId": "decide",
                "summary": "Approve or reject what waits on a person",
                "parameters": [path_id],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "decision": {"type": "string", "enum": ["approve", "reject"]},
                                    "reason": {"type": "string", "minLength": 1, "maxLength": 1000},
                                    "actor": {"type": "string", "minLength": 1, "maxLength": 200},
                                },
                                "required": ["decision", "reason"],
                                "additionalProperties": False,
                            }
                        }
                    },
                },
                "responses": {"202": _json(obj), **_errors()},
            }
        },
    }


def _view_paths() -> dict[str, Any]:
    """The dashboard's read-only views (:data:`runner.http.routes.VIEWS`): their path and query
    parameters from the view's Input, each answering a JSON object."""
    import dataclasses
    import importlib

    from runner.http.routes import VIEWS

    out: dict[str, Any] = {}
    for view in VIEWS:
        parameters: list[dict[str, Any]] = [
            {"name": param, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
            for param in view.path_args
        ]
        if view.query is not None:
            module, _, name = view.query.rpartition(".")
            query_input = getattr(importlib.import_module(f"runner.service.inputs.{module}"), name)
            for f in dataclasses.fields(query_input):
                kind = "integer" if f.name in ("since", "limit") else "string"
                parameters.append(
                    {
                        "name": f.metadata["arg"],
                        "in": "query",
                        "required": False,
                        "description": f.metadata["doc"],
                        "schema": {"type": kind},
                    }
                )
        operation: dict[str, Any] = {
            "operationId": "dashboard_" + view.view,
            "summary": view.summary,
            "description": "Read-only, for the dashboard; its document is in docs/http.md.",
            "responses": {"200": _json({"type": "object"}), **_errors()},
        }
        if parameters:
            operation["parameters"] = parameters
        out[view.path] = {"get": operation}
    return out
