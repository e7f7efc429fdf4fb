"""The run history: every audit, from the dashboard or the CLI, in a local SQLite database.

The only module that touches the database (``$DBPA_HOME/history.sqlite3``). It uses the
standard :mod:`sqlite3` with numbered migrations (``PRAGMA user_version`` says which have
run), so an older database is upgraded in place and never rewritten by hand.

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
import io
import json
import math
import os
import pickle
import platform
import sqlite3
import zlib
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .audit import Arm, ArmResponses, AuditResult, PerturbationResult
from .home import HomeError, dbpa_home, ensure_home
from .spec import AuditSpec, Perturbation, _shown, model_label
from .types import DBPAResult, ROCResult, _jsonable

DB_NAME = "history.sqlite3"

# Numbered migrations: entry i brings a database from user_version i to i + 1. Never edit
# one that has shipped; append a new one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at   TEXT NOT NULL,          -- ISO 8601, UTC
        source       TEXT NOT NULL,          -- 'cli' or 'dashboard'
        page         TEXT,                   -- the dashboard page that ran it
        title        TEXT NOT NULL,
        tool_version TEXT NOT NULL,
        environment  TEXT NOT NULL,          -- JSON: python, platform
        settings     TEXT NOT NULL,          -- JSON: k, B, measure, correction, alpha, seed, ...
        cache_dir    TEXT,                   -- where the responses are cached
        out_dir      TEXT,                   -- where `dbpa audit --out` wrote them
        seconds      REAL
    );
    CREATE TABLE audits (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        position    INTEGER NOT NULL,
        job         TEXT NOT NULL,           -- e.g. the model label on multi-model pages
        name        TEXT NOT NULL,
        mode        TEXT NOT NULL,           -- 'perturbation' or 'models'
        models      TEXT NOT NULL,           -- model labels, for filtering
        base_prompt TEXT NOT NULL,
        spec        TEXT NOT NULL,           -- JSON (AuditSpec.to_dict: key names, never keys)
        usage       TEXT NOT NULL,           -- JSON
        warnings    TEXT NOT NULL,           -- JSON list
        roc         TEXT                     -- JSON or NULL
    );
    CREATE TABLE tests (
        audit_id            INTEGER NOT NULL REFERENCES audits(id) ON DELETE CASCADE,
        position            INTEGER NOT NULL,
        name                TEXT NOT NULL,
        role                TEXT,
        model               TEXT NOT NULL,
        prompt              TEXT NOT NULL,
        effect_size         REAL NOT NULL,
        chance_effect_size  REAL NOT NULL,
        effect_above_chance REAL NOT NULL,
        p_value             REAL NOT NULL,
        p_adjusted          REAL NOT NULL,
        significant         INTEGER NOT NULL,
        stars               TEXT NOT NULL,
        detail              BLOB NOT NULL,   -- zlib-compressed JSON of the DBPAResult
        PRIMARY KEY (audit_id, position)
    );
    CREATE TABLE arms (
        audit_id          INTEGER NOT NULL REFERENCES audits(id) ON DELETE CASCADE,
        position          INTEGER NOT NULL,  -- 0: the base (or reference model)
        name              TEXT NOT NULL,
        role              TEXT,
        prompt            TEXT NOT NULL,
        system_prompt     TEXT,
        model             TEXT NOT NULL,     -- JSON model config
        responses         TEXT NOT NULL,     -- JSON list of the k texts
        embeddings        BLOB,              -- .npy bytes (float32), NULL for BLEU/ROUGE
        new_samples       INTEGER NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        PRIMARY KEY (audit_id, position)
    );
    CREATE INDEX audits_run ON audits(run_id);
    CREATE INDEX runs_created ON runs(created_at);
    """,
    # every kind of run, and reruns: what an audit's rows cannot hold
    """
    CREATE TABLE run_extras (
        run_id      INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        kind        TEXT NOT NULL,           -- 'audit', 'battery', 'fidelity', 'sensitivity'
        fingerprint TEXT,                    -- hash of the inputs (page, spec, models)
        models      TEXT NOT NULL DEFAULT '',-- model labels, one a line (non-audit runs)
        headline    TEXT NOT NULL DEFAULT '',-- one line that says what came out
        payload     BLOB,                    -- a non-audit run's result, to reopen on its page
        form        TEXT,                    -- JSON: the dashboard's inputs when it ran
        used_at     TEXT                     -- ISO 8601, UTC: when it was last rerun
    );
    CREATE INDEX run_extras_fingerprint ON run_extras(fingerprint);
    """,
)
# the kinds of run besides audits (each reopened on its own page)
RESULT_KINDS = ("battery", "fidelity", "sensitivity", "suite")

SETTINGS_KEYS = ("samples", "permutations", "measure", "correction", "alpha", "seed",
                 "temperature", "top_p", "max_tokens", "embedder", "sequential")


class HistoryError(ValueError):
    """A run that does not exist, or a database that cannot be read."""


