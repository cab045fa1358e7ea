"""A first-come, first-served queue in front of SQLite's write lock, across processes and threads.

SQLite serves its write lock by polling: a writer that finds it taken sleeps and tries again, so a
process that commits and begins again at once keeps winning while sleepers miss every release
(8 writers: p99 latency 100x one writer's, min/max share of the work 0.3-0.65). This queue makes
them wait in the kernel, in arrival order, and hands the lock to the next in line at release.

The queue lives in a lock file beside the database (``<db>.lock``), with open-file-description
byte-range locks (Linux ``F_OFD_SETLK``/``F_OFD_SETLKW``: owned by one ``open()``, so two threads, or
two stores in one process, exclude each other like two processes do). The kernel drops them when
the last descriptor closes, so a writer killed with ``kill -9`` while waiting or holding leaves no
stale entry behind. The protocol:

1. Take a ticket: one more than the 8-byte counter at the start of the file (page cache only: a
   counter lost in a crash is harmless, the kernel dropped every lock with it).
2. Write-lock byte ``BASE + ticket`` for the whole wait and hold, then write the counter: everyone
   who comes later takes a higher ticket and sees us. (A byte already taken: try the next one.)
3. Wait for a shared lock on ``[BASE, BASE + ticket)``: the kernel grants it once no earlier ticket
   is held, whether its owner finished, gave up or died. That is the FIFO: a later ticket's range
   covers ours, an earlier one's does not.
4. Release: unlock everything from ``BASE`` on (one call).

Uncontended, steps 2 and 3 are one call (a write lock on ``[BASE, BASE + ticket]``) and the counter
is left as it was (a later writer finds the byte taken and moves on), so a write pays three system
calls: read the counter, lock, unlock. Reading and writing the counter
is not atomic: two writers arriving together may read the same value (the second finds the byte
taken and moves on), and a writer that read the counter just before another locked its byte can
end up one place ahead of it. That is a tie between two arrivals, never a starvation, and never a
safety issue: the queue only orders writers, SQLite's own lock is what excludes them.

The blocking wait of step 3 has no timeout in the kernel, so a contended wait runs it in a helper
thread and waits for that thread up to the deadline; a waiter that gives up unlocks its ticket
(those behind it move up) and leaves the descriptor to the helper, which closes it when its call
returns.

Where the queue cannot work (no OFD locks on this platform, or the lock file cannot be created or
opened for writing), :meth:`WriteQueue.open` returns None and the store falls back to SQLite's own
busy handling alone: correct, only not fair. The lock file is never deleted (a waiter may hold it
open); it takes the mode of the database file, so it is as private as the store.
"""

from __future__ import annotations

import errno
import fcntl as fcntl_module
import os
import stat
import struct
import threading
import time
from dataclasses import dataclass
from fcntl import F_RDLCK, F_UNLCK, F_WRLCK, fcntl
from pathlib import Path

from runner.log import get_logger

logger = get_logger(__name__)

# Linux only (3.15+); elsewhere None, and the store does without the queue.
F_OFD_SETLK: int | None = getattr(fcntl_module, "F_OFD_SETLK", None)
F_OFD_SETLKW: int | None = getattr(fcntl_module, "F_OFD_SETLKW", None)

# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
# (l_pid must be 0 for OFD locks), padded to the native alignment of off_t.
_FLOCK = struct.Struct("@hhqqi4x")
_SEEK_SET = 0
BASE = 8  # ticket t is byte BASE + t (t >= 1); the counter is the file's first 8 bytes
_BUSY = (errno.EAGAIN, errno.EACCES)
_SETLK = F_OFD_SETLK if F_OFD_SETLK is not None else -1  # -1: never used (WriteQueue.open returns None)
_UNLOCK_ALL = _FLOCK.pack(F_UNLCK, _SEEK_SET, BASE, 0, 0)  # every byte from BASE on (length 0: to any end)
_forks = [0]  # forks of this process so far, as seen by the child (getpid per write is a syscall)


def _forked() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_forked)


