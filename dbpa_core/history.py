"""The run history: every audit, from the dashboard or the CLI, in a database.

By default a SQLite file in ``$DBPA_HOME`` (``history.sqlite3``); with ``DBPA_DATABASE_URL``
(``postgresql://user@host/db``) a database a team shares. The schema, its Alembic
migrations and the connections are in :mod:`dbpa_core.db`: an older database is upgraded
in place the first time a newer dbpa opens it, never rewritten by hand. Each run says who
ran it and on which machine (user, host).

A *run* is one press of Run in the dashboard or one ``dbpa audit``; it holds one or more
*audits* (the persona explorer and control vs target run one audit per model). Each audit
keeps its spec, its results (ω, p, adjusted p, the permutation statistics and similarity
samples the charts need), its responses and their embeddings, so a run can be reopened with
all its charts — and compared with another — long after its cache was cleared.

Examples
--------
>>> h = History("/tmp/h.sqlite3")                                   # doctest: +SKIP
>>> run_id = h.record({"gpt-4o": result}, source="cli")             # doctest: +SKIP
>>> [r.title for r in h.list(model="gpt-4o")]                       # doctest: +SKIP
>>> h.get(run_id).audits["gpt-4o"].perturbations[0].p_value         # doctest: +SKIP
>>> h.compare(3, run_id).changed                                    # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import getpass
import io
import json
import math
import os
import pickle
import platform
import socket
import sqlite3
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa

from . import __version__, db
from .audit import Arm, ArmResponses, AuditResult, PerturbationResult
from .compare import COMPARED_SETTINGS, pair_audits
from .compare import ComparedTest as ComparedTest  # two runs' verdicts of one perturbation
from .home import HomeError, dbpa_home, ensure_home
from .resources import MissingExtraError
from .sequential import SequentialRecord
from .spec import AuditSpec, Perturbation, model_label
from .spec_doc import shown_config
from .types import DBPAResult, ROCResult, jsonable

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


DB_NAME = "history.sqlite3"

# the kinds of run besides audits (each reopened on its own page)
RESULT_KINDS = ("battery", "fidelity", "sensitivity", "suite")

SETTINGS_KEYS = COMPARED_SETTINGS  # the settings a run keeps, and compare names when they differ


def _inserted_id(result: sa.CursorResult) -> int:
    """The id the database gave the row an INSERT added."""
    key = result.inserted_primary_key
    if key is None:
        raise HistoryError("the database gave no id to the row it added")
    return int(key[0])


class HistoryError(ValueError):
    """A run that does not exist, or a database that cannot be read."""


class HistoryDriverMissing(HistoryError, MissingExtraError):
    """The run history is in PostgreSQL and the `postgres` extra's driver is not installed."""


def default_db_path() -> Path:
    """``$DBPA_HOME/history.sqlite3``."""
    return dbpa_home() / DB_NAME


# --------------------------------------------------------------------------- results
#: the control gate of a listed run (:attr:`RunSummary.control_gate`) in the list's words
GATE_WORDS = {"fail": "FAIL", "not testable": "NOT TESTABLE", "pass": "pass", "": ""}


@dataclass(frozen=True)
class RunSummary:
    """One line of the history list."""

    id: int
    created_at: datetime
    source: str
    page: str | None
    title: str
    tool_version: str
    models: tuple[str, ...]
    base_prompt: str
    n_audits: int
    n_tests: int
    n_significant: int
    failed_controls: tuple[str, ...]  # "job: name" of significant control perturbations

    @property
    def control_gate(self) -> str:
        """'fail' when a control changed the answers significantly, 'not testable' when none
        did but one could not have (too few samples for any result to be significant after
        the correction), 'pass' when controls were tested and none did, '' when no
        perturbation is a control — the words of the run's own gate (``runs.base.Gate``)."""
        if self.failed_controls:
            return "fail"
        if not self._has_controls:
            return ""
        return "not testable" if self._untestable else "pass"

    _has_controls: bool = False
    _untestable: bool = False  # a control no result could have made fail (known from the spec)
    kind: str = ""  # 'suite' for a suite of cases (its responses are not in the history)
    user: str = ""  # who ran it (their login) ...
    host: str = ""  # ... and on which machine ('' in runs recorded before dbpa kept them)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": self.created_at.isoformat(),
            "source": self.source,
            "page": self.page,
            "title": self.title,
            "tool_version": self.tool_version,
            "models": list(self.models),
            "base_prompt": self.base_prompt,
            "audits": self.n_audits,
            "tests": self.n_tests,
            "significant": self.n_significant,
            "control_gate": self.control_gate,
            "failed_controls": list(self.failed_controls),
            "user": self.user,
            "host": self.host,
        }


@dataclass(frozen=True)
class Run:
    """A recorded run with its audits rebuilt as :class:`AuditResult` objects (by job)."""

    summary: RunSummary
    settings: dict[str, Any]
    environment: dict[str, Any]
    cache_dir: str | None
    out_dir: str | None
    seconds: float | None
    audits: dict[str, AuditResult]
    unreadable: tuple[str, ...] = ()  # parts of garbled rows that could not be read back

    @property
    def id(self) -> int:
        return self.summary.id

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary.to_dict(),
            "settings": self.settings,
            "environment": self.environment,
            "cache_dir": self.cache_dir,
            "out_dir": self.out_dir,
            "seconds": self.seconds,
            "responses": where_responses_live(self),
            "audits": {job: a.to_dict() for job, a in self.audits.items()},
            "unreadable": list(self.unreadable),
        }


