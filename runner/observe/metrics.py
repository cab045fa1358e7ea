"""``corral serve``'s Prometheus metrics (``corral[metrics]``: prometheus-client), imported by serve only.

Two sources, and each metric says which (``docs/observability.md``):

- **This process** (counters and a histogram, reset when serve restarts): what serve's own process
  did, reported through :mod:`runner.observe.meter` as it happens: transitions it fired (its HTTP
  API's calls and the plans it runs), guard refusals, waits and their latency, plan step records,
  store busy answers, SSE subscribers. A CLI command or another server on the same store is not in them.
- **The store, at scrape time** (gauges): live leases by machine and state, receipts open, what the
  agents the store holds have run and spent. Read from the store's grouped counts and the agent
  slots (one aggregate query and one slot list per scrape, never the event log).

Names follow Prometheus's rules: ``corral_`` prefix, base units (``_seconds``), counters end in
``_total``. Invariant: no label holds an id, a path, a controller, an instance or a token: labels are
machine, trigger, state, code, tool, kind and outcome names, each from a small fixed set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Waits last from milliseconds (an agent already settled) to the hour a review may take."""


@dataclass
class StoreFacts:
    """What one scrape read from the store."""

    leases: dict[tuple[str, str], int] = field(default_factory=dict)
    """Live (not ended) lease instances by (machine, state)."""
    receipts: dict[str, int] = field(default_factory=dict)
    """Open (not ended) receipts by state."""
    agent_runs: dict[str, int] = field(default_factory=dict)
    """Runs of the agents the store holds, by kind."""
    agent_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens those runs spent, by kind (where the driver reads them)."""
    agents: dict[tuple[str, str], int] = field(default_factory=dict)
    """The agents the store holds, by (kind, status)."""


class _StoreCollector(Collector):
    def __init__(self, read: Callable[[], StoreFacts]) -> None:
        self.read = read

    def collect(self) -> Iterator[Any]:
        facts = self.read()
        leases = GaugeMetricFamily(
            "corral_leases", "Live (not ended) lease instances by machine and state.", labels=["machine", "state"]
        )
        for (machine, state), n in sorted(facts.leases.items()):
            leases.add_metric([machine, state], n)
        yield leases
        receipts = GaugeMetricFamily("corral_receipts_open", "Receipts not yet ended, by state.", labels=["state"])
        for state, n in sorted(facts.receipts.items()):
            receipts.add_metric([state], n)
        yield receipts
        agents = GaugeMetricFamily(
            "corral_agents", "Agents the store holds, by kind and status.", labels=["kind", "status"]
        )
        for (kind, status), n in sorted(facts.agents.items()):
            agents.add_metric([kind, status], n)
        yield agents
        runs = GaugeMetricFamily(
            "corral_agent_runs", "Runs of the agents the store holds (their spend records), by kind.", labels=["kind"]
        )
        for kind, n in sorted(facts.agent_runs.items()):
            runs.add_metric([kind], n)
        yield runs
        tokens = GaugeMetricFamily(
            "corral_agent_tokens", "Tokens the runs of the agents the store holds spent, by kind.", labels=["kind"]
        )
        for kind, n in sorted(facts.agent_tokens.items()):
            tokens.add_metric([kind], n)
        yield tokens

    def describe(self) -> Iterator[Any]:
        return iter(())  # read at scrape time only: never at registration (no store read then)


class Metrics:
    """The registry of one ``corral serve``, and the :class:`runner.observe.meter.Sink` it reports to."""

    def __init__(self, read_store: Callable[[], StoreFacts]) -> None:
        registry = CollectorRegistry(auto_describe=False)
        self.registry = registry
        self.transitions = Counter(
            "corral_transitions", "Transitions this process fired, by machine and trigger.", ["machine", "trigger"],
            registry=registry,
        )  # fmt: skip
        self.refusals = Counter(
            "corral_refusals", "Guard refusals in this process, by rejection code.", ["code"], registry=registry
        )
        self.steps = Counter(
            "corral_plan_steps", "Plan step records this process committed, by state.", ["state"], registry=registry
        )
        self.waits = Counter(
            "corral_waits", "Waits this process served, by tool and outcome.", ["tool", "outcome"], registry=registry
        )
        self.wait_seconds = Histogram(
            "corral_wait_duration_seconds", "How long the waits this process served took, by tool.", ["tool"],
            buckets=WAIT_BUCKETS, registry=registry,
        )  # fmt: skip
        self.busy = Counter(
            "corral_store_busy", "Busy answers from the store in this process: retried, or the budget gave up.",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.sse = Gauge("corral_sse_subscribers", "Event streams open on this server.", registry=registry)
        registry.register(_StoreCollector(read_store))

    # --- the meter sink ---------------------------------------------------------------------------------

    def transition(self, machine: str, trigger: str) -> None:
        self.transitions.labels(machine, trigger).inc()

    def refused(self, code: str) -> None:
        self.refusals.labels(code).inc()

    def step(self, state: str) -> None:
        self.steps.labels(state).inc()

    def waited(self, tool: str, outcome: str, seconds: float) -> None:
        self.waits.labels(tool, outcome).inc()
        self.wait_seconds.labels(tool).observe(seconds)

    def store_busy(self, outcome: str) -> None:
        self.busy.labels(outcome).inc()

    def subscribers(self, delta: int) -> None:
        self.sse.inc(delta)

    def exposition(self) -> bytes:
        """The text exposition format (reads the store: call it in a worker thread)."""
        return generate_latest(self.registry)