def lock_path(database: Path) -> Path:
    """Where the queue of ``database`` lives: ``<db>.lock`` beside it."""
    return database.with_name(database.name + ".lock")


def _set_counter(fd: int, ticket: int) -> None:
    # Not atomic with the read: two writers may read the same value; the one whose byte lock fails
    # moves on (see ``_join``), and a counter written back a little low only costs a later writer a
    # few busy tries. The queue orders writers; SQLite's own lock is what excludes them.
    os.pwrite(fd, ticket.to_bytes(8, "little"), 0)


def _lock(fd: int, kind: int, start: int, length: int, *, wait: bool) -> bool:
    """One OFD lock request; False if not ``wait`` and someone else holds a conflicting lock."""
    command = F_OFD_SETLKW if wait else F_OFD_SETLK
    assert command is not None, "WriteQueue.open checked the platform"
    try:
        fcntl(fd, command, _FLOCK.pack(kind, _SEEK_SET, start, length, 0))
    except OSError as exc:
        if not wait and exc.errno in _BUSY:
            return False
        raise
    return True


@dataclass(slots=True)
class Place:
    """A place in the queue, held from :meth:`WriteQueue.acquire` to :meth:`WriteQueue.release`."""

    fd: int
    ticket: int
    waited: float  # seconds spent in the queue
    attempts: int  # 1 when the lock was free at once; 2 when it was waited for


class QueueTimeout(Exception):
    """The deadline passed in the queue; nothing is held any more."""

    def __init__(self, waited: float, attempts: int) -> None:
        super().__init__(f"waited {waited:.3f} s")
        self.waited = waited
        self.attempts = attempts


