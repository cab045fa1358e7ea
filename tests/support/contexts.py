"""Call a registered guard, update or effect directly, with a real :class:`~runner.context.Context`.

The context is the one the engine builds: the instance as stored, the request's params, secrets and
observations, the store's clock, and a read view of a real SQLite store (a read transaction held for
the call, as the engine holds its transaction while guards run). Names resolve through the registries
(``GUARDS``, ``UPDATES``, ``EFFECTS``), never by importing the function, so a test also proves the
built-in is registered under that name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.context import Context, EffectResult, Instance, Rejection, Update
from runner.effects import EFFECTS
from runner.guards import GUARDS
from runner.store.abc import Store
from runner.updates import UPDATES


class Contexts:
    """Instances written to ``store`` and built-ins called on them."""

    def __init__(self, store: Store, actor: str = "tester") -> None:
        self.store = store
        self.actor = actor

    def put(self, instance_id: str, state: str, data: Mapping[str, Any] | None = None) -> Instance:
        """Write (or overwrite) ``instance_id`` in ``state``; its machine is the id's prefix."""
        machine = instance_id.split("/", 1)[0]
        with self.store.write() as tx:
            current = tx.get(instance_id) or Instance(instance_id, machine, "absent", 0, {})
            return tx.put(current, state, dict(data or {}))

    def absent(self, instance_id: str, state: str = "absent") -> Instance:
        """An instance never written (version 0), as the engine reads it before its first transition."""
        return Instance(instance_id, instance_id.split("/", 1)[0], state, 0, {})

    def context(
        self,
        instance: Instance,
        view: Any,
        *,
        trigger: str = "test",
        params: Mapping[str, Any] | None = None,
        secrets: Mapping[str, str] | None = None,
        observations: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        resources: Mapping[str, Any] | None = None,
        gate: Any = None,
    ) -> Context:
        return Context(
            instance=instance,
            trigger=trigger,
            params=dict(params or {}),
            secrets=dict(secrets or {}),
            observations=dict(observations or {}),
            now=self.store.now(),
            view=view,
            actor=self.actor,
            data=dict(instance.data if data is None else data),
            resources=dict(resources or {}),
            gate=gate,
        )

    def guard(
        self, name: str, instance: Instance, with_args: Mapping[str, Any] | None = None, **request: Any
    ) -> Rejection | None:
        """The verdict of guard ``name`` on ``instance`` for this request."""
        entry = GUARDS.get(name)
        assert entry is not None, f"no guard {name!r} is registered"
        with self.store.read() as view:
            return entry.fn(self.context(instance, view, **request), **dict(with_args or {}))

    def refusal(self, name: str, instance: Instance, **request: Any) -> Rejection:
        """Guard ``name``'s refusal (the test fails if it passes)."""
        refused = self.guard(name, instance, **request)
        assert refused is not None, f"guard {name!r} passed"
        return refused

    def update(
        self, name: str, instance: Instance, with_args: Mapping[str, Any] | None = None, **request: Any
    ) -> Update:
        entry = UPDATES.get(name)
        assert entry is not None, f"no update {name!r} is registered"
        with self.store.read() as view:
            return entry.fn(self.context(instance, view, **request), **dict(with_args or {}))

    def effect(self, name: str, instance: Instance, **request: Any) -> EffectResult:
        """Run effect ``name`` as the engine's second phase does: no store view, the intent's data."""
        entry = EFFECTS.get(name)
        assert entry is not None, f"no effect {name!r} is registered"
        return entry.fn(self.context(instance, None, **request))
