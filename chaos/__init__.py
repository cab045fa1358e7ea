"""``make chaos``: corral's real operations under faults, and a checker for the histories they leave.

The harness (:mod:`chaos.run`) starts client processes (:mod:`chaos.worker`) over a SQLite file and a
PostgreSQL cluster, two state homes each, and drives them with a seeded schedule of controller-lease
operations, receipts (:mod:`chaos.relays`), writer lanes (:mod:`chaos.lanes`) and plans
(:mod:`chaos.plans`) while a nemesis (:mod:`chaos.nemesis`) kills, pauses, restarts the PostgreSQL
server and jumps the clients' clocks. Every operation is recorded with its invocation and completion
(:mod:`chaos.history`); :mod:`chaos.lease` checks the lease history for linearizability against a
sequential model of the controller lease with the search of :mod:`chaos.linearizable` (Wing & Gong,
Lowe's memoization, as Porcupine does it), partitioned per store and controller id; the receipts,
lanes and plans by history rules (:mod:`chaos.receipts`, :mod:`chaos.lanes`, :mod:`chaos.plans`).

Not part of the installed package: a development harness, like ``bench/``.
"""
