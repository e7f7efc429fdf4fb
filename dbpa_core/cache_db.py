"""The sample cache in a database (``DBPA_CACHE_URL``): what :class:`dbpa_core.cache.Cache`
keeps in its disk store — samples, embeddings, claims and heartbeats — in the table
``sample_cache`` of a SQLite or PostgreSQL database (the schema of :mod:`dbpa_core.db`), so
a team that points every machine at one database never pays twice for one sample.

:class:`DatabaseStore` answers the few calls :class:`~dbpa_core.cache.Cache` makes of its
store (``get``, ``set``, ``add``, ``delete``, ``transact``, ``expire``, ``volume``,
``clear``, ``len``), with the same keys and the same values (JSON text, or an array's bytes:
never a pickle). Taking a claim (``add``) is one atomic ``INSERT ... ON CONFLICT DO
NOTHING``, so two machines cannot both take one key. Unlike the disk store it is not
trimmed to a size: ``dbpa cache clear`` empties it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import db

_table = db.sample_cache
_BATCH_LOCK = 20250802  # the advisory lock of the cache's batches (PostgreSQL)


class DatabaseStore:
    """The cache's store in the database at ``url``; every failure is one ``error(line)``
    (the caller's exception class, so the cache's own messages and exit codes hold)."""

    def __init__(self, url: str, error: type[Exception], *, timeout: float = 30.0):
        self.url = url
        self.where = db.masked(url)
        self._error = error
        self._timeout = timeout
        self._engine: sa.Engine | None = None
        self._local = threading.local()  # the connection of a transact() in progress

    # ------------------------------------------------------------------ plumbing
    def _fail(self, exc: BaseException) -> Exception:
        if isinstance(exc, db.DatabaseError):
            return self._error(f"The cache database: {exc}")
        orig = getattr(exc, "orig", exc)
        text = str(orig).lower()
        if "locked" in text or "busy" in text:
            return self._error(
                f"The cache database {self.where} stayed locked by another "
                "process; wait for it and try again."
            )
        return self._error(db.describe(exc, f"of the cache {self.where}") + " Nothing in it was changed.")

    def _ready(self) -> sa.Engine:
        if self._engine is None:
            engine = db.engine(self.url, timeout=self._timeout)
            db.ensure_current(engine, what=f"cache database {self.where}")
            self._engine = engine
        return self._engine

    @contextmanager
    def _con(self, *, write: bool = False) -> Iterator[Connection]:
        held = getattr(self._local, "con", None)
        if held is not None:
            yield held
            return
        try:
            with db.connection(self._ready(), write=write) as con:
                yield con
        except db.MissingDriverError:
            raise  # a missing optional part, said as it is (the command line's exit 4)
        except (sa.exc.DBAPIError, db.DatabaseError) as exc:
            raise self._fail(exc) from None

    @contextmanager
    def transact(self) -> Iterator[None]:
        """Everything inside is one transaction (one commit)."""
        if getattr(self._local, "con", None) is not None:
            yield
            return
        with self._con(write=True) as con:  # SQLite: the write lock at once (reads, then writes)
            if con.dialect.name == "postgresql":
                # one batch at a time, as SQLite runs the disk store's: a key read as missing
                # and then claimed cannot be stored by another machine in between
                con.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_BATCH_LOCK})")
            self._local.con = con
            try:
                yield
            finally:
                self._local.con = None

    @staticmethod
    def _insert(con: Connection, values: dict[str, Any]) -> Any:
        """An INSERT with ON CONFLICT clauses (PostgreSQL's and SQLite's are alike)."""
        from sqlalchemy.dialects import postgresql, sqlite

        insert = postgresql.insert if con.dialect.name == "postgresql" else sqlite.insert
        return insert(_table).values(**values)

    @staticmethod
    def _row(key: str, value: str | bytes, expire: float | None) -> dict[str, Any]:
        now = time.time()
        if not isinstance(value, str | bytes):
            raise TypeError("the dbpa cache stores text and bytes only (never a pickle)")
        return {
            "key": key,
            "text": value if isinstance(value, str) else None,
            "data": value if isinstance(value, bytes) else None,
            "expires_at": now + expire if expire is not None else None,
            "stored_at": now,
        }

    @staticmethod
    def _live(now: float) -> Any:
        return sa.or_(_table.c.expires_at.is_(None), _table.c.expires_at > now)

    # ------------------------------------------------------------------ the store's calls
    def get(self, key: str, default: Any = None) -> Any:
        with self._con() as con:
            row = con.execute(
                sa.select(_table.c.text, _table.c.data).where(_table.c.key == key, self._live(time.time()))
            ).first()
        if row is None:
            return default
        return row.text if row.text is not None else (bytes(row.data) if row.data is not None else default)

    def set(self, key: str, value: str | bytes, expire: float | None = None) -> bool:
        row = self._row(key, value, expire)
        with self._con() as con:
            stmt = self._insert(con, row)
            con.execute(
                stmt.on_conflict_do_update(
                    index_elements=[_table.c.key],
                    set_={k: stmt.excluded[k] for k in ("text", "data", "expires_at", "stored_at")},
                )
            )
        return True

    def add(self, key: str, value: str | bytes, expire: float | None = None) -> bool:
        """Store ``value`` only when ``key`` holds nothing (or something expired): True
        when it was stored (atomic, also between machines)."""
        row = self._row(key, value, expire)
        with self._con() as con:
            con.execute(sa.delete(_table).where(_table.c.key == key, _table.c.expires_at <= row["stored_at"]))
            done = con.execute(
                self._insert(con, row)
                .on_conflict_do_nothing(index_elements=[_table.c.key])
                .returning(_table.c.key)
            ).first()
        return done is not None

    def delete(self, key: str) -> bool:
        with self._con() as con:
            return bool(con.execute(sa.delete(_table).where(_table.c.key == key)).rowcount)

    def expire(self) -> int:
        """Remove what has expired (claims and heartbeats of runs that are gone)."""
        with self._con() as con:
            return int(con.execute(sa.delete(_table).where(_table.c.expires_at <= time.time())).rowcount)

    def __len__(self) -> int:
        with self._con() as con:
            return int(con.execute(sa.select(sa.func.count()).select_from(_table)).scalar() or 0)

    def volume(self) -> int:
        """Bytes of the stored values (what the table holds, not the database's files)."""
        size = sa.func.coalesce(sa.func.length(_table.c.data), 0) + sa.func.coalesce(
            sa.func.length(_table.c.text), 0
        )
        with self._con() as con:
            return int(con.execute(sa.select(sa.func.coalesce(sa.func.sum(size), 0))).scalar() or 0)

    def clear(self) -> int:
        with self._con() as con:
            return int(con.execute(sa.delete(_table)).rowcount)

    def close(self) -> None:
        """Nothing to close: connections are returned to the engine's pool after each call."""


__all__ = ["DatabaseStore"]
