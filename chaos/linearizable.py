"""Is a concurrent history linearizable against a sequential model? The search of Porcupine.

Wing & Gong's algorithm with Lowe's memoization (the one Porcupine implements): the history's calls
and returns sorted by time in a doubly linked list; take the first call whose operation the model
accepts from the current state, remove it and its return from the list, go on; reaching a return
whose call was not taken means that order fails, so undo the last choice and try the next one. A
(set of operations taken, model state) pair seen before is not explored again, which is what keeps
the search polynomial on real histories.

An operation whose outcome is unknown (its client was killed or it timed out) returns at infinity:
it may take effect at any moment after its invocation, or never. The model is asked only to apply
its effect; "never" is leaving it out, and reaching the first return at infinity means every
operation with a known outcome has been placed: the history is linearizable.

The model is a function ``step(state, op) -> (new_state | None, reason)``: the state after ``op``
with its recorded outcome, or None with why that outcome is impossible from ``state``. States must
be hashable. Operations are numbered 0..n-1 in the list given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from chaos.history import Op

Step = Callable[[Hashable, Op], tuple[Hashable | None, str | None]]

_END = -1
_CONTEXT = 6  # operations placed just before a failure, kept for its report


@dataclass
class Verdict:
    """The answer for one history: linearizable or not, and where the search got stuck if not."""

    ok: bool
    steps: int  # model steps taken (the search's cost)
    blocked: Op | None = None  # the operation no order could place (at the deepest point reached)
    reason: str | None = None  # why the model refused it there
    state: Hashable | None = None  # the model's state there
    before: list[Op] = field(default_factory=list)  # the last operations placed before it


def check(ops: Sequence[Op], init: Hashable, step: Step) -> Verdict:
    """Whether ``ops`` (one object's history) is linearizable against ``step`` from ``init``."""
    entries: list[tuple[float, int, int]] = []  # (time, 0 call | 1 return, op index)
    for index, op in enumerate(ops):
        entries.append((op.invoke, 0, index))
        entries.append((math.inf if op.status == "unknown" else float(op.complete or 0.0), 1, index))
    entries.sort()  # at one instant, calls before returns: such operations count as concurrent
    count = len(entries)
    head = count  # the sentinel
    nxt = [*range(1, count), _END, 0 if count else _END]
    prv = [head, *range(count - 1), _END]
    is_call = [kind == 0 for _, kind, _ in entries]
    op_of = [index for _, _, index in entries]
    call_at = [0] * len(ops)
    return_at = [0] * len(ops)
    for position, (_, kind, index) in enumerate(entries):
        (call_at if kind == 0 else return_at)[index] = position

    def lift(index: int) -> None:
        for node in (call_at[index], return_at[index]):
            nxt[prv[node]] = nxt[node]
            if nxt[node] != _END:
                prv[nxt[node]] = prv[node]

    def unlift(index: int) -> None:
        for node in (return_at[index], call_at[index]):
            nxt[prv[node]] = node
            if nxt[node] != _END:
                prv[nxt[node]] = node

    state: Hashable = init
    taken = 0  # a bitset of the operations placed
    stack: list[tuple[int, Hashable]] = []
    seen: set[tuple[int, Hashable]] = set()
    steps = 0
    deepest = -1
    failure: tuple[int, Hashable, list[int]] | None = None
    entry = nxt[head]
    while entry != _END:
        index = op_of[entry]
        if is_call[entry]:
            steps += 1
            after, _ = step(state, ops[index])
            if after is not None:
                placed = taken | (1 << index)
                if (placed, after) not in seen:
                    seen.add((placed, after))
                    stack.append((index, state))
                    state, taken = after, placed
                    lift(index)
                    entry = nxt[head]
                    continue
            entry = nxt[entry]
            continue
        if ops[index].status == "unknown":
            return Verdict(True, steps)  # only operations that may never take effect are left
        if len(stack) > deepest:
            deepest = len(stack)
            failure = (index, state, [i for i, _ in stack[-_CONTEXT:]])
        if not stack:
            break
        undone, state = stack.pop()
        taken &= ~(1 << undone)
        unlift(undone)
        entry = nxt[call_at[undone]]
    else:
        return Verdict(True, steps)
    assert failure is not None
    blocked, where, before = failure
    _, reason = step(where, ops[blocked])
    if reason is None:
        reason = "its outcome is possible here, but no order of the operations concurrent with it explains the rest"
    return Verdict(False, steps, ops[blocked], reason, where, [ops[i] for i in before])
