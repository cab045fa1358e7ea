"""The invariants ``corral check`` proves: those a machine declares and those it always gets.

Built-in invariants hold for every machine: a terminal state is never left; an outcome lands only on
the intent it belongs to (an intermediate state is left only by its outcome or a transition declared
from it); and where the machine contends for a lease, generations never decrease and no effect fires
under a superseded generation or an expired lease.
"""

from __future__ import annotations

from runner.definitions.model import InvariantSpec, MachineSpec


def builtin_invariants(spec: MachineSpec, leased: bool) -> list[InvariantSpec]:
    """The invariants corral checks for ``spec`` without being told; ``leased``: it has a lease."""
    out = [
        InvariantSpec("terminal_final", "a terminal state is never left", "terminal_final", builtin=True),
        InvariantSpec(
            "intermediate_exits",
            "an intermediate state is left only by its own intent's outcome or a transition declared from it",
            "intermediate_exits",
            builtin=True,
        ),
    ]
    if leased:
        out.append(
            InvariantSpec(
                "generation_monotonic", "the lease's generation never decreases", "generation_monotonic", builtin=True
            )
        )
        if any(t.two_phase for t in spec.transitions):
            out.append(
                InvariantSpec(
                    "effects_fenced",
                    "no effect fires under a superseded generation or an expired lease",
                    "effects_fenced",
                    builtin=True,
                )
            )
    return out


STATE_KINDS = frozenset({"one_live_holder", "holds", "at_most_one"})
"""Kinds judged on every state reached; the others are judged on every step taken."""
