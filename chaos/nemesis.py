"""The nemesis: faults injected into one store's clients (and its server) while they work.

Kinds, drawn from the nemesis's own seeded stream in shuffled rounds so every kind comes up in every
round (a short run still injects each):

- ``kill``: kill -9 of a client while its next operation is in flight (the client replaces its worker);
- ``pause``: SIGSTOP of a client for longer than the lease TTL, then SIGCONT: it comes back believing
  it still holds what it held;
- ``clock_jump``: a client's clock (the clock a SQLite store judges expiry by; PostgreSQL judges by
  its server's, so there the jump is harmless by design: see :mod:`chaos.worker`) jumped forward or
  back by more than a TTL, and set right again a few seconds later;
- ``pg_restart`` (PostgreSQL only): ``pg_ctl restart -m immediate`` of the server, every connection cut
  mid-transaction, crash recovery on start.
"""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chaos.clients import Client, Recorder

KINDS = ("kill", "pause", "clock_jump")
PG_KINDS = (*KINDS, "pg_restart")


def set_clock(path: Path, offset: float) -> None:
    """Write a client's clock offset atomically (the worker reads it at every call)."""
    part = path.with_suffix(".part")
    part.write_text(f"{offset:.3f}\n", encoding="utf-8")
    os.replace(part, path)


@dataclass
class Fault:
    """One injected fault, for the report."""

    kind: str
    store: str
    target: str
    at: float
    detail: str = ""
    until: float | None = None  # when a clock jump was set right (None: not yet)


@dataclass
class Nemesis:
    """One store's nemesis thread."""

    store: str
    clients: list[Client]
    recorder: Recorder
    seed: int
    ttl: int
    interval: tuple[float, float] = (0.8, 2.0)
    restart: Callable[[], None] | None = None  # the server's immediate restart, when it has one
    faults: list[Fault] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}:nemesis:{self.store}")
        self.thread = threading.Thread(target=self._loop, name=f"nemesis-{self.store}", daemon=True)
        self._undo: list[tuple[float, Callable[[], None]]] = []

    @property
    def kinds(self) -> tuple[str, ...]:
        return PG_KINDS if self.restart is not None else KINDS

    def counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.faults)

    def plan_round(self) -> list[tuple[str, int, float, float]]:
        """One round: every kind once, shuffled, each with its target, size and wait before it."""
        kinds = list(self.kinds)
        self.rng.shuffle(kinds)
        return [
            (kind, self.rng.randrange(len(self.clients)), self.rng.random(), self.rng.uniform(*self.interval))
            for kind in kinds
        ]

    def _wait(self, seconds: float) -> bool:
        """Sleep, undoing due pauses and clock jumps meanwhile; False once stopped."""
        end = self.recorder.now() + seconds
        while not self.stop.is_set():
            now = self.recorder.now()
            for item in [u for u in self._undo if u[0] <= now]:
                self._undo.remove(item)
                item[1]()
            if now >= end:
                return True
            self.stop.wait(min(0.05, end - now))
        return False

    def _inject(self, fault: Fault, target: Client, size: float) -> None:
        """Inject one fault (and schedule setting it right); its detail goes in ``fault``."""
        now = self.recorder.now()
        if fault.kind == "kill":
            target.arm_kill()
            fault.detail = "armed for the next operation"
        elif fault.kind == "pause":
            seconds = self.ttl + 1 + size * 2
            if target.pause():
                self._undo.append((now + seconds, target.resume))
            fault.detail = f"{seconds:.1f} s"
        elif fault.kind == "clock_jump":
            offset = (1 if size < 0.5 else -1) * (self.ttl * 2 + size * 20)
            set_clock(target.clock, offset)

            def right() -> None:
                set_clock(target.clock, 0.0)
                fault.until = self.recorder.now()  # when it really was set right: the checker's window

            self._undo.append((now + 2 + size * 3, right))
            fault.detail = f"{offset:+.1f} s"
        else:
            assert fault.kind == "pg_restart" and self.restart is not None
            self.restart()

    def _loop(self) -> None:
        try:
            while True:
                for kind, index, size, wait in self.plan_round():
                    if not self._wait(wait):
                        return
                    target = self.clients[index]
                    fault = Fault(
                        kind, self.store, "server" if kind == "pg_restart" else target.name, self.recorder.now()
                    )
                    self.faults.append(fault)
                    self._inject(fault, target, size)
        except Exception as exc:  # noqa: BLE001 - reason: a nemesis that broke is reported, not raised in a thread
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            for _, undo in self._undo:
                undo()
            self._undo.clear()
