"""The SQL adapters of every port that keeps rows in a store: one module per port and backend.

Modules are named ``<port>_<backend>.py``; ``<port>_sql.py`` is what a port's SQLite and PostgreSQL
adapters share, written once over :class:`~runner.sql.dialect.SQLDialect` (the seam: one connection,
statements with ``?`` placeholders turned into the backend's own).

=====================  =====================================  ==========================================
port                   shared SQL                             adapters
=====================  =====================================  ==========================================
store (``abc``)        ``store_sql``                          ``store_sqlite`` (``store_sqlite_file``,
                                                              ``store_sqlite_writelock``),
                                                              ``store_postgres`` (``store_postgres_schema``)
memory                 ``memory_sql``                         ``memory_sqlite``, ``memory_postgres``
mesh                   ``mesh_sql`` (both stores use it)
slots (process host)   ``slots_sql``                          ``slots_sqlite``, ``slots_postgres``
=====================  =====================================  ==========================================

The ports (:mod:`runner.store.abc`, :mod:`runner.store.memory`, :mod:`runner.store.mesh`,
:mod:`runner.agents.slots`) name these modules only in their registries (``Registry.lazy``), never
import them: this package imports the ports, so neither ``runner.store`` nor ``runner.agents`` may
import it back (``tests/test_layers.py``: no import circle joins two packages). That is why the SQL
lives in a package of its own rather than inside ``runner/store/``: the slot adapters import the
process host's port, which imports the store's.
"""
