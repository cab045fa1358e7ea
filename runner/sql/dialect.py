"""What every shared SQL implementation of a port stands on (``store_sql``, ``memory_sql``,
``slots_sql``, ``mesh_sql``): a dialect bound to one connection that runs statements written once
with ``?`` placeholders, turned into the store's own (``%s`` on PostgreSQL) as they run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar


class SQLDialect:
    """One store's connection and placeholder; subclasses add what else their SQL says differently."""

    placeholder: ClassVar[str] = "?"

    __slots__ = ("conn",)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def run(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Execute ``sql`` (``?`` placeholders) on the connection; the cursor."""
        if self.placeholder != "?":
            sql = sql.replace("?", self.placeholder)
        return self.conn.execute(sql, args)


__all__ = ["SQLDialect"]
