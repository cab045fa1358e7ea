"""``GET /metrics`` on a real ``corral serve``: what it counts (transitions, refusals, waits and their
latency, plan steps, SSE subscribers) and reads from the store at scrape time (leases, receipts, agents,
a lease another process acquired included); behind the bearer token; and every name and label linted
against Prometheus's rules (``promtool check metrics`` too, where it is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.http.conftest import SHA, Served, acquire, renew

pytestmark = pytest.mark.slow

NAME = re.compile(r"^corral_[a-z][a-z0-9_]*$")
LABEL = re.compile(r"^[a-z][a-z0-9_]*$")
# Labels that would grow without bound (one series per lease, path or caller): never allowed.
HIGH_CARDINALITY = {"id", "instance", "instance_id", "controller", "controller_id", "lease", "pane_id", "plan_id",
                    "receipt", "path", "url", "token", "credential", "agent", "name", "cwd"}  # fmt: skip
UNITS = ("_seconds", "_bytes")


def scrape(client: Any) -> dict[str, Any]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    lint(text)
    return {family.name: family for family in text_string_to_metric_families(text)}


def lint(text: str) -> None:
    """Prometheus's naming rules, as ``promtool check metrics`` applies them (and promtool itself if here)."""
    families = list(text_string_to_metric_families(text))
    assert families
    for family in families:
        assert NAME.match(family.name), family.name
        assert family.documentation, f"{family.name} has no HELP"
        if family.type == "counter":
            assert all(s.name == f"{family.name}_total" for s in family.samples), family.name
        else:
            assert not family.name.endswith("_total"), f"{family.name}: only counters end in _total"
        if family.type == "histogram":
            assert family.name.endswith(UNITS), f"{family.name}: a histogram names its base unit"
        assert not re.search(r"_(milliseconds|ms|minutes|hours|kilobytes|percent)(_|$)", family.name), family.name
        for sample in family.samples:
            for label in sample.labels:
                assert LABEL.match(label), f"{family.name}: label {label!r}"
                assert label not in HIGH_CARDINALITY, f"{family.name}: label {label!r} is high-cardinality"
    promtool = shutil.which("promtool")
    if promtool is not None:
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def value(families: dict[str, Any], name: str, sample: str | None = None, **labels: str) -> float:
    """The sum of the samples of ``name`` (``sample``: which series, e.g. ``_count``) with these labels."""
    family = families.get(name)
    if family is None:
        return 0.0
    wanted = sample or (f"{name}_total" if family.type == "counter" else name)
    return sum(
        s.value for s in family.samples if s.name == wanted and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_metrics_count_what_serve_did_and_read_the_store(serve: Any, corral: Any, tmp_path: Path) -> None:
    served: Served = serve()
    with served.client() as client:
        before = scrape(client)
        assert value(before, "corral_transitions", machine="controller") == 0
        granted = acquire(client, "ctl")
        assert renew(client, "ctl", granted["credential"]).status_code == 200
        again = client.post(
            "/api/controllers/ctl/acquire", json={"authority_ref": "T", "authority_sha256": SHA, "ttl_seconds": 60}
        )
        assert again.status_code == 409
        refusal = again.json()["error"]["code"]
        waited = client.post(
            "/api/collect",
            json={"controller": "ctl", "receipts": ["r-nope"], "timeout": 0.2},
            headers={"Corral-Credential": granted["credential"]},
        )
        assert waited.status_code >= 400
        wait_code = waited.json()["error"]["code"]
        # Another process acquires a lease: the store's gauges see it, serve's counters do not.
        other = corral(
            "controller", "acquire", "--controller", "cli-ctl", "--authority-ref", "T-2",
            "--authority-sha256", SHA, "--ttl", "600", "--json",
        )  # fmt: skip
        assert other.returncode == 0, other.stderr
        after = scrape(client)
    assert value(after, "corral_transitions", machine="controller", trigger="acquire") == 1
    assert value(after, "corral_transitions", machine="controller", trigger="renew") == 1
    assert value(after, "corral_refusals", code=refusal) == 1
    assert value(after, "corral_waits", tool="corral_collect", outcome=wait_code) == 1
    assert value(after, "corral_wait_duration_seconds", "corral_wait_duration_seconds_count") == 1
    assert value(after, "corral_leases", machine="controller") == 2, "both leases: serve's and the CLI's"
    assert value(after, "corral_receipts_open") == 0
    with served.client() as client:
        text = client.get("/metrics").text
    assert granted["credential"] not in text and "cli-ctl" not in text and 'ctl"' not in text


def test_sse_subscribers_and_plan_steps(serve: Any, tmp_path: Path) -> None:
    served: Served = serve()
    opened = threading.Event()
    stop = threading.Event()

    def subscribe() -> None:
        with served.client() as client, client.stream("GET", "/api/events") as stream:
            assert stream.status_code == 200
            opened.set()
            stop.wait(30)

    thread = threading.Thread(target=subscribe, daemon=True)
    thread.start()
    assert opened.wait(30)
    with served.client() as client:
        assert value(scrape(client), "corral_sse_subscribers") == 1
        stop.set()
        thread.join(30)
        deadline = time.monotonic() + 10
        while value(scrape(client), "corral_sse_subscribers") != 0:
            assert time.monotonic() < deadline, "the subscriber's stream ended: the gauge goes back to 0"
            time.sleep(0.1)
        project = tmp_path / "project"
        project.mkdir()
        plan = {
            "plan": "metrics-1",
            "recipe": "review",
            "controller": "ctl",
            "inputs": {"cwd": str(project), "prompt": "echo hi", "kind": "script", "timeout": 30,
                       "authority_ref": "T-1", "authority_sha256": SHA},
        }  # fmt: skip
        submitted = client.post("/api/plans", json={"plan": plan})
        assert submitted.status_code == 202, submitted.text
        deadline = time.monotonic() + 60
        while (state := client.get("/api/plans/metrics-1").json()["state"]) not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, state
            time.sleep(0.1)
        assert state == "succeeded"
        families = scrape(client)
    steps = value(families, "corral_plan_steps", state="succeeded")
    assert steps == 6 and value(families, "corral_plan_steps", state="running") == 6, "each step: running, then done"
    assert value(families, "corral_transitions", machine="plan", trigger="finish") == 1
    assert {"corral_agents", "corral_agent_runs", "corral_agent_tokens"} <= set(families)


def test_metrics_are_behind_the_token(serve: Any, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("metrics-bearer-token-0123456789")
    path.chmod(0o600)
    served: Served = serve("--auth-token-file", str(path), token="metrics-bearer-token-0123456789")
    with served.client(token="") as anonymous:
        denied = anonymous.get("/metrics")
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "unauthorized"
        wrong = anonymous.get("/metrics", headers={"Authorization": "Bearer wrong"})
        assert wrong.status_code == 401
    with served.client() as client:
        scrape(client)
