"""OpenTelemetry traces: off by default (not one opentelemetry module imported), and when on, the span tree
of a real plan (plan -> step -> transition -> effect), the agent runs the real supervisor records under
the span that prompted them (GenAI conventions: ``invoke_agent``, ``execute_tool``, token usage), a plan
resumed later continuing its trace, an HTTP request of a real ``corral serve`` and an MCP call of a real
``corral mcp``; every attribute's name checked against the conventions and every value scanned for the
secrets and the agent text.

In process, spans go to the SDK's InMemorySpanExporter; the other processes (the supervisor, serve, mcp)
export over real OTLP/HTTP to a loopback receiver (tests/support/otlp.py) configured by ``OTEL_*``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runner.observe import tracing
from runner.service.inputs.plans import (
    PlanDecideInput,
    PlanResumeInput,
    PlanRunInput,
    PlanSubmitInput,
)
from tests.support import stream_agent
from tests.support.agent_plans import AgentPlans
from tests.support.otlp import Collector, Span, from_sdk

REPO = Path(__file__).resolve().parents[2]
AUTHORITY = hashlib.sha256(b"the traced plan's authority").hexdigest()
PROMPT = "PROMPT-TEXT-NEVER-TRACED please review"
OTEL_VARS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
)

# The attribute names a span may carry: OpenTelemetry's (GenAI, HTTP, MCP semantic conventions) and corral's.
CONVENTIONS = {
    "gen_ai.operation.name",
    "gen_ai.agent.name",
    "gen_ai.agent.id",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.conversation.id",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.tool.name",
    "http.request.method",
    "http.route",
    "http.response.status_code",
    "url.scheme",
    "mcp.method.name",
    "error.type",
}
CORRAL_ATTRIBUTE = re.compile(r"^corral\.[a-z_]+(\.[a-z_]+)*$")
SPAN_NAMES = re.compile(
    r"^(plan [a-z0-9_-]+|step [a-z_]+\.[a-z_]+|transition [a-z_]+:[a-z_:]+|effect [a-z_]+|invoke_agent \S+"
    r"|execute_tool \S+|(GET|POST) /\S*|GET|POST|tools/call [a-z_]+)$"
)

RECIPES = {
    "traced-gate": """\
        recipe: traced-gate
        version: 1
        description: wait on a person, then pass
        inputs: {type: object}
        steps:
          - id: approve
            do: human.approve
            with: {prompt: "Go on?", timeout: 600}
          - id: after
            do: flow.pass
            with: {values: {n: 1}}
        """,
}


class Rig(AgentPlans):
    def __init__(self, root: Path) -> None:
        super().__init__(root, RECIPES)

    def review(self, plan_id: str, kind: str, prompt: str) -> Any:
        inputs = {
            "cwd": str(self.project),
            "prompt": prompt,
            "kind": kind,
            "timeout": 60,
            "authority_ref": "T-29",
            "authority_sha256": AUTHORITY,
        }
        if kind != "script":
            inputs["verdict_schema"] = None
        self.plans.submit(PlanSubmitInput({"plan": plan_id, "recipe": "review", "controller": "ctl", "inputs": inputs}))
        return anyio.run(self.plans.run, PlanRunInput(plan_id), lambda event: None)

    def secrets(self) -> list[str]:
        """Every live secret the run handed out: the controller's credential (its token) and the agents'."""
        found = [str(v) for cred in self.keeper._held.values() for v in vars(cred).values() if isinstance(v, str)]
        return [s for s in found if len(s) >= 16]


@pytest.fixture
def collector() -> Iterator[Collector]:
    made = Collector()
    yield made
    made.close()


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch, collector: Collector) -> Iterator[InMemorySpanExporter]:
    """This process's spans in memory; the supervisors it starts (which inherit the environment) export
    theirs to ``collector``."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    exporter = InMemorySpanExporter()
    provider = tracing.new_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    yield exporter
    tracing.reset()
    provider.shutdown()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.store.close()