class WriteQueue:
    """The FIFO write queue of one database file, for one store object (thread-safe).

    Each acquisition uses its own open file description (from a small pool), so threads of one
    process queue against each other in the kernel as processes do.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool: list[int] = []
        self._guard = threading.Lock()
        self._forks = _forks[0]
        self._closed = False

    @classmethod
    def open(cls, database: Path) -> WriteQueue | None:
        """The queue beside ``database`` (creating its lock file with the database's mode), or None.

        None (logged) where the queue cannot work; the caller then relies on SQLite's locking alone.
        """
        if F_OFD_SETLKW is None:
            logger.info("no open-file-description locks on this platform: %s has no FIFO write queue", database)
            return None
        queue = cls(lock_path(database))
        try:
            queue._pool.append(queue._open_file(os.stat(database).st_mode))
        except OSError as exc:
            logger.warning("cannot use %s (%s): writers wait for SQLite's lock without a FIFO queue", queue.path, exc)
            return None
        return queue

    def _open_file(self, mode: int | None = None) -> int:
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            if mode is None:
                mode = os.stat(self.path.with_name(self.path.name.removesuffix(".lock"))).st_mode
            try:
                fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, stat.S_IMODE(mode))
                os.fchmod(fd, stat.S_IMODE(mode))  # the umask must not widen or narrow it
            except FileExistsError:  # another process created it meanwhile
                fd = os.open(self.path, flags)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, f"{self.path} is not a regular file")
        return fd

    def _descriptor(self) -> int:
        with self._guard:
            if self._forks != _forks[0]:  # a forked child must not share its parent's descriptions
                self._pool.clear()  # (the parent's: left open, closing them here would not unlock)
                self._forks = _forks[0]
            if self._pool:
                return self._pool.pop()
        return self._open_file()

    def _give_back(self, fd: int) -> None:
        with self._guard:
            if not self._closed and self._forks == _forks[0]:
                self._pool.append(fd)
                return
        os.close(fd)

    def acquire(self, deadline: float) -> Place:
        """Wait for our turn until ``deadline`` (``time.monotonic()``); blocks this thread meanwhile.

        Raises:
            QueueTimeout: the deadline passed first (nothing is held).
            OSError: the lock file failed (not a lock conflict).
        """
        fd = self._descriptor()
        try:
            raw = os.pread(fd, 8, 0)
            ticket = (int.from_bytes(raw, "little") if len(raw) == 8 else 0) + 1
            # Uncontended, one call: our ticket's byte and every byte below it, written-locked. The
            # counter stays: whoever comes meanwhile finds this byte taken and queues above it.
            try:
                fcntl(fd, _SETLK, _FLOCK.pack(F_WRLCK, _SEEK_SET, BASE, ticket + 1, 0))
                return Place(fd, ticket, 0.0, 1)  # no clock read: an uncontended wait is a few system calls
            except OSError as exc:
                if exc.errno not in _BUSY:
                    raise
            started = time.monotonic()
            ticket = self._join(fd, ticket)
            if _lock(fd, F_RDLCK, BASE, ticket, wait=False):  # the one before us just left
                return Place(fd, ticket, time.monotonic() - started, 1)
        except BaseException:
            self._discard(fd)  # closing drops whatever this description holds
            raise
        # Contended: the kernel's wait has no timeout, so a helper thread makes it for us.
        done = threading.Event()
        state: dict[str, object] = {}
        decided = threading.Lock()

        def wait() -> None:
            with decided:  # given up before this thread ran (interrupted while starting it)
                if state.get("outcome") == "abandoned":
                    os.close(fd)
                    return
            try:
                _lock(fd, F_RDLCK, BASE, ticket, wait=True)
            except OSError as exc:
                state["error"] = exc
            with decided:
                if state.setdefault("outcome", "granted") == "abandoned":
                    os.close(fd)  # drops every lock of this description
                    return
            done.set()

        helper = threading.Thread(target=wait, name=f"corral-write-queue-{ticket}", daemon=True)
        returned = unstarted = False
        outcome = "abandoned"
        try:
            # Inside the ``try``: starting a thread waits for it to run, and a KeyboardInterrupt in
            # that wait must give up the place too (the helper, once it runs, closes the descriptor).
            try:
                helper.start()
            except RuntimeError:  # no thread could be made: nobody else will close the descriptor
                unstarted = True
                raise
            done.wait(max(0.0, deadline - time.monotonic()))
            returned = True
        finally:  # also on KeyboardInterrupt: then we give up our place as on a timeout
            with decided:
                outcome = str(state.setdefault("outcome", "abandoned"))
                if outcome == "abandoned":
                    # Still under ``decided``: the helper closes the descriptor only after this.
                    _lock(fd, F_UNLCK, BASE + ticket, 1, wait=False)  # those behind us move up at once
            if unstarted:
                self._discard(fd)
            elif not returned and outcome != "abandoned":
                self._discard(fd)  # granted just as we were interrupted: closing hands the lock on
        waited = time.monotonic() - started
        if outcome == "abandoned":
            raise QueueTimeout(waited, 2)
        error = state.get("error")
        if isinstance(error, OSError):
            self._discard(fd)
            raise error
        return Place(fd, ticket, waited, 2)

    def _join(self, fd: int, ticket: int) -> int:
        """Take the first free ticket from ``ticket`` on: lock its byte, then advance the counter."""
        # Invariant: the ticket's byte is locked before the counter moves past it, so every ticket
        # handed out later is above ours and waits for us. A byte that is taken (an earlier ticket,
        # or a holder's range over it when our counter read was stale) sends us one further.
        while not _lock(fd, F_WRLCK, BASE + ticket, 1, wait=False):
            ticket += 1
        _set_counter(fd, ticket)
        return ticket

    def release(self, place: Place) -> None:
        """Leave the queue: the next in line gets the lock."""
        try:
            fcntl(place.fd, _SETLK, _UNLOCK_ALL)
        except OSError:
            self._discard(place.fd)
            raise
        self._give_back(place.fd)

    def _discard(self, fd: int) -> None:
        try:
            os.close(fd)
        except OSError:
            logger.debug("closing a write-queue descriptor of %s failed", self.path, exc_info=True)

    def close(self) -> None:
        """Close the idle descriptors; places still held stay valid until released."""
        with self._guard:
            self._closed = True
            pool, self._pool = self._pool, []
        for fd in pool:
            self._discard(fd)