def default_db_path() -> Path:
    """``$DBPA_HOME/history.sqlite3``."""
    return dbpa_home() / DB_NAME


# --------------------------------------------------------------------------- results
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
    failed_controls: tuple[str, ...]   # "job: name" of significant control perturbations

    @property
    def control_gate(self) -> str:
        """'fail' when a control changed the answers significantly, 'pass' when controls
        were tested and none did, '' when no perturbation is a control."""
        return "fail" if self.failed_controls else ("pass" if self._has_controls else "")

    _has_controls: bool = False
    kind: str = ""   # 'suite' for a suite of cases (its responses are not in the history)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "created_at": self.created_at.isoformat(), "source": self.source,
                "page": self.page, "title": self.title, "tool_version": self.tool_version,
                "models": list(self.models), "base_prompt": self.base_prompt,
                "audits": self.n_audits, "tests": self.n_tests,
                "significant": self.n_significant, "control_gate": self.control_gate,
                "failed_controls": list(self.failed_controls)}


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
    unreadable: tuple[str, ...] = ()   # parts of garbled rows that could not be read back

    @property
    def id(self) -> int:
        return self.summary.id

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary.to_dict(), "settings": self.settings,
                "environment": self.environment, "cache_dir": self.cache_dir,
                "out_dir": self.out_dir, "seconds": self.seconds,
                "responses": where_responses_live(self),
                "audits": {job: a.to_dict() for job, a in self.audits.items()},
                "unreadable": list(self.unreadable)}


@dataclass(frozen=True)
class ComparedTest:
    """One perturbation (or model) in two runs; ``None`` where a run lacks it."""

    job: str
    name: str
    role: str | None
    a: PerturbationResult | None
    b: PerturbationResult | None

    @property
    def status(self) -> str:
        if self.a is None:
            return "only in B"
        if self.b is None:
            return "only in A"
        if self.a.significant == self.b.significant:
            return "same verdict"
        return "now significant" if self.b.significant else "no longer significant"

    @property
    def verdict_changed(self) -> bool:
        return self.status in ("now significant", "no longer significant")

    def to_dict(self) -> dict[str, Any]:
        def side(p):
            return None if p is None else {
                "effect_size": p.effect_size, "effect_above_chance": p.effect_above_chance,
                "p_value": p.p_value, "p_adjusted": p.p_adjusted,
                "significant": p.significant, "stars": p.stars}
        return {"job": self.job, "name": self.name, "role": self.role, "status": self.status,
                "a": side(self.a), "b": side(self.b)}


@dataclass(frozen=True)
class RunComparison:
    """Two runs side by side: which perturbations changed verdict, and what settings differ."""

    a: Run
    b: Run
    rows: tuple[ComparedTest, ...]
    settings_changed: dict[str, tuple[Any, Any]]
    pairs: tuple[tuple[str, str], ...]          # (job in A, job in B)

    @property
    def changed(self) -> tuple[ComparedTest, ...]:
        return tuple(r for r in self.rows if r.verdict_changed)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.summary.to_dict(), "b": self.b.summary.to_dict(),
                "pairs": [list(p) for p in self.pairs],
                "settings_changed": {k: list(v) for k, v in self.settings_changed.items()},
                "rows": [r.to_dict() for r in self.rows],
                "verdicts_changed": len(self.changed)}