@dataclass(frozen=True)
class RunComparison:
    """Two runs side by side: which perturbations changed verdict, and what settings differ."""

    a: Run
    b: Run
    rows: tuple[ComparedTest, ...]
    settings_changed: dict[str, tuple[Any, Any]]
    pairs: tuple[tuple[str, str], ...]  # (job in A, job in B)

    @property
    def changed(self) -> tuple[ComparedTest, ...]:
        return tuple(r for r in self.rows if r.verdict_changed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.summary.to_dict(),
            "b": self.b.summary.to_dict(),
            "pairs": [list(p) for p in self.pairs],
            "settings_changed": {k: list(v) for k, v in self.settings_changed.items()},
            "rows": [r.to_dict() for r in self.rows],
            "verdicts_changed": len(self.changed),
        }


# --------------------------------------------------------------------------- the database
class History:
    """The run database: a SQLite file at ``path`` (default ``$DBPA_HOME/history.sqlite3``),
    or the database at a URL (``path`` or ``$DBPA_DATABASE_URL``: ``postgresql://...``).

    Every method uses its own short transaction, so one object can be shared between
    threads (the dashboard's sessions) and processes — on one machine or many, with a
    server — can write at the same time (SQLite serialises them; a writer waits up to
    ``timeout`` seconds). An older database is upgraded in place when first opened.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, timeout: float = 30.0):
        target = (
            str(path)
            if path is not None and str(path)
            else os.environ.get(db.DATABASE_URL_ENV, "").strip() or None
        )
        self.path: Path | None
        if target and "://" in target:
            self.url = target
            self.path = (
                Path(target.split(":///", 1)[1])
                if target.startswith(("sqlite:///", "sqlite+pysqlite:///"))
                else None
            )
        else:
            self.path = Path(target) if target else default_db_path()
            self.url = db.sqlite_url(self.path)
        self.timeout = timeout
        self._current = False  # upgraded (or found current) once by this object

    @property
    def where(self) -> str:
        """The database to show a person: the file, or the URL without its password."""
        return str(self.path) if self.path is not None else db.masked(self.url)

    @property
    def location(self) -> str:
        """What :class:`History` opens again (the file or the URL)."""
        return str(self.path) if self.path is not None else self.url

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _connect(self) -> Iterator[Connection]:
        if self.path is not None:
            try:
                ensure_home(self.path.parent)
            except HomeError as exc:
                raise HistoryError(str(exc)) from None
        try:
            engine = db.engine(self.url, timeout=self.timeout)
            if not self._current:
                db.ensure_current(engine, what=f"run history {self.where}")
                self._current = True
            with db.connection(engine) as con:
                yield con
        except db.MissingDriverError as exc:  # a missing optional part (the command line's exit 4)
            raise HistoryDriverMissing(str(exc)) from None
        except db.DatabaseError as exc:
            raise HistoryError(str(exc)) from None
        except sa.exc.DBAPIError as exc:
            raise HistoryError(self._failed(exc)) from None

    def _failed(self, exc: sa.exc.DBAPIError) -> str:
        """One line for a database error (never advice to remove a file that is intact)."""
        orig = exc.orig
        if isinstance(orig, sqlite3.OperationalError):  # the file is fine; using it is not
            return self._unusable(orig)
        if isinstance(orig, sqlite3.DatabaseError):
            return (
                f"The run history {self.where} is damaged and cannot be read ({orig}). "
                "Move the file away (keep it: some runs may still be recovered from it) "
                "to start a new one."
            )
        return db.describe(exc, f"of the run history {self.where}")

    def _unusable(self, exc: sqlite3.OperationalError) -> str:
        """What a database that is intact but cannot be used now says: locked, read-only,
        or the reason SQLite gives (never advice to remove it)."""
        msg = str(exc).lower()
        if "locked" in msg or "busy" in msg:
            return (
                f"The run history {self.where} is locked by another process (another dbpa "
                f"run or the dashboard writing to it) and stayed locked for "
                f"{self.timeout:g} s: wait for it to finish and try again. Nothing was lost."
            )
        if "readonly" in msg or "read-only" in msg:
            return (
                f"The run history {self.where} is read-only (no permission to write it or "
                "its folder): make it writable, or point DBPA_HOME at a folder you can "
                "write to. Nothing was lost."
            )
        if self.path is not None and self.path.exists() and not self.path.is_file():
            kind = "a folder" if self.path.is_dir() else "not a regular file"
            return (
                f"Cannot use the run history {self.where}: it is {kind}, not a database file "
                f"({exc}). Move it out of the way (mv {self.path} {self.path}.moved) to start a "
                "new history there, point DBPA_HOME (--home) at another folder, or run with "
                "--no-history. Nothing was changed."
            )
        return (
            f"Cannot use the run history {self.where} ({exc}); the file was left as it is. Check "
            "that it is a file you can read and write, point DBPA_HOME (--home) at another "
            "folder, or run with --no-history."
        )

    def schema_version(self) -> str:
        """The database's schema revision (see :mod:`dbpa_core.migrations`)."""
        with self._connect() as con:
            return str(db.current(con))

    def upgrade(self) -> str:
        """Bring the database to this dbpa's schema now (it also happens by itself when
        it is first opened); returns the revision it is at."""
        return self.schema_version()

    @staticmethod
    def _insert_run(
        con: Connection,
        *,
        when: datetime,
        source: str,
        page: str | None,
        title: str,
        settings: Mapping[str, Any],
        cache_dir: str | os.PathLike | None,
        out_dir: str | os.PathLike | None,
        seconds: float | None,
    ) -> int:
        env = {
            "python": platform.python_version(),
            "platform": platform.platform(terse=True),
            "numpy": np.__version__,
        }
        user, host = _who()
        return _inserted_id(
            con.execute(
                sa.insert(db.runs).values(
                    created_at=when.astimezone(UTC).isoformat(timespec="seconds"),
                    source=source,
                    page=page,
                    title=title,
                    tool_version=__version__,
                    environment=json.dumps(env),
                    settings=json.dumps(jsonable(dict(settings))),
                    cache_dir=str(cache_dir) if cache_dir else None,
                    out_dir=str(out_dir) if out_dir else None,
                    seconds=round(float(seconds), 3) if seconds is not None else None,
                    user_name=user,
                    host_name=host,
                )
            )
        )

    # ------------------------------------------------------------------ writing
    def record(
        self,
        audits: Mapping[str, AuditResult] | Sequence[AuditResult],
        *,
        source: str,
        page: str | None = None,
        title: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        out_dir: str | os.PathLike | None = None,
        created_at: datetime | None = None,
    ) -> int:
        """Store one run (one or more audits, by job name); returns its id."""
        if not isinstance(audits, Mapping):
            audits = {model_label(r.spec.model) if len(audits) > 1 else r.spec.name: r for r in audits}
        if not audits:
            raise ValueError("`audits` is empty: nothing to record.")
        if source not in ("cli", "dashboard"):
            raise ValueError(f"`source` must be 'cli' or 'dashboard', got {source!r}.")
        first = next(iter(audits.values()))
        spec_d = first.spec.to_dict()
        seconds = sum(float(r.usage.get("seconds", 0.0)) for r in audits.values())
        with self._connect() as con:
            run_id = self._insert_run(
                con,
                when=created_at or datetime.now(UTC),
                source=source,
                page=page,
                title=title or first.spec.name,
                settings={k: spec_d.get(k) for k in SETTINGS_KEYS},
                cache_dir=cache_dir,
                out_dir=out_dir,
                seconds=seconds,
            )
            for pos, (job, result) in enumerate(audits.items()):
                self._insert_audit(con, run_id, pos, str(job), result)
        return run_id

    @staticmethod
    def _insert_audit(con: Connection, run_id: int, position: int, job: str, r: AuditResult) -> None:
        s = r.spec
        audit_id = _inserted_id(
            con.execute(
                sa.insert(db.audits).values(
                    run_id=run_id,
                    position=position,
                    job=job,
                    name=s.name,
                    mode=r.mode,
                    models="\n".join(model_label(m) for m in s.models),
                    base_prompt=s.base_prompt,
                    spec=json.dumps(jsonable(s.to_dict()), ensure_ascii=False),
                    usage=json.dumps(jsonable(r.usage)),
                    warnings=json.dumps(list(r.warnings), ensure_ascii=False),
                    roc=json.dumps(r.roc.to_dict()) if r.roc is not None else None,
                )
            )
        )
        if r.perturbations:
            con.execute(
                sa.insert(db.tests),
                [
                    dict(
                        audit_id=audit_id,
                        position=i,
                        name=p.name,
                        role=p.role,
                        model=p.model,
                        prompt=p.prompt,
                        effect_size=float(p.effect_size),
                        chance_effect_size=float(p.chance_effect_size),
                        effect_above_chance=float(p.effect_above_chance),
                        p_value=float(p.p_value),
                        p_adjusted=float(p.p_adjusted),
                        significant=int(bool(p.significant)),
                        stars=p.stars,
                        # with sequential sampling, how the test went rides with its detail
                        detail=_pack(
                            p.test.to_dict()
                            | ({} if p.sequential is None else {"sequential": p.sequential.to_dict()})
                        ),
                    )
                    for i, p in enumerate(r.perturbations)
                ],
            )
        con.execute(
            sa.insert(db.arms),
            [
                dict(
                    audit_id=audit_id,
                    position=i,
                    name=a.arm.name,
                    role=a.arm.role,
                    prompt=a.arm.prompt,
                    system_prompt=a.arm.system_prompt,
                    model=json.dumps(jsonable(shown_config(a.arm.model)), ensure_ascii=False),
                    responses=json.dumps(list(a.texts), ensure_ascii=False),
                    embeddings=_npy(a.embeddings),
                    new_samples=int(a.new_samples),
                    prompt_tokens=int(a.prompt_tokens),
                    completion_tokens=int(a.completion_tokens),
                )
                for i, a in enumerate((r.base, *r.arms))
            ],
        )

    def delete(self, *run_ids: int) -> int:
        """Delete runs (with their audits, results and responses); returns how many."""
        if not run_ids:
            return 0
        with self._connect() as con:
            n = con.execute(sa.delete(db.runs).where(db.runs.c.id.in_([int(i) for i in run_ids]))).rowcount
        return int(n)

    # ------------------------------------------------------------------ reading
    def list(
        self,
        *,
        model: str | None = None,
        prompt: str | None = None,
        since: date | datetime | str | None = None,
        until: date | datetime | str | None = None,
        source: str | None = None,
        limit: int | None = None,
    ) -> list[RunSummary]:
        """Runs, newest first. ``model`` and ``prompt`` match any part (case-insensitive) of a
        model label or of the base or perturbed prompts; ``since``/``until`` are dates
        (inclusive) or datetimes."""
        r, a, t, e = db.runs, db.audits, db.tests, db.run_extras
        q = sa.select(r)
        if model:
            # an audit's models, or those of a run of another kind (a suite, a battery)
            pattern = _like(model)
            q = q.where(
                r.c.id.in_(sa.select(a.c.run_id).where(a.c.models.ilike(pattern, escape="\\")))
                | r.c.id.in_(sa.select(e.c.run_id).where(e.c.models.ilike(pattern, escape="\\")))
            )
        if prompt:
            pattern = _like(prompt)
            q = q.where(
                r.c.id.in_(
                    sa.select(a.c.run_id)
                    .select_from(a.outerjoin(t, t.c.audit_id == a.c.id))
                    .where(
                        sa.or_(
                            *(
                                col.ilike(pattern, escape="\\")
                                for col in (a.c.base_prompt, t.c.prompt, t.c.name)
                            )
                        )
                    )
                )
            )
        if since is not None:
            q = q.where(r.c.created_at >= _bound(since, end=False))
        if until is not None:
            q = q.where(r.c.created_at <= _bound(until, end=True))
        if source:
            q = q.where(r.c.source == source)
        q = q.order_by(r.c.created_at.desc(), r.c.id.desc())
        if limit:
            q = q.limit(int(limit))
        with self._connect() as con:
            return [self._summary(con, row) for row in con.execute(q).mappings().fetchall()]

    @staticmethod
    def _summary(con: Connection, row: Any) -> RunSummary:
        a, t = db.audits, db.tests
        audits = (
            con.execute(
                sa.select(a.c.id, a.c.job, a.c.models, a.c.base_prompt, a.c.spec)
                .where(a.c.run_id == row["id"])
                .order_by(a.c.position)
            )
            .mappings()
            .fetchall()
        )
        models: list[str] = []
        for au in audits:
            names = au["models"] if isinstance(au["models"], str) else ""
            models += [m for m in names.split("\n") if m not in models]
        tests = (
            con.execute(
                sa.select(a.c.job, t.c.name, t.c.role, t.c.significant)
                .select_from(t.join(a, a.c.id == t.c.audit_id))
                .where(a.c.run_id == row["id"])
                .order_by(a.c.position, t.c.position)
            )
            .mappings()
            .fetchall()
        )
        who: dict[str, str] = {
            "user": str(row.get("user_name") or ""),
            "host": str(row.get("host_name") or ""),
        }
        if not audits:
            suite = _suite_summary(con, row)
            if suite is not None:
                return dataclasses.replace(suite, user=who["user"], host=who["host"])
        several = len(audits) > 1
        has_controls = any(x["role"] == "control" for x in tests)
        failed = tuple(
            (f"{x['job']}: " if several else "") + x["name"]
            for x in tests
            if x["role"] == "control" and x["significant"]
        )
        return RunSummary(
            id=row["id"],
            created_at=_created(row["created_at"]),
            source=row["source"],
            page=row["page"],
            title=row["title"],
            tool_version=row["tool_version"],
            models=tuple(models),
            base_prompt=audits[0]["base_prompt"] if audits else "",
            n_audits=len(audits),
            n_tests=len(tests),
            n_significant=sum(x["significant"] for x in tests),
            failed_controls=failed,
            _has_controls=has_controls,
            # read the spec only where the gate's word depends on it: controls, none failed
            _untestable=has_controls
            and not failed
            and any(_untestable_controls(au["spec"]) for au in audits),
            **who,
        )

    def get(self, run_id: int) -> Run:
        """A run with every audit rebuilt (raises :class:`HistoryError` if there is none)."""
        with self._connect() as con:
            row = con.execute(sa.select(db.runs).where(db.runs.c.id == int(run_id))).mappings().first()
            if row is None:
                raise HistoryError(f"There is no run {run_id} in the history ({self.where}).")
            summary = self._summary(con, row)
            audits: dict[str, AuditResult] = {}
            unreadable: list[str] = []
            for a in (
                con.execute(
                    sa.select(db.audits).where(db.audits.c.run_id == row["id"]).order_by(db.audits.c.position)
                )
                .mappings()
                .fetchall()
            ):
                rebuilt = _rebuild(con, a, unreadable)
                if rebuilt is not None:
                    audits[a["job"]] = rebuilt
        settings = _json_or(row["settings"], {}, "the run's settings", unreadable)
        env = _json_or(row["environment"], {}, "the run's environment", unreadable)
        return Run(
            summary,
            settings if isinstance(settings, dict) else {},
            env if isinstance(env, dict) else {},
            row["cache_dir"],
            row["out_dir"],
            row["seconds"],
            audits,
            tuple(unreadable),
        )

    def compare(self, a_id: int, b_id: int) -> RunComparison:
        """Run ``a_id`` (A, e.g. before an upgrade) against run ``b_id`` (B).

        Audits are paired by job name (e.g. the model label on multi-model pages); two runs
        of one audit each are paired whatever their models are called, so a model before
        and after an upgrade compare directly. Perturbations are matched by name.
        """
        a, b = self.get(a_id), self.get(b_id)
        rows, pairs = pair_audits(a.audits, b.audits)
        changed = {
            k: (a.settings.get(k), b.settings.get(k))
            for k in SETTINGS_KEYS
            if a.settings.get(k) != b.settings.get(k)
        }
        ma, mb = a.summary.models, b.summary.models
        if ma != mb:
            changed["models"] = (", ".join(ma), ", ".join(mb))
        pa, pb = a.summary.base_prompt, b.summary.base_prompt
        if pa != pb:
            changed["base prompt"] = (pa, pb)
        return RunComparison(a, b, rows, changed, pairs)

    # ------------------------------------------------------------------ every kind of run
    def record_result(
        self,
        kind: str,
        result: Any,
        *,
        title: str,
        models: Sequence[str],
        settings: Mapping[str, Any] | None = None,
        headline: str = "",
        page: str | None = None,
        source: str = "dashboard",
        fingerprint: str | None = None,
        seconds: float | None = None,
        cache_dir: str | os.PathLike | None = None,
        form: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        out_dir: str | os.PathLike | None = None,
    ) -> int:
        """Store a run that is not an audit (a robustness battery, a fidelity simulation,
        a sensitivity study: ``kind``, one of :data:`RESULT_KINDS`) with its ``result``, so
        that it is listed with the audits and reopens on its page; returns its id."""
        if kind not in RESULT_KINDS:
            raise ValueError(f"`kind` must be one of {', '.join(RESULT_KINDS)}, got {kind!r}.")
        if source not in ("cli", "dashboard"):
            raise ValueError(f"`source` must be 'cli' or 'dashboard', got {source!r}.")
        blob = zlib.compress(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL), 6)
        with self._connect() as con:
            run_id = self._insert_run(
                con,
                when=created_at or datetime.now(UTC),
                source=source,
                page=page,
                title=title,
                settings=settings or {},
                cache_dir=cache_dir,
                out_dir=out_dir,
                seconds=seconds,
            )
            con.execute(
                sa.insert(db.run_extras).values(
                    run_id=run_id,
                    kind=kind,
                    fingerprint=fingerprint,
                    models="\n".join(models),
                    headline=headline,
                    payload=blob,
                    form=_form_json(form),
                )
            )
        return run_id

    def record_suite(
        self,
        result: Any,
        *,
        source: str,
        page: str | None = None,
        title: str | None = None,
        fingerprint: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        out_dir: str | os.PathLike | None = None,
        form: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> int:
        """Store a suite of cases (a :class:`~dbpa_core.suite.SuiteResult`, or its
        ``to_dict()``): :meth:`record_run` of its run (its tests, pooled tables, checks,
        spec, usage and the answers it wrote); :meth:`suite` reads its summary back."""
        from .runs import as_run

        run = as_run(result, title=title or "")
        return self.record_run(
            run,
            source=source,
            page=page,
            fingerprint=fingerprint,
            cache_dir=cache_dir,
            out_dir=out_dir,
            form=form,
            created_at=created_at,
        )

    def record_run(
        self,
        run: Any,
        *,
        source: str,
        page: str | None = None,
        fingerprint: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        out_dir: str | os.PathLike | None = None,
        form: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        signature: str | None = None,
    ) -> int:
        """Store a finished run of any kind (a :class:`~dbpa_core.runs.RunResult`): its
        title, models, settings, headline and what it keeps come from the run itself;
        ``signature`` (the page's inputs) is kept with its settings. Returns its id;
        :meth:`load_run` reads it back."""
        audits = run.audit_results()
        if audits is not None:
            run_id = self.record(
                audits,
                source=source,
                page=page,
                title=run.title or None,
                cache_dir=cache_dir,
                out_dir=out_dir,
                created_at=created_at,
            )
            if fingerprint is not None or form is not None:
                self.mark(run_id, fingerprint=fingerprint or "", form=form)
            return run_id
        settings = dict(run.settings())
        if signature is not None or "signature" not in settings:
            settings["signature"] = signature
        return self.record_result(
            run.kind,
            run.payload(),
            title=run.title or run.kind,
            models=list(run.models()),
            settings=settings,
            headline=run.headline(),
            page=page,
            source=source,
            fingerprint=fingerprint,
            seconds=run.seconds,
            cache_dir=cache_dir,
            form=form,
            created_at=created_at,
            out_dir=out_dir,
        )

    def load_run(self, run_id: int) -> Any:
        """Run ``run_id`` as a :class:`~dbpa_core.runs.RunResult` (whatever its kind);
        raises :class:`HistoryError` when there is none or it cannot be read back."""
        from .runs import AuditRun, UnknownResult, as_run

        run = self.get(run_id)
        if run.audits:
            return AuditRun(run.summary.title, audits=dict(run.audits), cache_dir=run.cache_dir)
        _kind, result = self.result(run_id)
        try:
            return as_run(result, title=run.summary.title)
        except UnknownResult as exc:
            raise HistoryError(f"Run {run_id}: {exc}; its summary is still listed.") from None

    def suite(self, run_id: int) -> dict[str, Any]:
        """The summary of suite run ``run_id`` (what :meth:`record_suite` stored: ``spec``,
        ``tests``, ``pooled``, ``usage``, ... as in a suite's results.json); raises
        :class:`HistoryError` when the run is not a suite or cannot be read."""
        kind, payload = self.result(run_id)
        summary = payload.get("suite") if kind == "suite" and isinstance(payload, dict) else None
        if not isinstance(summary, dict):
            raise HistoryError(f"Run {run_id} is not a suite of cases.")
        return summary

    def mark(self, run_id: int, *, fingerprint: str, form: Mapping[str, Any] | None = None) -> None:
        """Remember the inputs' ``fingerprint`` of an audit run (see :meth:`first_run`) and
        the ``form`` it was run from (see :meth:`last_runs`)."""
        e = db.run_extras
        with self._connect() as con:  # replaces what was there (as a new row would)
            con.execute(sa.delete(e).where(e.c.run_id == int(run_id)))
            con.execute(
                sa.insert(e).values(
                    run_id=int(run_id), kind="audit", fingerprint=fingerprint, form=_form_json(form)
                )
            )

    def form(self, run_id: int) -> dict[str, Any] | None:
        """The dashboard's inputs kept with run ``run_id`` (None when none were kept)."""
        e = db.run_extras
        with self._connect() as con:
            row = con.execute(sa.select(e.c.form).where(e.c.run_id == int(run_id))).mappings().first()
        try:
            form = json.loads(row["form"]) if row and row["form"] else None
        except ValueError:
            return None
        return form if isinstance(form, dict) else None

    def touch(self, run_id: int) -> None:
        """Say that run ``run_id`` was just run again (a rerun on cached answers, not
        recorded anew): :meth:`last_runs` then counts it as its page's newest."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._connect() as con:
            con.execute(
                sa.update(db.run_extras).where(db.run_extras.c.run_id == int(run_id)).values(used_at=now)
            )

    def last_runs(self, *, source: str = "dashboard") -> dict[str, tuple[int, str, dict | None]]:
        """The newest run of each page: ``{page: (run id, kind, form)}``, newest first (the
        form is None where it was not kept): what a reloaded dashboard shows again."""
        r, e = db.runs, db.run_extras
        newest = sa.case((e.c.used_at > r.c.created_at, e.c.used_at), else_=r.c.created_at)
        with self._connect() as con:
            rows = (
                con.execute(
                    sa.select(r.c.id, r.c.page, e.c.kind, e.c.form)
                    .select_from(r.outerjoin(e, e.c.run_id == r.c.id))
                    .where(r.c.source == source, r.c.page.is_not(None))
                    .order_by(newest.desc(), r.c.id.desc())
                )
                .mappings()
                .fetchall()
            )
        out: dict[str, tuple[int, str, dict | None]] = {}
        for r in rows:
            if r["page"] in out:
                continue
            try:
                form = json.loads(r["form"]) if r["form"] else None
            except ValueError:
                form = None
            out[r["page"]] = (int(r["id"]), r["kind"] or "audit", form if isinstance(form, dict) else None)
        return out

    def first_run(self, fingerprint: str) -> int | None:
        """The oldest run recorded with these inputs (``fingerprint``), or None: a rerun
        whose answers all came from the cache is that run again, not a new one."""
        e = db.run_extras
        with self._connect() as con:
            first = con.execute(
                sa.select(sa.func.min(e.c.run_id)).where(e.c.fingerprint == fingerprint)
            ).scalar()
        return int(first) if first is not None else None

    def extras(self, run_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """``{run id: {"kind", "models", "headline"}}`` of the runs that have them (every
        run of a kind in :data:`RESULT_KINDS`; an audit run has only its kind)."""
        ids = [int(i) for i in run_ids]
        if not ids:
            return {}
        e = db.run_extras
        with self._connect() as con:
            rows = (
                con.execute(
                    sa.select(e.c.run_id, e.c.kind, e.c.models, e.c.headline).where(e.c.run_id.in_(ids))
                )
                .mappings()
                .fetchall()
            )
        return {
            int(r["run_id"]): {
                "kind": r["kind"],
                "headline": r["headline"],
                "models": tuple(m for m in r["models"].split("\n") if m),
            }
            for r in rows
        }

    def result(self, run_id: int) -> tuple[str, Any]:
        """``(kind, result)`` of a run of a kind in :data:`RESULT_KINDS`, rebuilt from its
        record (raises :class:`HistoryError` when there is none, or it cannot be read:
        e.g. written by another version of dbpa)."""
        e = db.run_extras
        with self._connect() as con:
            row = (
                con.execute(sa.select(e.c.kind, e.c.payload).where(e.c.run_id == int(run_id)))
                .mappings()
                .first()
            )
        if row is None or row["payload"] is None:
            raise HistoryError(f"Run {run_id} holds no battery, fidelity, sensitivity or suite result.")
        try:
            return row["kind"], _SafeUnpickler(io.BytesIO(zlib.decompress(row["payload"]))).load()
        except Exception as exc:  # noqa: BLE001 - any damage or version change: one line
            raise HistoryError(
                f"Run {run_id}'s result cannot be read back ({type(exc).__name__}"
                f": {exc}); its summary is still listed."
            ) from None


def _suite_summary(con: Connection, row: Any) -> RunSummary | None:
    """The list line of a suite run (None when the run is not one): its tests counted, and
    its control gate from the pooled verdicts (a control that changed the answers across
    the cases, after the correction)."""
    e = db.run_extras
    extra = (
        con.execute(sa.select(e.c.kind, e.c.models, e.c.payload).where(e.c.run_id == row["id"]))
        .mappings()
        .first()
    )
    if extra is None or extra["kind"] != "suite":
        return None
    try:
        summary = _SafeUnpickler(io.BytesIO(zlib.decompress(extra["payload"]))).load()["suite"]
        tests, pooled = list(summary["tests"]), list(summary["pooled"])
        base = str(summary["spec"]["base"]["prompt"])
        spec: Any = summary["spec"]
    except Exception:  # noqa: BLE001 - a garbled payload: the run is still listed
        tests, pooled, base, spec = [], [], "", None
    controls = [d for d in pooled if isinstance(d, dict) and d.get("role") == "control"]
    return RunSummary(
        id=row["id"],
        created_at=_created(row["created_at"]),
        source=row["source"],
        page=row["page"],
        title=row["title"],
        tool_version=row["tool_version"],
        models=tuple(m for m in (extra["models"] or "").split("\n") if m),
        base_prompt=base,
        n_audits=0,
        n_tests=len(tests),
        n_significant=sum(1 for t in tests if isinstance(t, dict) and t.get("significant")),
        failed_controls=tuple(str(d.get("perturbation")) for d in controls if d.get("significant")),
        _has_controls=bool(controls),
        _untestable=bool(controls)
        and not any(d.get("significant") for d in controls)
        and _untestable_controls(spec),
        kind="suite",
    )


def _untestable_controls(spec: Any) -> bool:
    """Whether a recorded spec (its JSON text or dict) has a control that no result could
    have made fail, as the run's gate decided from the same spec; False when it cannot be
    read (the list still shows the run)."""
    from .reach import reachability

    try:
        d = json.loads(spec) if isinstance(spec, str | bytes) else spec
        return bool(reachability(_spec(d)).untestable_controls)
    except Exception:  # noqa: BLE001 - a spec of another version or garbled: no claim
        return False


def _form_json(form: Mapping[str, Any] | None) -> str | None:
    return json.dumps(jsonable(dict(form)), ensure_ascii=False, default=str) if form else None


class _SafeUnpickler(pickle.Unpickler):
    """Rebuilds only what dbpa's results are made of: classes of dbpa, numpy, pandas and
    plain Python values, and the few functions their pickles rebuild objects with (never
    any other function): a history file cannot make the dashboard run other code."""

    MODULES = (
        "dbpa_core",
        "numpy",
        "pandas",
        "pyarrow",
        "datetime",
        "collections",
        "zoneinfo",
        "pytz",
        "dateutil",
    )
    BUILTINS = frozenset(
        {
            "set",
            "frozenset",
            "list",
            "dict",
            "tuple",
            "complex",
            "slice",
            "range",
            "bytearray",
            "bytes",
            "object",
            "float",
            "int",
            "str",
            "bool",
        }
    )
    REBUILDERS = (
        "_reconstruct",
        "_unpickle",
        "_restore",
        "_new_",
        "scalar",
        "__newobj__",
        "_reconstructor",
        "_frombuffer",
        "encode",
    )
    # what pandas' Arrow-backed columns are rebuilt with
    ARROW = frozenset(
        {
            "type_for_alias",
            "py_buffer",
            "field",
            "schema",
            "string",
            "large_string",
            "int64",
            "float64",
            "bool_",
            "timestamp",
            "list_",
            "struct",
        }
    )

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins":
            if name in self.BUILTINS:
                return super().find_class(module, name)
        elif module.split(".")[0] in self.MODULES or module in ("copyreg", "_codecs"):
            found = super().find_class(module, name)
            if (
                isinstance(found, type)
                or name.startswith(self.REBUILDERS)
                or (module.startswith("pyarrow") and name in self.ARROW)
            ):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a dbpa result")


# --------------------------------------------------------------------------- helpers
def _who() -> tuple[str, str]:
    """(user, host) of this process: who ran a run, and where."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError, ImportError):  # no login name in the environment or passwd
        user = ""
    return user, socket.gethostname()


def _created(text: Any) -> datetime:
    """A run's time; a garbled one reads as the epoch (the run is still listed)."""
    try:
        when = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return datetime.fromtimestamp(0, UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _bound(value: date | datetime | str, *, end: bool) -> str:
    if isinstance(value, str):
        try:
            value = (
                datetime.fromisoformat(value) if "T" in value or " " in value else date.fromisoformat(value)
            )
        except ValueError:
            raise HistoryError(f"{value!r} is not a date (YYYY-MM-DD)") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat(timespec="seconds")
    t = "23:59:59" if end else "00:00:00"
    return f"{value.isoformat()}T{t}+00:00"


def _pack(obj: Any) -> bytes:
    return zlib.compress(json.dumps(jsonable(obj)).encode(), 6)


def _unpack(blob: bytes) -> Any:
    return json.loads(zlib.decompress(blob).decode())


def _npy(arr: np.ndarray | None) -> bytes | None:
    if arr is None:
        return None
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr, dtype=np.float32), allow_pickle=False)
    return buf.getvalue()


