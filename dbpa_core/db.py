"""The database behind the run history (and, optionally, the sample cache): one schema for
SQLite and PostgreSQL, declared once here with SQLAlchemy Core, kept current by Alembic.

Where it lives:

* by default a SQLite file, ``$DBPA_HOME/history.sqlite3`` (nothing to set up);
* ``DBPA_DATABASE_URL`` (e.g. ``postgresql://user@host/db``) puts the run history in a
  shared database, so a team sees one history; the dashboard and ``dbpa history`` read it;
* ``DBPA_CACHE_URL`` puts the sample cache there too (see :mod:`dbpa_core.cache_db`), so
  nobody in the team pays twice for one sample.

The schema's migrations ship inside the package (``dbpa_core/migrations``) and run by
themselves the first time a database is opened by a newer dbpa: a history is upgraded in
place, never rewritten. A SQLite history made before dbpa used Alembic (its schema number
in ``PRAGMA user_version``) is brought up with its own numbered steps, then taken over.
Each column and table says, in its ``info``, the revision that added it: the migrations
build their tables from these declarations (:func:`schema_at`), so nothing is declared twice.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .resources import MissingExtraError, missing_extra_message

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

DATABASE_URL_ENV = "DBPA_DATABASE_URL"
CACHE_URL_ENV = "DBPA_CACHE_URL"
BASELINE = "0001"  # the schema of the SQLite history before Alembic (user_version 2)


class Text(sa.types.TypeDecorator):
    """Text; PostgreSQL cannot store the NUL character, so there it is kept as U+FFFD (a
    prompt or title with one is recorded, not refused; SQLite keeps it as it is)."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if isinstance(value, str) and dialect.name == "postgresql" and "\x00" in value:
            return value.replace("\x00", "\ufffd")
        return value


metadata = sa.MetaData()


def _since(revision: str) -> dict[str, str]:
    return {"since": revision}


runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("created_at", Text, nullable=False),  # ISO 8601, UTC
    sa.Column("source", Text, nullable=False),  # 'cli' or 'dashboard'
    sa.Column("page", Text),  # the dashboard page that ran it
    sa.Column("title", Text, nullable=False),
    sa.Column("tool_version", Text, nullable=False),
    sa.Column("environment", Text, nullable=False),  # JSON: python, platform
    sa.Column("settings", Text, nullable=False),  # JSON: k, B, measure, ...
    sa.Column("cache_dir", Text),  # where the responses are cached
    sa.Column("out_dir", Text),  # where `dbpa audit --out` wrote them
    sa.Column("seconds", sa.Float),
    sa.Column("user_name", Text, info=_since("0002")),  # who ran it
    sa.Column("host_name", Text, info=_since("0002")),  # on which machine
    sa.Index("runs_created", "created_at"),
    sqlite_autoincrement=True,
)
audits = sa.Table(
    "audits",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("job", Text, nullable=False),  # e.g. the model label
    sa.Column("name", Text, nullable=False),
    sa.Column("mode", Text, nullable=False),  # 'perturbation' or 'models'
    sa.Column("models", Text, nullable=False),  # model labels, one a line
    sa.Column("base_prompt", Text, nullable=False),
    sa.Column("spec", Text, nullable=False),  # JSON (key names, never keys)
    sa.Column("usage", Text, nullable=False),  # JSON
    sa.Column("warnings", Text, nullable=False),  # JSON list
    sa.Column("roc", Text),  # JSON or NULL
    sa.Index("audits_run", "run_id"),
    sqlite_autoincrement=True,
)
tests = sa.Table(
    "tests",
    metadata,
    sa.Column("audit_id", sa.Integer, sa.ForeignKey("audits.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("name", Text, nullable=False),
    sa.Column("role", Text),
    sa.Column("model", Text, nullable=False),
    sa.Column("prompt", Text, nullable=False),
    sa.Column("effect_size", sa.Float, nullable=False),
    sa.Column("chance_effect_size", sa.Float, nullable=False),
    sa.Column("effect_above_chance", sa.Float, nullable=False),
    sa.Column("p_value", sa.Float, nullable=False),
    sa.Column("p_adjusted", sa.Float, nullable=False),
    sa.Column("significant", sa.Integer, nullable=False),
    sa.Column("stars", Text, nullable=False),
    sa.Column("detail", sa.LargeBinary, nullable=False),  # zlib-compressed JSON
)
arms = sa.Table(
    "arms",
    metadata,
    sa.Column("audit_id", sa.Integer, sa.ForeignKey("audits.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),  # 0: the base (or reference model)
    sa.Column("name", Text, nullable=False),
    sa.Column("role", Text),
    sa.Column("prompt", Text, nullable=False),
    sa.Column("system_prompt", Text),
    sa.Column("model", Text, nullable=False),  # JSON model config
    sa.Column("responses", Text, nullable=False),  # JSON list of the k texts
    sa.Column("embeddings", sa.LargeBinary),  # .npy bytes (float32)
    sa.Column("new_samples", sa.Integer, nullable=False),
    sa.Column("prompt_tokens", sa.Integer, nullable=False),
    sa.Column("completion_tokens", sa.Integer, nullable=False),
)
run_extras = sa.Table(
    "run_extras",
    metadata,
    sa.Column(
        "run_id",
        sa.Integer,
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
        autoincrement=False,
    ),
    sa.Column("kind", Text, nullable=False),  # 'audit', 'battery', ...
    sa.Column("fingerprint", Text),  # hash of the inputs
    sa.Column("models", Text, nullable=False, server_default=""),
    sa.Column("headline", Text, nullable=False, server_default=""),
    sa.Column("payload", sa.LargeBinary),  # a non-audit run's result
    sa.Column("form", Text),  # JSON: the dashboard's inputs
    sa.Column("used_at", Text),  # when it was last rerun
    sa.Index("run_extras_fingerprint", "fingerprint"),
)
# the sample cache in the database (DBPA_CACHE_URL): the disk cache's keys and values
sample_cache = sa.Table(
    "sample_cache",
    metadata,
    sa.Column("key", Text, primary_key=True),  # as in the disk cache
    sa.Column("text", Text),  # a JSON value ...
    sa.Column("data", sa.LargeBinary),  # ... or an array's bytes
    sa.Column("expires_at", sa.Float),  # Unix time (claims, heartbeats)
    sa.Column("stored_at", sa.Float, nullable=False),
    sa.Index("sample_cache_expires", "expires_at"),
    info=_since("0002"),
)


def _added(item: Any) -> str:
    return str(item.info.get("since", BASELINE))


def schema_at(revision: str) -> sa.MetaData:
    """The tables, columns and indexes as they were at ``revision`` (what the migration
    that reached it creates)."""
    md = sa.MetaData()
    for table in metadata.sorted_tables:
        if _added(table) > revision:
            continue
        kept = [c for c in table.columns if _added(c) <= revision]
        copy = sa.Table(table.name, md, *[c._copy() for c in kept], **table.dialect_kwargs)
        for fk in table.foreign_keys:  # a column's copy leaves its foreign key behind
            if fk.parent in kept:
                copy.append_constraint(
                    sa.ForeignKeyConstraint([fk.parent.name], [fk.target_fullname], ondelete=fk.ondelete)
                )
        for index in table.indexes:
            sa.Index(index.name, *[copy.c[c.name] for c in index.columns])
    return md


# --------------------------------------------------------------------------- URLs
class DatabaseError(RuntimeError):
    """A database that cannot be used: one line that says why (a password never shown)."""


class MissingDriverError(DatabaseError, MissingExtraError):
    """A PostgreSQL URL without the `postgres` extra's driver (a missing optional part)."""


def masked(url: str) -> str:
    """``url`` with everything between its scheme and its last ``@`` (user, password, even
    a password with ``/`` or ``@`` in it) shown as ``***``."""
    text = str(url)
    if "@" not in text:
        return text
    head, _, tail = text.rpartition("@")
    scheme = head.split("://", 1)[0] + "://" if "://" in head else ""
    return f"{scheme}***@{tail}"


def engine_url(url: str) -> sa.URL:
    """The SQLAlchemy URL of a ``postgresql://`` (psycopg 3) or ``sqlite:///`` URL."""
    if url.startswith("sqlite:///"):  # a file's path, whatever it holds (?, #, %, spaces)
        return sa.URL.create("sqlite", database=url[len("sqlite:///") :])
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise DatabaseError(
            f"{masked(url)} is not a database URL (postgresql://user@host/db or sqlite:///path)."
        ) from None
    name = parsed.drivername
    if name in ("postgresql", "postgres", "postgresql+psycopg"):
        return parsed.set(drivername="postgresql+psycopg")
    if name in ("sqlite", "sqlite+pysqlite"):
        return parsed
    raise DatabaseError(
        f"{masked(url)}: dbpa keeps its history in PostgreSQL "
        "(postgresql://user@host/db) or SQLite (sqlite:///path), not "
        f"{name}."
    )


def sqlite_url(path: str | os.PathLike) -> str:
    return f"sqlite:///{Path(path)}"


_engines: dict[tuple[str, float], Engine] = {}
_engines_lock = threading.Lock()


def engine(url: str, *, timeout: float = 30.0) -> Engine:
    """The engine of ``url``, one per process (PostgreSQL connections are pooled; a SQLite
    file is opened for each use, so it is never held open between calls)."""
    key = (url, float(timeout))
    with _engines_lock:
        found = _engines.get(key)
        if found is not None:
            return found
        target = engine_url(url)
        if target.get_backend_name() == "sqlite":
            made = sa.create_engine(target, poolclass=sa.pool.NullPool, connect_args={"timeout": timeout})
            sa.event.listen(made, "connect", _sqlite_connected)
            sa.event.listen(made, "begin", _sqlite_begin)
        else:
            try:
                import psycopg  # noqa: F401 - only to say which extra is missing
            except ImportError:
                raise MissingDriverError(missing_extra_message("postgres")) from None
            made = sa.create_engine(
                target,
                pool_pre_ping=True,
                pool_size=2,
                connect_args={"connect_timeout": max(1, int(min(timeout, 10)))},
            )
        _engines[key] = made
        return made


def _sqlite_connected(dbapi_con: Any, _record: Any) -> None:
    # transactions are begun by us (below), so DDL and migrations are atomic too
    dbapi_con.isolation_level = None
    # a garbled text cell reads with U+FFFD in place of its bad bytes, not as an error
    dbapi_con.text_factory = lambda b: b.decode("utf-8", "replace")
    dbapi_con.execute("PRAGMA foreign_keys = ON")


def _sqlite_begin(con: Connection) -> None:
    con.exec_driver_sql("BEGIN IMMEDIATE" if con.get_execution_options().get("write_lock") else "BEGIN")


# --------------------------------------------------------------------------- migrations
def _config(con: Connection) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    cfg.attributes["connection"] = con
    return cfg


@functools.cache
def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(Path(__file__).with_name("migrations")))


def head() -> str:
    """The newest revision this dbpa knows."""
    return str(_script().get_current_head())


def _user_version(revision: str) -> int:
    """``PRAGMA user_version`` of a SQLite history at ``revision``: the pre-Alembic numbers
    go on (baseline = 2), so an older dbpa opening a newer file says it is newer."""
    from .migrations.legacy import STEPS

    return len(STEPS) + int(revision) - int(BASELINE)


def current(con: Connection) -> str | None:
    """The revision of the database on ``con`` (None: empty, or a pre-Alembic SQLite file)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(con).get_current_revision()


def upgrade(con: Connection, *, what: str = "database") -> None:
    """Bring the database on ``con`` (in a transaction) to :func:`head`; raises
    :class:`DatabaseError` when it was written by a newer dbpa."""
    from alembic import command

    if con.dialect.name == "postgresql":  # one migrator at a time (two machines, one db)
        con.exec_driver_sql("SELECT pg_advisory_xact_lock(20250801)")
    known = {s.revision for s in _script().walk_revisions()}
    rev = current(con)
    newest = head()
    newer = rev is not None and rev not in known
    if con.dialect.name == "sqlite":
        version = con.exec_driver_sql("PRAGMA user_version").scalar() or 0
        newer = newer or version > _user_version(newest)
        if rev is None and not newer and sa.inspect(con).has_table("runs"):
            _adopt_legacy(con, int(version))
            command.stamp(_config(con), BASELINE)
            rev = BASELINE
    if newer:
        raise DatabaseError(
            f"The {what} was written by a newer dbpa (schema "
            f"{rev or version}, this one knows {newest}): upgrade dbpa."
        )
    if rev != newest:
        command.upgrade(_config(con), "head")
    if con.dialect.name == "sqlite":
        con.exec_driver_sql(f"PRAGMA user_version = {_user_version(newest)}")


def _adopt_legacy(con: Connection, version: int) -> None:
    """A SQLite history made before Alembic: its remaining numbered steps, then it is at
    the baseline."""
    from .migrations.legacy import STEPS

    for step in STEPS[version:]:
        for statement in step.split(";"):
            if statement.strip():
                con.exec_driver_sql(statement)


@contextmanager
def connection(eng: Engine, *, write: bool = False) -> Iterator[Connection]:
    """A connection in one transaction (committed on success, rolled back on error);
    ``write`` takes SQLite's write lock at once (no deadlock between two upgraders)."""
    with eng.connect() as con:
        if write:
            con = con.execution_options(write_lock=True)
        with con.begin():
            yield con


def ensure_current(eng: Engine, *, what: str = "database") -> None:
    """Upgrade the database of ``eng`` to :func:`head` when it is behind (cheap when not)."""
    with connection(eng) as con:
        if con.dialect.name == "sqlite":
            version = con.exec_driver_sql("PRAGMA user_version").scalar() or 0
            if version == _user_version(head()) and current(con) == head():
                return
        elif current(con) == head():
            return
    with connection(eng, write=True) as con:
        upgrade(con, what=what)


def describe(exc: BaseException, where: str) -> str:
    """The one line of a database server's failure (PostgreSQL: unreachable, refused)."""
    orig = getattr(exc, "orig", None) or exc
    reason = " ".join(str(orig).split("\n")[0].split())[:200] or type(orig).__name__
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return (
            f"Cannot reach the database {where} ({reason}): check the URL and that the "
            "server is running and lets you in."
        )
    return f"The database {where} refused a query ({reason})."


__all__ = [
    "CACHE_URL_ENV",
    "DATABASE_URL_ENV",
    "DatabaseError",
    "arms",
    "audits",
    "connection",
    "describe",
    "engine",
    "ensure_current",
    "head",
    "masked",
    "metadata",
    "run_extras",
    "runs",
    "sample_cache",
    "schema_at",
    "tests",
    "upgrade",
]
