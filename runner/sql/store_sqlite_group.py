"""Group commit: the writers of one SQLite store object (threads of one process) share a commit.

One fsync per transaction caps a store at the disk's flush rate, however many writers a process
hosts (``corral serve`` with many coordinators, a runner with many plans). Here the writers of one
:class:`~runner.sql.store_sqlite.SQLiteStore` that arrive while another's transaction is open or
committing join one **group**: one ``BEGIN IMMEDIATE`` … ``COMMIT`` on the store's write connection,
in which each writer's transaction is its own ``SAVEPOINT`` (the first's is the transaction itself),
run one at a time, in arrival order.
The group commits once, when its last member is done and nobody waits to join; every member's
``write()`` returns only after that ``COMMIT`` did (so after its fsync, with ``synchronous=FULL``).

What a writer may rely on (the store port's contract, ``runner.store.abc.Store.write``):

* Its body runs alone on the connection and sees everything committed before, plus the writes of the
  members before it in its group (released savepoints): a compare-and-set, a fence or a cursor is
  judged against the state as committed-so-far, at the moment of the write, as without groups.
* A body that raises rolls back to its savepoint: none of its writes commit, and the others' stand.
  (The first member's failure rolls the transaction back: nobody else has written in it yet, and
  the writers waiting to join start again in a new group.)
* Its ``write()`` returns only once the group's ``COMMIT`` has returned. If the group cannot commit
  (a disk error, a full disk, SQLite ending the transaction), every member that was done raises
  (``store_unavailable``, or ``store_corrupt``; ``store_busy`` past the budget): nothing of theirs
  was written, exactly as when a lone transaction's ``COMMIT`` fails.
* Writers of other processes (other store objects) still wait in the FIFO write queue
  (``runner.sql.store_sqlite_writelock``): a group takes one place in it, for all its members.

A group holds at most :data:`GROUP_MAX` members, so one that keeps being joined still commits and
gives the write lock up. The next group gathers while one commits (its leader waits for that
commit before its ``BEGIN``): the members that come during an fsync share the next one.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from collections.abc import Callable

GROUP_MAX = 64
"""Most writers one commit serves (a group that keeps being joined still commits this soon)."""


class Group:
    """One transaction shared by writers; exactly one of them holds its turn at a time.

    Invariant: from the leader's ``BEGIN`` to the ``COMMIT``, one member thread at a time uses the
    connection: the leader first, then each in ``turns`` order, handed on explicitly (a lock per
    waiter, released by the member before it); the last one commits for all.
    """

    __slots__ = ("_acked", "dead", "failure", "place", "ran", "size", "turns")

    def __init__(self) -> None:
        self.turns: deque[threading.Lock] = deque()  # members waiting for their turn, in arrival order
        self.size = 1
        self.ran = 0  # members that had their turn (the first needs no savepoint)
        self.dead = False  # no transaction to join (it never began, or was lost): the waiters start again
        # Why the members that were done were not committed (None: committed, or not yet decided).
        self.failure: Callable[[], BaseException] | None = None
        self.place: object = None  # the write queue's place the group holds (None: no queue)
        self._acked = threading.Lock()  # held until the group is decided (a lock: cheaper than an Event)
        self._acked.acquire()

    def decided(self) -> None:
        """The group committed or failed: wake everyone waiting for it."""
        self._acked.release()

    def wait_decided(self) -> None:
        """Block until :meth:`decided` (at once if it was)."""
        self._acked.acquire()
        self._acked.release()


_EVERY: weakref.WeakSet[GroupCommit] = weakref.WeakSet()


def _forked() -> None:
    # A forked child has only the forking thread: a group open in another thread of the parent would
    # never be handed on or committed there, so the child starts with none.
    for groups in list(_EVERY):
        groups._gate = threading.Lock()
        groups._open = groups._last = None


os.register_at_fork(after_in_child=_forked)


class GroupCommit:
    """Forms the groups of one store's writers (thread-safe).

    Args:
        begin: opens the transaction for a new group (the write queue, then ``BEGIN IMMEDIATE``);
            returns the queue's place, or raises (nothing held then).
        end: commits (or, if the group has a failure, rolls back) and gives the place up; records a
            failure of its own on the group.
    """

    __slots__ = ("__weakref__", "_begin", "_end", "_gate", "_last", "_open")

    def __init__(self, begin: Callable[[], object], end: Callable[[Group], None]) -> None:
        self._begin = begin
        self._end = end
        self._gate = threading.Lock()
        self._open: Group | None = None  # the group new writers join
        self._last: Group | None = None  # the newest group: the next leader waits for its commit
        _EVERY.add(self)

    def join(self) -> Group:
        """Wait for this thread's turn in a group whose transaction is open; return the group."""
        while True:
            turn = None
            with self._gate:
                group = self._open
                if group is not None and group.size < GROUP_MAX:
                    group.size += 1
                    turn = threading.Lock()
                    turn.acquire()
                    group.turns.append(turn)
                else:
                    group = self._open = Group()
                    previous, self._last = self._last, group
            if turn is None:
                self._lead(group, previous)
                return group
            try:
                turn.acquire()  # released by the member before us
            except BaseException:
                self._abandon(group, turn)
                raise
            if not group.dead:
                return group
            # The group never began (or was lost before our turn): start again, in a new one.

    def _lead(self, group: Group, previous: Group | None) -> None:
        if previous is not None:
            previous.wait_decided()  # one connection: our BEGIN comes after its COMMIT
        try:
            group.place = self._begin()
        except BaseException:
            with self._gate:
                group.dead = True
                if self._open is group:
                    self._open = None
                waiting = list(group.turns)
                group.turns.clear()
            group.decided()
            for turn in waiting:
                turn.release()
            raise

    def _abandon(self, group: Group, turn: threading.Lock) -> None:
        """An interrupted wait for our turn: leave the queue, or pass on a turn that just came."""
        with self._gate:
            if turn in group.turns:
                group.turns.remove(turn)
                group.size -= 1
                return
        if not group.dead:
            self.leave(group, lost=None)

    def leave(self, group: Group, lost: Callable[[], BaseException] | None) -> bool:
        """This member is done: hand the turn on, or commit the group. True if this thread committed.

        ``lost``: this member's body ended the whole transaction (SQLite rolled it back): the members
        before it are not committed, and the ones waiting start again in a new group.
        """
        with self._gate:
            if lost is not None and group.failure is None:
                group.failure = lost
            nxt = group.turns.popleft() if group.turns and group.failure is None else None
            if nxt is None:
                if self._open is group:
                    self._open = None  # closed: whoever comes now forms the next group
                waiting = list(group.turns)
                group.turns.clear()
                if waiting:
                    group.dead = True
        if nxt is not None:
            nxt.release()
            return False
        try:
            self._end(group)
        finally:
            group.decided()
            for turn in waiting:
                turn.release()
        return True