def _from_npy(blob: bytes | None) -> np.ndarray | None:
    if blob is None:
        return None
    return np.load(io.BytesIO(blob), allow_pickle=False)


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of dataclass ``cls`` (newer or older dbpa
    versions may have written more or fewer)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _spec(d: Mapping[str, Any]) -> AuditSpec:
    kw = _known(AuditSpec, d)
    kw["models"] = tuple(dict(m) for m in d["models"])
    kw["embedder"] = dict(d.get("embedder") or {"backend": "local"})
    kw["base_prompt"] = d["base"]["prompt"]
    kw["system_prompt"] = d["base"].get("system_prompt")
    kw["perturbations"] = tuple(Perturbation(**_known(Perturbation, p)) for p in d.get("perturbations") or ())
    kw["source"] = "history"
    return AuditSpec(**kw)


def spec_from_dict(d: Mapping[str, Any]) -> AuditSpec:
    """A spec read back from what :meth:`AuditSpec.to_dict` wrote (a recorded run's, or a
    suite's ``results.json``): not validated again, since it was when it ran; keys written
    by another dbpa version that this one lacks are left out."""
    return _spec(d)


def _test(d: Mapping[str, Any]) -> DBPAResult:
    kw = _known(DBPAResult, d)
    for k in ("null_similarities", "alt_similarities", "permutation_statistics"):
        kw[k] = np.asarray(d.get(k) or [], dtype=float)
    kw["bin_edges"] = np.asarray(d["bin_edges"], float) if d.get("bin_edges") is not None else None
    return DBPAResult(**kw)