def check_conventions(spans: list[Span], forbidden: list[str]) -> None:
    """Names and attribute names as the conventions say; no value holds a secret or agent text."""
    assert forbidden and all(forbidden)
    for span in spans:
        assert SPAN_NAMES.match(span.name), span.name
        for key, value in span.attributes.items():
            assert key in CONVENTIONS or CORRAL_ATTRIBUTE.match(key), f"{span.name}: attribute {key!r}"
            for secret in forbidden:
                assert secret not in str(value), f"{span.name}: {key} holds {secret[:12]}..."
        if span.name.startswith("invoke_agent "):
            assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
            assert span.name == f"invoke_agent {span.attributes['gen_ai.agent.name']}"
        if span.name.startswith("execute_tool "):
            assert span.attributes["gen_ai.operation.name"] == "execute_tool"
            assert span.name == f"execute_tool {span.attributes['gen_ai.tool.name']}"


def by_name(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]


def ancestors(span: Span, index: dict[int, Span]) -> list[str]:
    names = []
    while span.parent_id is not None and span.parent_id in index:
        span = index[span.parent_id]
        names.append(span.name)
    return names


def test_tracing_is_off_and_imports_nothing_unless_otel_is_configured(tmp_path: Path) -> None:
    """A real command of the real CLI (corral status, corral run of a plan) with and without OTEL_*: not one
    opentelemetry module is imported unless asked, and asked, the SDK is."""
    script = textwrap.dedent(
        """
        import sys
        from runner.cli import run
        for argv in (["status", "--json"], ["controller", "list", "--json"]):
            sys.argv = ["corral", *argv]
            try:
                run()
            except SystemExit:
                pass
        import runner.http.app, runner.observe.tracing as t
        t.active()
        sys.stderr.write("MODULES " + ",".join(m for m in sys.modules if m.split(".")[0] == "opentelemetry") + "\\n")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(CORRAL_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO))
    env.pop("CORRAL_STORE", None)

    def modules(extra: dict[str, str]) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
        return [m for m in line.removeprefix("MODULES ").split(",") if m]

    assert modules({}) == []
    assert modules({"OTEL_TRACES_EXPORTER": "none"}) == []
    assert modules({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}) == []
    on = modules({"OTEL_TRACES_EXPORTER": "console"})
    assert "opentelemetry.sdk.trace" in on


def test_configured_reads_the_standard_variables() -> None:
    assert not tracing.configured({})
    assert tracing.configured({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.configured({"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.configured({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})


@pytest.mark.slow
def test_a_plans_span_tree_with_its_agent_run(rig: Rig, memory: InMemorySpanExporter, collector: Collector) -> None:
    plan = rig.review("traced-1", "script", PROMPT)
    assert plan.state == "succeeded", plan.data.get("failure")
    local = [from_sdk(s) for s in memory.get_finished_spans()]
    remote = collector.wait_for("invoke_agent ")
    spans = local + remote
    index = {s.span_id: s for s in spans}

    (root,) = by_name(local, "plan review")
    trace_id, span_id = tracing.plan_ids("traced-1", str(plan.data["content_sha256"]))
    assert (root.trace_id, root.span_id, root.parent_id) == (trace_id, span_id, None), "the plan's root: derived ids"
    assert root.attributes["corral.plan.id"] == "traced-1" and root.attributes["corral.plan.state"] == "succeeded"
    outside = [s.name for s in spans if s.trace_id != trace_id]
    assert outside == ["transition plan:submit"], "one trace: the plan's run, its steps, transitions and agent run"

    steps = [s for s in local if s.name.startswith("step ")]
    expected = [step.id for step in rig.plans.recipe_of(plan).steps]
    assert expected[:5] == ["acquire", "start", "relay", "collect", "close"]
    assert [s.attributes["corral.step.id"] for s in sorted(steps, key=lambda s: s.start_ns)] == expected
    assert all(s.parent_id == root.span_id for s in steps)
    assert all(s.attributes["corral.step.outcome"] == "succeeded" for s in steps)

    transitions = [s for s in local if s.name.startswith("transition ")]
    assert all(index[s.parent_id].name.split(" ")[0] in ("plan", "step") for s in transitions if s.parent_id)
    (start,) = by_name(local, "transition plan:start")
    assert start.parent_id == root.span_id
    assert (start.attributes["corral.state.from"], start.attributes["corral.state.to"]) == ("submitted", "running")
    assert start.attributes["corral.guard.names"] == ("plan_runner_free",)
    assert start.attributes["corral.guard.verdicts"] == ("pass",)
    acquire = next(s for s in transitions if s.attributes["corral.machine"] == "controller")
    assert "step controller.acquire" in ancestors(acquire, index)

    effects = [s for s in local if s.name.startswith("effect ")]
    assert effects, "the two-phase transitions' effects"
    assert all(index[s.parent_id].name.startswith("transition ") for s in effects)
    assert all(s.attributes["corral.effect.outcome"] == "success" for s in effects)

    (run,) = [s for s in remote if s.name.startswith("invoke_agent ")]
    assert run.attributes["gen_ai.agent.name"] == "reviewer" and run.attributes["corral.agent.kind"] == "script"
    assert run.parent_id in index and "step receipt.relay" in ancestors(run, index), "under the span that prompted it"
    assert run.kind == "SPAN_KIND_CLIENT" and run.end_ns >= run.start_ns
    check_conventions(spans, [PROMPT, *rig.secrets()])


@pytest.mark.slow
def test_a_driven_agent_run_carries_its_usage_and_tool_calls(
    rig: Rig, memory: InMemorySpanExporter, collector: Collector
) -> None:
    prompt = f"read main.py\n{PROMPT}"
    plan = rig.review("traced-2", "streamer", prompt)
    assert plan.state == "succeeded", plan.data.get("failure")
    local = [from_sdk(s) for s in memory.get_finished_spans()]
    remote = collector.wait_for("invoke_agent ")
    (run,) = [s for s in remote if s.name.startswith("invoke_agent ")]
    assert run.attributes["gen_ai.provider.name"] == "anthropic"
    assert run.attributes["gen_ai.usage.input_tokens"] == 100 and run.attributes["gen_ai.usage.output_tokens"] == 20
    assert run.attributes["corral.usage.cost_usd"] == 0.25
    (tool,) = [s for s in remote if s.name.startswith("execute_tool ")]
    assert tool.attributes["gen_ai.tool.name"] == "Read" and tool.parent_id == run.span_id
    check_conventions(local + remote, [prompt, PROMPT, stream_agent.SECRET, "main.py", *rig.secrets()])


def test_a_plan_resumed_later_continues_its_trace(rig: Rig, memory: InMemorySpanExporter) -> None:
    rig.plans.submit(PlanSubmitInput({"plan": "traced-3", "recipe": "traced-gate", "controller": "ctl", "inputs": {}}))
    paused = anyio.run(rig.plans.run, PlanRunInput("traced-3"), lambda event: None)
    assert paused.state == "paused"
    rig.plans.decide(PlanDecideInput("traced-3", "approve", True, "looks right", None))
    tracing.reset()  # as a new process would: nothing of the first run is kept but the plan's record
    provider = tracing.new_provider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    done = anyio.run(rig.plans.resume, PlanResumeInput("traced-3"), lambda event: None)
    assert done.state == "succeeded"
    first, second = sorted(
        by_name([from_sdk(s) for s in memory.get_finished_spans()], "plan traced-gate"), key=lambda s: s.start_ns
    )
    assert first.parent_id is None and second.parent_id == first.span_id and second.trace_id == first.trace_id
    assert second.attributes["corral.plan.from"] == "paused"


def start_serve(home: Path, collector: Collector, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CORRAL_"))}
    env.update(
        CORRAL_HOME=str(home),
        PYTHONPATH=str(REPO),
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="50",
    )
    with log.open("wb") as err:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "serve", "--listen", "127.0.0.1:0"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"serving (http://\S+)", log.read_text(errors="replace"))
        if found:
            return proc, found.group(1)
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(log.read_text())


@pytest.mark.slow
def test_an_http_request_and_an_mcp_call_are_spans(tmp_path: Path, collector: Collector) -> None:
    import httpx

    from tests.support.runs import stop_process

    home = tmp_path / "home"
    proc, base = start_serve(home, collector, tmp_path / "serve.err")
    caller = (0x1234567890ABCDEF1234567890ABCDEF, 0x1122334455667788)
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            parent = f"00-{caller[0]:032x}-{caller[1]:016x}-01"
            assert client.get("/api/status", headers={"traceparent": parent}).status_code == 200
            assert client.get("/api/plans/nope").status_code == 404
            secret = "CREDENTIAL-NEVER-TRACED"
            client.post("/api/controllers/ctl/renew", json={}, headers={"Corral-Credential": secret})
            project = tmp_path / "project"
            project.mkdir()
            inputs = {"cwd": str(project), "prompt": PROMPT, "kind": "script", "timeout": 30,
                      "authority_ref": "T-29", "authority_sha256": AUTHORITY}  # fmt: skip
            plan = {"plan": "http-1", "recipe": "review", "controller": "ctl", "inputs": inputs}
            assert client.post("/api/plans", json={"plan": plan}).status_code == 202
            deadline = time.monotonic() + 60
            while client.get("/api/plans/http-1").json()["state"] not in ("succeeded", "failed"):
                assert time.monotonic() < deadline
                time.sleep(0.1)
        spans = collector.wait_for("plan review")
    finally:
        stop_process(proc)
    (status,) = by_name(spans, "GET /api/status")
    assert (status.trace_id, status.parent_id) == caller, "continues the caller's trace"
    assert status.kind == "SPAN_KIND_SERVER" and status.attributes["http.route"] == "/api/status"
    assert status.attributes["http.response.status_code"] == 200
    missing = next(
        s for s in by_name(spans, "GET /api/plans/{plan_id}") if s.attributes["http.response.status_code"] == 404
    )
    assert "nope" not in json.dumps(missing.attributes)
    (submitted,) = by_name(spans, "POST /api/plans")
    (run,) = by_name(spans, "plan review")
    assert run.parent_id is None and run.links == (submitted.span_id,), "the plan's own trace, linked to its request"
    assert any(
        s.name.startswith("invoke_agent ") and s.trace_id == run.trace_id for s in collector.wait_for("invoke_agent")
    )
    check_conventions([s for s in spans if SPAN_NAMES.match(s.name)], [PROMPT, secret])

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CORRAL_"))}
    env.update(CORRAL_HOME=str(home), PYTHONPATH=str(REPO), OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint)
    params = StdioServerParameters(command=sys.executable, args=["-m", "runner.cli", "mcp"], env=env, cwd=str(tmp_path))

    async def call() -> None:
        with (tmp_path / "mcp.err").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                await client.call_tool("corral_status", {})
                await client.call_tool("corral_controller_renew", {"controller": "nobody"})

    anyio.run(call)
    spans = collector.wait_for("tools/call corral_controller_renew")
    (tool,) = by_name(spans, "tools/call corral_status")
    assert tool.kind == "SPAN_KIND_SERVER" and tool.attributes["gen_ai.tool.name"] == "corral_status"
    assert tool.attributes["mcp.method.name"] == "tools/call" and tool.status == ""
    (refused,) = by_name(spans, "tools/call corral_controller_renew")
    assert refused.status == "ERROR" and refused.attributes["error.type"]
    ours = [s for s in spans if SPAN_NAMES.match(s.name)]
    check_conventions(ours, [secret])
    assert secret not in json.dumps([s.attributes for s in spans], default=str), "nor in the MCP SDK's own spans"


def test_a_refused_transition_says_which_guard_refused_and_why(
    service: Any, acquire: Any, memory: InMemorySpanExporter
) -> None:
    from runner.errors import RefusedError
    from runner.fence import Credential
    from runner.service.inputs.controller import RenewInput

    grant = acquire("ctl", ttl=600)
    service.controller.renew(RenewInput("ctl", grant.credential))
    held = grant.credential
    forged = Credential(held.controller_id, held.lease_id, held.generation, "f" * len(held.token))
    with pytest.raises(RefusedError) as refused:
        service.controller.renew(RenewInput("ctl", forged))
    spans = [from_sdk(s) for s in memory.get_finished_spans()]
    renewed, denied = by_name(spans, "transition controller:renew")
    assert renewed.status == "" and set(renewed.attributes["corral.guard.verdicts"]) == {"pass"}
    assert renewed.attributes["corral.state.to"] == "active"
    assert denied.status == "ERROR" and denied.attributes["error.type"] == refused.value.code
    assert refused.value.code in denied.attributes["corral.guard.verdicts"]
    names, verdicts = denied.attributes["corral.guard.names"], denied.attributes["corral.guard.verdicts"]
    assert len(names) == len(verdicts) and refused.value.details["guard"] in names
    assert "corral.state.to" not in denied.attributes, "nothing was written"
    check_conventions(spans, [held.token, forged.token])
