"""Is a concurrent history linearizable against a sequential model? The search of Porcupine.

Wing & Gong's algorithm with Lowe's memoization (the one Porcupine implements): the history's calls
and returns sorted by time in a doubly linked list; take the first call whose operation the model
accepts from the current state, remove it and its return from the list, go on; reaching a return
whose call was not taken means that order fails, so undo the last choice and try the next one. A
(set of operations taken, model state) pair seen before is not explored again, which is what keeps
the search polynomial on real histories. The set is remembered by a 128-bit Zobrist hash (a random
number per operation, XORed in and out), not as a bitset of the whole history: a bitset per visited
pair is a few kilobytes at 50,000 operations; a collision, at odds of about 2^-128 per pair, could
only make the search report an anomaly that is not one, never pass one that is.

An operation whose outcome is unknown (its client was killed, it timed out) may take effect at any
moment after its invocation, or never. Such operations are kept out of the list (in Porcupine they
return at infinity, and every later step scans past them): where the search would undo a choice, it
first tries the unknown operations invoked by then that the model says could apply in the current
state (the ``applies`` key of the operation among the ``keys`` of the state), so each step looks
only at the few that can matter. "Never" is leaving one out: once every operation with a known
outcome is placed, the history is linearizable.

The model is a function ``step(state, op) -> (new_state | None, reason)``: the state after ``op``
with its recorded outcome, or None with why that outcome is impossible from ``state``. States must
be hashable.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from chaos.history import Op

Step = Callable[[Hashable, Op], tuple[Hashable | None, str | None]]
Applies = Callable[[Op], Hashable | None]  # the key of states an unknown op may apply in; None: it never changes one
Keys = Callable[[Hashable], Iterable[Hashable]]

_END = -1
_CONTEXT = 6  # operations placed just before a failure, kept for its report
_ANY = "any"


@dataclass
class Verdict:
    """The answer for one history: linearizable or not, and where the search got stuck if not."""

    ok: bool
    steps: int  # model steps taken (the search's cost)
    blocked: Op | None = None  # the operation no order could place (at the deepest point reached)
    reason: str | None = None  # why the model refused it there
    state: Hashable | None = None  # the model's state there
    before: list[Op] = field(default_factory=list)  # the last operations placed before it


def check(
    ops: Sequence[Op],
    init: Hashable,
    step: Step,
    applies: Applies | None = None,
    keys: Keys | None = None,
) -> Verdict:
    """Whether ``ops`` (one object's history) is linearizable against ``step`` from ``init``."""
    known = [i for i, op in enumerate(ops) if op.status != "unknown"]
    entries: list[tuple[float, int, int]] = []  # (time, 0 call | 1 return, op index)
    for index in known:
        entries.append((ops[index].invoke, 0, index))
        entries.append((float(ops[index].complete or 0.0), 1, index))
    entries.sort()  # at one instant, calls before returns: such operations count as concurrent
    # The unknown operations by the key of the states they may apply in, each list by invocation time.
    unknown: dict[Hashable, tuple[list[float], list[int]]] = {}
    for index, op in sorted(((i, o) for i, o in enumerate(ops) if o.status == "unknown"), key=lambda p: p[1].invoke):
        key = applies(op) if applies is not None else _ANY
        if key is not None:
            times, indexes = unknown.setdefault(key, ([], []))
            times.append(op.invoke)
            indexes.append(index)

    def candidates(state: Hashable, before: float, taken: bytearray) -> list[int]:
        found: list[int] = []
        for key in keys(state) if keys is not None else (_ANY,):
            if key in unknown:
                times, indexes = unknown[key]
                found += [i for i in indexes[: bisect.bisect_right(times, before)] if not taken[i]]
        return sorted(found)

    count = len(entries)
    head = count  # the sentinel
    nxt = [*range(1, count), _END, 0 if count else _END]
    prv = [head, *range(count - 1), _END]
    is_call = [kind == 0 for _, kind, _ in entries]
    op_of = [index for _, _, index in entries]
    time_of = [at for at, _, _ in entries]
    call_at: dict[int, int] = {}
    return_at: dict[int, int] = {}
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

    zobrist = random.Random(0)
    marks = [zobrist.getrandbits(128) for _ in ops]
    state: Hashable = init
    taken = bytearray(len(ops))  # the operations placed
    placed_hash = 0  # their Zobrist hash
    # Each choice: (op index, the state before it, the return entry it was tried at and its rank among the
    # unknown candidates there, or -1 for a call of the list).
    stack: list[tuple[int, Hashable, int, int]] = []
    seen: set[tuple[int, Hashable]] = set()
    steps = 0
    deepest = -1
    failure: tuple[int, Hashable, list[int]] | None = None
    entry = nxt[head]
    skip = 0  # unknown candidates already tried at this return entry
    while entry != _END:
        index = op_of[entry]
        if is_call[entry]:
            steps += 1
            after, _ = step(state, ops[index])
            if after is not None:
                placed = placed_hash ^ marks[index]
                if (placed, after) not in seen:
                    seen.add((placed, after))
                    stack.append((index, state, -1, -1))
                    state, placed_hash = after, placed
                    taken[index] = 1
                    lift(index)
                    entry, skip = nxt[head], 0
                    continue
            entry = nxt[entry]
            continue
        # A return: before undoing anything, an unknown operation invoked by now may explain the state.
        chosen = False
        pool = candidates(state, time_of[entry], taken)
        for rank in range(skip, len(pool)):
            candidate = pool[rank]
            steps += 1
            after, _ = step(state, ops[candidate])
            if after is None:
                continue
            placed = placed_hash ^ marks[candidate]
            if (placed, after) in seen:
                continue
            seen.add((placed, after))
            stack.append((candidate, state, entry, rank))
            state, placed_hash = after, placed
            taken[candidate] = 1
            entry, skip, chosen = nxt[head], 0, True
            break
        if chosen:
            continue
        if len(stack) > deepest:
            deepest = len(stack)
            failure = (index, state, [i for i, *_ in stack[-_CONTEXT:]])
        if not stack:
            break
        undone, state, at, rank = stack.pop()
        taken[undone] = 0
        placed_hash ^= marks[undone]
        if rank < 0:
            unlift(undone)
            entry, skip = nxt[call_at[undone]], 0
        else:
            entry, skip = at, rank + 1
    else:
        return Verdict(True, steps)
    assert failure is not None
    blocked, where, before = failure
    _, reason = step(where, ops[blocked])
    if reason is None:
        reason = "its outcome is possible here, but no order of the operations concurrent with it explains the rest"
    return Verdict(False, steps, ops[blocked], reason, where, [ops[i] for i in before])