# what a garbled row raises when it is read back (zlib, JSON, numpy's "pickled data", ...)
_GARBLED = (
    zlib.error,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    EOFError,
    AttributeError,
    OSError,
    RecursionError,
)


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _rebuild(con: Connection, a: Any, unreadable: list[str]) -> AuditResult | None:
    """One audit from its rows. What cannot be read is left out (a test's numbers without
    its charts, an arm without its responses or embeddings) and named in ``unreadable``;
    None when not even its spec can be read."""
    where = f"audit {a['job']!r}"
    try:
        spec = _spec(json.loads(a["spec"]))
    except _GARBLED as exc:
        unreadable.append(f"{where}: its spec cannot be read ({_why(exc)}); the audit is left out")
        return None
    arms = []
    for row in (
        con.execute(sa.select(db.arms).where(db.arms.c.audit_id == a["id"]).order_by(db.arms.c.position))
        .mappings()
        .fetchall()
    ):
        what = f"{where}, arm {row['name']!r}"
        arms.append(_arm(row, what, unreadable))
    if not arms:
        unreadable.append(f"{where}: its responses are missing; the audit is left out")
        return None
    tests = tuple(
        _test_row(t, spec, f"{where}, test {t['name']!r}", unreadable)
        for t in con.execute(
            sa.select(db.tests).where(db.tests.c.audit_id == a["id"]).order_by(db.tests.c.position)
        )
        .mappings()
        .fetchall()
    )
    roc = None
    if a["roc"]:
        try:
            d = json.loads(a["roc"])
            roc = ROCResult(
                np.asarray(d["alpha"], float),
                np.asarray(d["fpr"], float),
                np.asarray(d["tpr"], float),
                float(d["auc"]),
                int(d["n_control"]),
                int(d["n_target"]),
            )
        except _GARBLED as exc:
            unreadable.append(f"{where}: its ROC curve cannot be read ({_why(exc)})")
    usage = _json_or(a["usage"], {}, f"{where}: its usage", unreadable)
    warnings = _json_or(a["warnings"], [], f"{where}: its warnings", unreadable)
    return AuditResult(
        spec,
        arms[0],
        tuple(arms[1:]),
        tests,
        roc,
        usage if isinstance(usage, dict) else {},
        tuple(str(w) for w in warnings) if isinstance(warnings, list) else (),
    )


