"""The numbered steps of the SQLite run history before dbpa used Alembic (``PRAGMA
user_version`` said how many had run). A file still behind them is brought up with them,
then it is at Alembic's baseline revision. Never edit these."""

STEPS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at   TEXT NOT NULL,
        source       TEXT NOT NULL,
        page         TEXT,
        title        TEXT NOT NULL,
        tool_version TEXT NOT NULL,
        environment  TEXT NOT NULL,
        settings     TEXT NOT NULL,
        cache_dir    TEXT,
        out_dir      TEXT,
        seconds      REAL
    );
    CREATE TABLE audits (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        position    INTEGER NOT NULL,
        job         TEXT NOT NULL,
        name        TEXT NOT NULL,
        mode        TEXT NOT NULL,
        models      TEXT NOT NULL,
        base_prompt TEXT NOT NULL,
        spec        TEXT NOT NULL,
        usage       TEXT NOT NULL,
        warnings    TEXT NOT NULL,
        roc         TEXT
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
        detail              BLOB NOT NULL,
        PRIMARY KEY (audit_id, position)
    );
    CREATE TABLE arms (
        audit_id          INTEGER NOT NULL REFERENCES audits(id) ON DELETE CASCADE,
        position          INTEGER NOT NULL,
        name              TEXT NOT NULL,
        role              TEXT,
        prompt            TEXT NOT NULL,
        system_prompt     TEXT,
        model             TEXT NOT NULL,
        responses         TEXT NOT NULL,
        embeddings        BLOB,
        new_samples       INTEGER NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        PRIMARY KEY (audit_id, position)
    );
    CREATE INDEX audits_run ON audits(run_id);
    CREATE INDEX runs_created ON runs(created_at)
    """,
    """
    CREATE TABLE run_extras (
        run_id      INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        kind        TEXT NOT NULL,
        fingerprint TEXT,
        models      TEXT NOT NULL DEFAULT '',
        headline    TEXT NOT NULL DEFAULT '',
        payload     BLOB,
        form        TEXT,
        used_at     TEXT
    );
    CREATE INDEX run_extras_fingerprint ON run_extras(fingerprint)
    """,
)