# --------------------------------------------------------------------------- the database
class History:
    """The run database at ``path`` (default ``$DBPA_HOME/history.sqlite3``).

    Every method opens its own short connection, so one object can be shared between
    threads (the dashboard's sessions) and processes can write at the same time (SQLite
    serialises them; a writer waits up to ``timeout`` seconds).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, timeout: float = 30.0):
        self.path = Path(path) if path else default_db_path()
        self.timeout = timeout

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _connect(self):
        try:
            ensure_home(self.path.parent)
        except HomeError as exc:
            raise HistoryError(str(exc)) from None
        try:
            con = sqlite3.connect(self.path, timeout=self.timeout)
        except sqlite3.Error as exc:
            raise HistoryError(f"Cannot open the run history {self.path}: {exc}") from None
        try:
            con.row_factory = sqlite3.Row
            # a garbled text cell reads with U+FFFD in place of its bad bytes, not as an error
            con.text_factory = lambda b: b.decode("utf-8", "replace")
            con.execute("PRAGMA foreign_keys = ON")
            self._migrate(con)
            with con:  # one transaction: committed on success, rolled back on error
                yield con
        except sqlite3.OperationalError as exc:  # the file is fine; using it is not
            raise HistoryError(self._unusable(exc)) from None
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"The run history {self.path} is damaged and cannot be read "
                               f"({exc}). Move the file away (keep it: some runs may still be "
                               "recovered from it) to start a new one.") from None
        finally:
            con.close()

    def _unusable(self, exc: sqlite3.OperationalError) -> str:
        """What a database that is intact but cannot be used now says: locked, read-only,
        or the reason SQLite gives (never advice to remove it)."""
        msg = str(exc).lower()
        if "locked" in msg or "busy" in msg:
            return (f"The run history {self.path} is locked by another process (another dbpa "
                    f"run or the dashboard writing to it) and stayed locked for "
                    f"{self.timeout:g} s: wait for it to finish and try again. Nothing was lost.")
        if "readonly" in msg or "read-only" in msg:
            return (f"The run history {self.path} is read-only (no permission to write it or "
                    "its folder): make it writable, or point DBPA_HOME at a folder you can "
                    "write to. Nothing was lost.")
        return (f"Cannot use the run history {self.path} ({exc}); the file was left as it is.")

    @staticmethod
    def _migrate(con: sqlite3.Connection) -> None:
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise HistoryError(f"The run history was written by a newer dbpa (schema "
                               f"{version}, this one knows {len(MIGRATIONS)}): upgrade dbpa.")
        for i in range(version, len(MIGRATIONS)):
            with con:
                con.executescript("BEGIN;" + MIGRATIONS[i] + f"; PRAGMA user_version = {i + 1}; COMMIT;")

    def schema_version(self) -> int:
        with self._connect() as con:
            return con.execute("PRAGMA user_version").fetchone()[0]

    # ------------------------------------------------------------------ writing
    def record(self, audits: Mapping[str, AuditResult] | Sequence[AuditResult], *,
               source: str, page: str | None = None, title: str | None = None,
               cache_dir: str | os.PathLike | None = None,
               out_dir: str | os.PathLike | None = None,
               created_at: datetime | None = None) -> int:
        """Store one run (one or more audits, by job name); returns its id."""
        if not isinstance(audits, Mapping):
            audits = {model_label(r.spec.model) if len(audits) > 1 else r.spec.name: r
                      for r in audits}
        if not audits:
            raise ValueError("`audits` is empty: nothing to record.")
        if source not in ("cli", "dashboard"):
            raise ValueError(f"`source` must be 'cli' or 'dashboard', got {source!r}.")
        first = next(iter(audits.values()))
        spec_d = first.spec.to_dict()
        settings = {k: spec_d.get(k) for k in SETTINGS_KEYS}
        when = (created_at or datetime.now(UTC)).astimezone(UTC)
        seconds = sum(float(r.usage.get("seconds", 0.0)) for r in audits.values())
        env = {"python": platform.python_version(), "platform": platform.platform(terse=True),
               "numpy": np.__version__}
        with self._connect() as con:
            run_id = con.execute(
                "INSERT INTO runs (created_at, source, page, title, tool_version, environment,"
                " settings, cache_dir, out_dir, seconds) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (when.isoformat(timespec="seconds"), source, page, title or first.spec.name,
                 __version__, json.dumps(env), json.dumps(_jsonable(settings)),
                 str(cache_dir) if cache_dir else None, str(out_dir) if out_dir else None,
                 round(seconds, 3))).lastrowid
            for pos, (job, result) in enumerate(audits.items()):
                self._insert_audit(con, run_id, pos, str(job), result)
        return int(run_id)

    @staticmethod
    def _insert_audit(con, run_id: int, position: int, job: str, r: AuditResult) -> None:
        s = r.spec
        audit_id = con.execute(
            "INSERT INTO audits (run_id, position, job, name, mode, models, base_prompt, spec,"
            " usage, warnings, roc) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, position, job, s.name, r.mode, "\n".join(model_label(m) for m in s.models),
             s.base_prompt, json.dumps(_jsonable(s.to_dict()), ensure_ascii=False),
             json.dumps(_jsonable(r.usage)), json.dumps(list(r.warnings), ensure_ascii=False),
             json.dumps(r.roc.to_dict()) if r.roc is not None else None)).lastrowid
        con.executemany(
            "INSERT INTO tests VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(audit_id, i, p.name, p.role, p.model, p.prompt, float(p.effect_size),
              float(p.chance_effect_size), float(p.effect_above_chance), float(p.p_value),
              float(p.p_adjusted), int(bool(p.significant)), p.stars, _pack(p.test.to_dict()))
             for i, p in enumerate(r.perturbations)])
        con.executemany(
            "INSERT INTO arms VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [(audit_id, i, a.arm.name, a.arm.role, a.arm.prompt, a.arm.system_prompt,
              json.dumps(_jsonable(_shown(a.arm.model)), ensure_ascii=False),
              json.dumps(list(a.texts), ensure_ascii=False), _npy(a.embeddings),
              int(a.new_samples), int(a.prompt_tokens), int(a.completion_tokens))
             for i, a in enumerate((r.base, *r.arms))])

    def delete(self, *run_ids: int) -> int:
        """Delete runs (with their audits, results and responses); returns how many."""
        if not run_ids:
            return 0
        with self._connect() as con:
            marks = ",".join("?" * len(run_ids))
            n = con.execute(f"DELETE FROM runs WHERE id IN ({marks})",  # only "?" marks
                            [int(i) for i in run_ids]).rowcount
        return int(n)

    # ------------------------------------------------------------------ reading
    def list(self, *, model: str | None = None, prompt: str | None = None,
             since: date | datetime | str | None = None, until: date | datetime | str | None = None,
             source: str | None = None, limit: int | None = None) -> list[RunSummary]:
        """Runs, newest first. ``model`` and ``prompt`` match any part (case-insensitive) of a
        model label or of the base or perturbed prompts; ``since``/``until`` are dates
        (inclusive) or datetimes."""
        where, args = [], []
        if model:
            # an audit's models, or those of a run of another kind (a suite, a battery)
            where.append("(r.id IN (SELECT run_id FROM audits WHERE models LIKE ? ESCAPE '\\') "
                         "OR r.id IN (SELECT run_id FROM run_extras WHERE models LIKE ? "
                         "ESCAPE '\\'))")
            args += [_like(model)] * 2
        if prompt:
            where.append("r.id IN (SELECT a.run_id FROM audits a LEFT JOIN tests t ON "
                         "t.audit_id = a.id WHERE a.base_prompt LIKE ? ESCAPE '\\' OR "
                         "t.prompt LIKE ? ESCAPE '\\' OR t.name LIKE ? ESCAPE '\\')")
            args += [_like(prompt)] * 3
        if since is not None:
            where.append("r.created_at >= ?")
            args.append(_bound(since, end=False))
        if until is not None:
            where.append("r.created_at <= ?")
            args.append(_bound(until, end=True))
        if source:
            where.append("r.source = ?")
            args.append(source)
        sql = "SELECT r.* FROM runs r" + (" WHERE " + " AND ".join(where) if where else "") + \
            " ORDER BY r.created_at DESC, r.id DESC" + (f" LIMIT {int(limit)}" if limit else "")
        with self._connect() as con:
            return [self._summary(con, row) for row in con.execute(sql, args).fetchall()]

    @staticmethod
    def _summary(con, row) -> RunSummary:
        audits = con.execute("SELECT id, job, models, base_prompt FROM audits WHERE run_id = ? "
                             "ORDER BY position", (row["id"],)).fetchall()
        models: list[str] = []
        for a in audits:
            names = a["models"] if isinstance(a["models"], str) else ""
            models += [m for m in names.split("\n") if m not in models]
        tests = con.execute(
            "SELECT a.job, t.name, t.role, t.significant FROM tests t JOIN audits a ON "
            "a.id = t.audit_id WHERE a.run_id = ? ORDER BY a.position, t.position",
            (row["id"],)).fetchall()
        if not audits:
            suite = _suite_summary(con, row)
            if suite is not None:
                return suite
        several = len(audits) > 1
        failed = tuple((f"{t['job']}: " if several else "") + t["name"] for t in tests
                       if t["role"] == "control" and t["significant"])
        return RunSummary(
            id=row["id"], created_at=_created(row["created_at"]),
            source=row["source"], page=row["page"], title=row["title"],
            tool_version=row["tool_version"], models=tuple(models),
            base_prompt=audits[0]["base_prompt"] if audits else "", n_audits=len(audits),
            n_tests=len(tests), n_significant=sum(t["significant"] for t in tests),
            failed_controls=failed, _has_controls=any(t["role"] == "control" for t in tests))

    def get(self, run_id: int) -> Run:
        """A run with every audit rebuilt (raises :class:`HistoryError` if there is none)."""
        with self._connect() as con:
            row = con.execute("SELECT * FROM runs WHERE id = ?", (int(run_id),)).fetchone()
            if row is None:
                raise HistoryError(f"There is no run {run_id} in the history ({self.path}).")
            summary = self._summary(con, row)
            audits, unreadable = {}, []
            for a in con.execute("SELECT * FROM audits WHERE run_id = ? ORDER BY position",
                                 (row["id"],)).fetchall():
                rebuilt = _rebuild(con, a, unreadable)
                if rebuilt is not None:
                    audits[a["job"]] = rebuilt
        settings = _json_or(row["settings"], {}, "the run's settings", unreadable)
        env = _json_or(row["environment"], {}, "the run's environment", unreadable)
        return Run(summary, settings if isinstance(settings, dict) else {},
                   env if isinstance(env, dict) else {}, row["cache_dir"], row["out_dir"],
                   row["seconds"], audits, tuple(unreadable))

    def compare(self, a_id: int, b_id: int) -> RunComparison:
        """Run ``a_id`` (A, e.g. before an upgrade) against run ``b_id`` (B).

        Audits are paired by job name (e.g. the model label on multi-model pages); two runs
        of one audit each are paired whatever their models are called, so a model before
        and after an upgrade compare directly. Perturbations are matched by name.
        """
        a, b = self.get(a_id), self.get(b_id)
        if len(a.audits) == 1 and len(b.audits) == 1:
            pairs = [(next(iter(a.audits)), next(iter(b.audits)))]
        else:
            pairs = [(j, j) for j in a.audits if j in b.audits]
        rows: list[ComparedTest] = []
        paired_a = {p[0] for p in pairs}
        paired_b = {p[1] for p in pairs}
        for ja, jb in pairs:
            ra, rb = a.audits[ja], b.audits[jb]
            job = ja if ja == jb else f"{ja} → {jb}"
            by_b = {p.name: p for p in rb.perturbations}
            for p in ra.perturbations:
                rows.append(ComparedTest(job, p.name, p.role, p, by_b.pop(p.name, None)))
            rows += [ComparedTest(job, p.name, p.role, None, p) for p in by_b.values()]
        for j, r in a.audits.items():
            if j not in paired_a:
                rows += [ComparedTest(j, p.name, p.role, p, None) for p in r.perturbations]
        for j, r in b.audits.items():
            if j not in paired_b:
                rows += [ComparedTest(j, p.name, p.role, None, p) for p in r.perturbations]
        changed = {k: (a.settings.get(k), b.settings.get(k)) for k in SETTINGS_KEYS
                   if a.settings.get(k) != b.settings.get(k)}
        ma, mb = a.summary.models, b.summary.models
        if ma != mb:
            changed["models"] = (", ".join(ma), ", ".join(mb))
        pa, pb = a.summary.base_prompt, b.summary.base_prompt
        if pa != pb:
            changed["base prompt"] = (pa, pb)
        return RunComparison(a, b, tuple(rows), changed, tuple(pairs))


    # ------------------------------------------------------------------ every kind of run
    def record_result(self, kind: str, result: Any, *, title: str, models: Sequence[str],
                      settings: Mapping[str, Any] | None = None, headline: str = "",
                      page: str | None = None, source: str = "dashboard",
                      fingerprint: str | None = None, seconds: float | None = None,
                      cache_dir: str | os.PathLike | None = None,
                      form: Mapping[str, Any] | None = None,
                      created_at: datetime | None = None,
                      out_dir: str | os.PathLike | None = None) -> int:
        """Store a run that is not an audit (a robustness battery, a fidelity simulation,
        a sensitivity study: ``kind``, one of :data:`RESULT_KINDS`) with its ``result``, so
        that it is listed with the audits and reopens on its page; returns its id."""
        if kind not in RESULT_KINDS:
            raise ValueError(f"`kind` must be one of {', '.join(RESULT_KINDS)}, got {kind!r}.")
        if source not in ("cli", "dashboard"):
            raise ValueError(f"`source` must be 'cli' or 'dashboard', got {source!r}.")
        when = (created_at or datetime.now(UTC)).astimezone(UTC)
        env = {"python": platform.python_version(), "platform": platform.platform(terse=True),
               "numpy": np.__version__}
        blob = zlib.compress(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL), 6)
        with self._connect() as con:
            run_id = int(con.execute(
                "INSERT INTO runs (created_at, source, page, title, tool_version, environment,"
                " settings, cache_dir, out_dir, seconds) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (when.isoformat(timespec="seconds"), source, page, title, __version__,
                 json.dumps(env), json.dumps(_jsonable(dict(settings or {}))),
                 str(cache_dir) if cache_dir else None, str(out_dir) if out_dir else None,
                 round(float(seconds), 3) if seconds is not None else None)).lastrowid)
            con.execute("INSERT INTO run_extras (run_id, kind, fingerprint, models, headline,"
                        " payload, form) VALUES (?,?,?,?,?,?,?)",
                        (run_id, kind, fingerprint, "\n".join(models), headline, blob,
                         _form_json(form)))
        return run_id

    def record_suite(self, result: Any, *, source: str, page: str | None = None,
                     title: str | None = None, fingerprint: str | None = None,
                     cache_dir: str | os.PathLike | None = None,
                     out_dir: str | os.PathLike | None = None,
                     form: Mapping[str, Any] | None = None,
                     created_at: datetime | None = None) -> int:
        """Store a suite of cases (a :class:`~dbpa_core.suite.SuiteResult`, or its
        ``to_dict()``): its tests and pooled tables, spec, usage and settings (not its
        responses: they are in the cache and ``responses.jsonl``); returns the run's id.
        :meth:`suite` reads it back."""
        summary = result if isinstance(result, Mapping) else result.to_dict()
        spec = summary.get("spec") or {}
        # the signature: what the Suite page compares its spec with (outdated results)
        settings = {**{k: spec.get(k) for k in SETTINGS_KEYS},
                    "signature": json.dumps(_jsonable(spec), sort_keys=True, default=str)}
        pooled = summary.get("pooled") or []
        tests = summary.get("tests") or []
        found = sum(1 for t in tests if t.get("significant"))
        changed = [str(d.get("perturbation")) for d in pooled if d.get("significant")]
        headline = (f"{summary.get('cases', 0)} cases x {len(pooled)} perturbations, {found} of "
                    f"{len(tests)} tests significant; pooled over the cases: "
                    + (f"changed by {', '.join(changed)}" if changed else "no change shown"))
        return self.record_result(
            "suite", {"suite": _jsonable(dict(summary))}, title=title or str(spec.get("name")
                                                                            or "suite"),
            models=[model_label(m) for m in spec.get("models") or ()], settings=settings,
            headline=headline, page=page, source=source, fingerprint=fingerprint,
            seconds=(summary.get("usage") or {}).get("seconds"), cache_dir=cache_dir,
            out_dir=out_dir, form=form, created_at=created_at)

    def suite(self, run_id: int) -> dict[str, Any]:
        """The summary of suite run ``run_id`` (what :meth:`record_suite` stored: ``spec``,
        ``tests``, ``pooled``, ``usage``, ... as in a suite's results.json); raises
        :class:`HistoryError` when the run is not a suite or cannot be read."""
        kind, payload = self.result(run_id)
        summary = payload.get("suite") if kind == "suite" and isinstance(payload, dict) else None
        if not isinstance(summary, dict):
            raise HistoryError(f"Run {run_id} is not a suite of cases.")
        return summary

    def mark(self, run_id: int, *, fingerprint: str,
             form: Mapping[str, Any] | None = None) -> None:
        """Remember the inputs' ``fingerprint`` of an audit run (see :meth:`first_run`) and
        the ``form`` it was run from (see :meth:`last_runs`)."""
        with self._connect() as con:
            con.execute("INSERT OR REPLACE INTO run_extras (run_id, kind, fingerprint, form) "
                        "VALUES (?, 'audit', ?, ?)", (int(run_id), fingerprint, _form_json(form)))

    def form(self, run_id: int) -> dict[str, Any] | None:
        """The dashboard's inputs kept with run ``run_id`` (None when none were kept)."""
        with self._connect() as con:
            row = con.execute("SELECT form FROM run_extras WHERE run_id = ?",
                              (int(run_id),)).fetchone()
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
            con.execute("UPDATE run_extras SET used_at = ? WHERE run_id = ?", (now, int(run_id)))

    def last_runs(self, *, source: str = "dashboard") -> dict[str, tuple[int, str, dict | None]]:
        """The newest run of each page: ``{page: (run id, kind, form)}``, newest first (the
        form is None where it was not kept): what a reloaded dashboard shows again."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT r.id, r.page, e.kind, e.form FROM runs r LEFT JOIN run_extras e ON "
                "e.run_id = r.id WHERE r.source = ? AND r.page IS NOT NULL "
                "ORDER BY MAX(r.created_at, COALESCE(e.used_at, '')) DESC, r.id DESC",
                (source,)).fetchall()
        out: dict[str, tuple[int, str, dict | None]] = {}
        for r in rows:
            if r["page"] in out:
                continue
            try:
                form = json.loads(r["form"]) if r["form"] else None
            except ValueError:
                form = None
            out[r["page"]] = (int(r["id"]), r["kind"] or "audit",
                              form if isinstance(form, dict) else None)
        return out

    def first_run(self, fingerprint: str) -> int | None:
        """The oldest run recorded with these inputs (``fingerprint``), or None: a rerun
        whose answers all came from the cache is that run again, not a new one."""
        with self._connect() as con:
            row = con.execute("SELECT MIN(run_id) FROM run_extras WHERE fingerprint = ?",
                              (fingerprint,)).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def extras(self, run_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """``{run id: {"kind", "models", "headline"}}`` of the runs that have them (every
        run of a kind in :data:`RESULT_KINDS`; an audit run has only its kind)."""
        ids = [int(i) for i in run_ids]
        if not ids:
            return {}
        with self._connect() as con:
            marks = ",".join("?" * len(ids))
            rows = con.execute(f"SELECT run_id, kind, models, headline FROM run_extras "
                               f"WHERE run_id IN ({marks})", ids).fetchall()  # only "?" marks
        return {int(r["run_id"]): {"kind": r["kind"], "headline": r["headline"],
                                   "models": tuple(m for m in r["models"].split("\n") if m)}
                for r in rows}

    def result(self, run_id: int) -> tuple[str, Any]:
        """``(kind, result)`` of a run of a kind in :data:`RESULT_KINDS`, rebuilt from its
        record (raises :class:`HistoryError` when there is none, or it cannot be read:
        e.g. written by another version of dbpa)."""
        with self._connect() as con:
            row = con.execute("SELECT kind, payload FROM run_extras WHERE run_id = ?",
                              (int(run_id),)).fetchone()
        if row is None or row["payload"] is None:
            raise HistoryError(f"Run {run_id} holds no battery, fidelity, sensitivity or suite "
                               "result.")
        try:
            return row["kind"], _SafeUnpickler(io.BytesIO(zlib.decompress(row["payload"]))).load()
        except Exception as exc:  # noqa: BLE001 - any damage or version change: one line
            raise HistoryError(f"Run {run_id}'s result cannot be read back ({type(exc).__name__}"
                               f": {exc}); its summary is still listed.") from None


def _suite_summary(con, row) -> RunSummary | None:
    """The list line of a suite run (None when the run is not one): its tests counted, and
    its control gate from the pooled verdicts (a control that changed the answers across
    the cases, after the correction)."""
    extra = con.execute("SELECT kind, models, payload FROM run_extras WHERE run_id = ?",
                        (row["id"],)).fetchone()
    if extra is None or extra["kind"] != "suite":
        return None
    try:
        summary = _SafeUnpickler(io.BytesIO(zlib.decompress(extra["payload"]))).load()["suite"]
        tests, pooled = list(summary["tests"]), list(summary["pooled"])
        base = str(summary["spec"]["base"]["prompt"])
    except Exception:  # noqa: BLE001 - a garbled payload: the run is still listed
        tests, pooled, base = [], [], ""
    controls = [d for d in pooled if isinstance(d, dict) and d.get("role") == "control"]
    return RunSummary(
        id=row["id"], created_at=_created(row["created_at"]), source=row["source"],
        page=row["page"], title=row["title"], tool_version=row["tool_version"],
        models=tuple(m for m in (extra["models"] or "").split("\n") if m), base_prompt=base,
        n_audits=0, n_tests=len(tests),
        n_significant=sum(1 for t in tests if isinstance(t, dict) and t.get("significant")),
        failed_controls=tuple(str(d.get("perturbation")) for d in controls
                              if d.get("significant")),
        _has_controls=bool(controls), kind="suite")


def _form_json(form: Mapping[str, Any] | None) -> str | None:
    return json.dumps(_jsonable(dict(form)), ensure_ascii=False, default=str) if form else None


class _SafeUnpickler(pickle.Unpickler):
    """Rebuilds only what dbpa's results are made of: classes of dbpa, numpy, pandas and
    plain Python values, and the few functions their pickles rebuild objects with (never
    any other function): a history file cannot make the dashboard run other code."""

    MODULES = ("dbpa_core", "numpy", "pandas", "pyarrow", "datetime", "collections", "zoneinfo", "pytz",
               "dateutil")
    BUILTINS = frozenset({"set", "frozenset", "list", "dict", "tuple", "complex", "slice",
                          "range", "bytearray", "bytes", "object", "float", "int", "str",
                          "bool"})
    REBUILDERS = ("_reconstruct", "_unpickle", "_restore", "_new_", "scalar", "__newobj__",
                  "_reconstructor", "_frombuffer", "encode")
    # what pandas' Arrow-backed columns are rebuilt with
    ARROW = frozenset({"type_for_alias", "py_buffer", "field", "schema", "string", "large_string",
                       "int64", "float64", "bool_", "timestamp", "list_", "struct"})

    def find_class(self, module: str, name: str):
        if module == "builtins":
            if name in self.BUILTINS:
                return super().find_class(module, name)
        elif module.split(".")[0] in self.MODULES or module in ("copyreg", "_codecs"):
            found = super().find_class(module, name)
            if isinstance(found, type) or name.startswith(self.REBUILDERS) or \
                    (module.startswith("pyarrow") and name in self.ARROW):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a dbpa result")


# --------------------------------------------------------------------------- helpers
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
            value = datetime.fromisoformat(value) if "T" in value or " " in value \
                else date.fromisoformat(value)
        except ValueError:
            raise HistoryError(f"{value!r} is not a date (YYYY-MM-DD)") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat(timespec="seconds")
    t = "23:59:59" if end else "00:00:00"
    return f"{value.isoformat()}T{t}+00:00"


def _pack(obj: Any) -> bytes:
    return zlib.compress(json.dumps(_jsonable(obj)).encode(), 6)


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


def _known(cls, data: Mapping[str, Any]) -> dict[str, Any]:
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
    kw["perturbations"] = tuple(Perturbation(**_known(Perturbation, p))
                                for p in d.get("perturbations") or ())
    kw["source"] = "history"
    return AuditSpec(**kw)


def _test(d: Mapping[str, Any]) -> DBPAResult:
    kw = _known(DBPAResult, d)
    for k in ("null_similarities", "alt_similarities", "permutation_statistics"):
        kw[k] = np.asarray(d.get(k) or [], dtype=float)
    kw["bin_edges"] = np.asarray(d["bin_edges"], float) if d.get("bin_edges") is not None else None
    return DBPAResult(**kw)


# what a garbled row raises when it is read back (zlib, JSON, numpy's "pickled data", ...)
_GARBLED = (zlib.error, ValueError, TypeError, KeyError, IndexError, EOFError, AttributeError,
            OSError, RecursionError)


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _rebuild(con, a, unreadable: list[str]) -> AuditResult | None:
    """One audit from its rows. What cannot be read is left out (a test's numbers without
    its charts, an arm without its responses or embeddings) and named in ``unreadable``;
    None when not even its spec can be read."""
    where = f"audit {a['job']!r}"
    try:
        spec = _spec(json.loads(a["spec"]))
    except _GARBLED as exc:
        unreadable.append(f"{where}: its spec cannot be read ({_why(exc)}); the audit is left "
                          "out")
        return None
    arms = []
    for row in con.execute("SELECT * FROM arms WHERE audit_id = ? ORDER BY position",
                           (a["id"],)).fetchall():
        what = f"{where}, arm {row['name']!r}"
        arms.append(_arm(row, what, unreadable))
    if not arms:
        unreadable.append(f"{where}: its responses are missing; the audit is left out")
        return None
    tests = tuple(_test_row(t, spec, f"{where}, test {t['name']!r}", unreadable)
                  for t in con.execute("SELECT * FROM tests WHERE audit_id = ? ORDER BY position",
                                       (a["id"],)).fetchall())
    roc = None
    if a["roc"]:
        try:
            d = json.loads(a["roc"])
            roc = ROCResult(np.asarray(d["alpha"], float), np.asarray(d["fpr"], float),
                            np.asarray(d["tpr"], float), float(d["auc"]), int(d["n_control"]),
                            int(d["n_target"]))
        except _GARBLED as exc:
            unreadable.append(f"{where}: its ROC curve cannot be read ({_why(exc)})")
    usage = _json_or(a["usage"], {}, f"{where}: its usage", unreadable)
    warnings = _json_or(a["warnings"], [], f"{where}: its warnings", unreadable)
    return AuditResult(spec, arms[0], tuple(arms[1:]), tests, roc,
                       usage if isinstance(usage, dict) else {},
                       tuple(str(w) for w in warnings) if isinstance(warnings, list) else ())


def _json_or(text: Any, default: Any, what: str, unreadable: list[str]) -> Any:
    try:
        return json.loads(text)
    except _GARBLED as exc:
        unreadable.append(f"{what} cannot be read ({_why(exc)})")
        return default


def _arm(row, what: str, unreadable: list[str]) -> ArmResponses:
    model = _json_or(row["model"], {}, f"{what}: its model", unreadable)
    arm = Arm(row["name"], row["prompt"], row["system_prompt"],
              _shown(model if isinstance(model, dict) else {}),  # older rows: no password shown
              row["role"])
    texts = _json_or(row["responses"], [], f"{what}: its responses", unreadable)
    if not (isinstance(texts, list) and all(isinstance(t, str) for t in texts)):
        unreadable.append(f"{what}: its responses are not a list of texts")
        texts = []
    try:
        embeddings = _from_npy(row["embeddings"])
    except _GARBLED as exc:
        unreadable.append(f"{what}: its embeddings cannot be read ({_why(exc)})")
        embeddings = None
    return ArmResponses(arm, tuple(texts), embeddings, row["new_samples"], row["prompt_tokens"],
                        row["completion_tokens"])


def _test_row(t, spec: AuditSpec, what: str, unreadable: list[str]) -> PerturbationResult:
    nums = {}
    for col in ("effect_size", "chance_effect_size", "p_value", "p_adjusted"):
        try:
            nums[col] = float(t[col])
        except (TypeError, ValueError):
            unreadable.append(f"{what}: its {col} is not a number ({str(t[col])[:40]!r})")
            nums[col] = math.nan
    try:
        test = _test(_unpack(t["detail"]))
    except _GARBLED as exc:
        unreadable.append(f"{what}: its permutation detail cannot be read ({_why(exc)}); its "
                          "numbers are shown, its charts are not")
        test = DBPAResult(nums["effect_size"], nums["p_value"], np.empty(0), np.empty(0),
                          np.empty(0), spec.measure, spec.samples, spec.samples, 0,
                          chance_effect_size=nums["chance_effect_size"], null=spec.null)
    return PerturbationResult(t["name"], t["role"], t["prompt"], t["model"], nums["effect_size"],
                              nums["p_value"], nums["p_adjusted"], bool(t["significant"]),
                              str(t["stars"]), test)


def _where_responses_live(cache_dir: str | None, out_dir: str | None, *,
                          in_history: bool = True) -> str:
    parts = ["in the history database (every response of every arm)"] if in_history else []
    if out_dir:
        parts.append(f"{Path(out_dir) / 'responses.jsonl'}")
    if cache_dir:
        parts.append(f"the cache {cache_dir}")
    return "; ".join(parts)


def where_responses_live(run: Run) -> str:
    """A sentence naming every place that holds a run's responses."""
    if run.summary.kind == "suite":   # a suite keeps numbers per test, not its responses
        return _where_responses_live(run.cache_dir, run.out_dir, in_history=False) or \
            "not kept (the suite ran without a cache)"
    return _where_responses_live(run.cache_dir, run.out_dir)


__all__ = ["DB_NAME", "MIGRATIONS", "ComparedTest", "History", "HistoryError", "Run",
           "RunComparison", "RunSummary", "default_db_path", "where_responses_live"]