def _json_or(text: Any, default: Any, what: str, unreadable: list[str]) -> Any:
    try:
        return json.loads(text)
    except _GARBLED as exc:
        unreadable.append(f"{what} cannot be read ({_why(exc)})")
        return default


def _arm(row: Any, what: str, unreadable: list[str]) -> ArmResponses:
    model = _json_or(row["model"], {}, f"{what}: its model", unreadable)
    arm = Arm(
        row["name"],
        row["prompt"],
        row["system_prompt"],
        shown_config(model if isinstance(model, dict) else {}),  # older rows: no password shown
        row["role"],
    )
    texts = _json_or(row["responses"], [], f"{what}: its responses", unreadable)
    if not (isinstance(texts, list) and all(isinstance(t, str) for t in texts)):
        unreadable.append(f"{what}: its responses are not a list of texts")
        texts = []
    try:
        embeddings = _from_npy(row["embeddings"])
    except _GARBLED as exc:
        unreadable.append(f"{what}: its embeddings cannot be read ({_why(exc)})")
        embeddings = None
    return ArmResponses(
        arm, tuple(texts), embeddings, row["new_samples"], row["prompt_tokens"], row["completion_tokens"]
    )


def _test_row(t: Any, spec: AuditSpec, what: str, unreadable: list[str]) -> PerturbationResult:
    nums = {}
    for col in ("effect_size", "chance_effect_size", "p_value", "p_adjusted"):
        try:
            nums[col] = float(t[col])
        except (TypeError, ValueError):
            unreadable.append(f"{what}: its {col} is not a number ({str(t[col])[:40]!r})")
            nums[col] = math.nan
    sequential = None
    try:
        detail = _unpack(t["detail"])
        test = _test(detail)
        if isinstance(detail, dict) and detail.get("sequential"):
            sequential = SequentialRecord.from_dict(detail["sequential"])
    except _GARBLED as exc:
        unreadable.append(
            f"{what}: its permutation detail cannot be read ({_why(exc)}); its "
            "numbers are shown, its charts are not"
        )
        test = DBPAResult(
            nums["effect_size"],
            nums["p_value"],
            np.empty(0),
            np.empty(0),
            np.empty(0),
            spec.measure,
            spec.samples,
            spec.samples,
            0,
            chance_effect_size=nums["chance_effect_size"],
            null=spec.null,
        )
    return PerturbationResult(
        t["name"],
        t["role"],
        t["prompt"],
        t["model"],
        nums["effect_size"],
        nums["p_value"],
        nums["p_adjusted"],
        bool(t["significant"]),
        str(t["stars"]),
        test,
        sequential=sequential,
    )


def where_responses_live(run: Run, *, answers: int | None = None, history: str = "") -> str:
    """A sentence naming every place that holds a run's responses: the history (``history``
    names its database) when it keeps them (``answers``: how many the run keeps; None:
    those of its audits), the run's ``responses.jsonl`` and its cache (a folder, or the
    database the answers went to)."""
    kept = (
        sum(len(a.texts) for r in run.audits.values() for a in (r.base, *r.arms))
        if answers is None
        else answers
    )
    where = f" {history}" if history else ""
    parts = [f"in the history database{where} ({kept} answers)"] if kept else []
    if run.out_dir:
        parts.append(f"{Path(run.out_dir) / 'responses.jsonl'}")
    if run.cache_dir:
        db_cache = "://" in str(run.cache_dir)
        parts.append(f"the cache {'database ' if db_cache else ''}{run.cache_dir}")
    return "; ".join(parts) or "not kept (the run had no cache and wrote no files)"


__all__ = [
    "DB_NAME",
    "ComparedTest",
    "History",
    "HistoryError",
    "Run",
    "RunComparison",
    "RunSummary",
    "default_db_path",
    "spec_from_dict",
    "where_responses_live",
]
