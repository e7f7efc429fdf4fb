"""A throwaway PostgreSQL server for the tests: Debian's binaries (``postgresql`` package,
installed by ``make test`` when missing), a cluster in a temporary folder, listening on
127.0.0.1 only on a free port, stopped at the end of the session even when tests fail.

PostgreSQL refuses to run as root: as root the cluster belongs to the ``postgres`` user and
is run through ``runuser``. Without the binaries (or as another user without them), the
tests that need it are skipped with the reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

SUPERUSER = "dbpa"


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """``start()`` a cluster, ``new_database()`` for each test, ``stop()`` it."""

    def __init__(self) -> None:
        self.bin = binaries()
        self.folder: Path | None = None
        self.port = 0
        self.as_root = os.geteuid() == 0

    def why_not(self) -> str | None:
        if self.bin is None:
            return (
                "PostgreSQL is not installed (Debian: apt-get install postgresql; "
                "`make test` does it when run as root)"
            )
        if self.as_root:
            import pwd

            if shutil.which("runuser") is None:
                return "running as root and no runuser to start PostgreSQL as the postgres user"
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root and there is no postgres user to start PostgreSQL as"
        return None

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="dbpa-pg-"))
        if self.as_root:
            shutil.chown(self.folder, "postgres", "postgres")
        data = self.folder / "data"
        self._run(
            "initdb",
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--locale=C",
            "--encoding=UTF8",
            "--no-sync",
        )
        self.port = _free_port()
        opts = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c fsync=off "
            f"-c unix_socket_directories={self.folder} -c max_connections=100"
        )
        try:
            self._run(
                "pg_ctl",
                "-D",
                str(data),
                "-o",
                opts,
                "-l",
                str(self.folder / "log"),
                "-w",
                "-t",
                "60",
                "start",
            )
        except subprocess.CalledProcessError as exc:
            log = (self.folder / "log").read_text(errors="replace") if (self.folder / "log").exists() else ""
            self.stop()
            raise RuntimeError(f"PostgreSQL did not start: {exc.stderr}\n{log}") from None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A new, empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres", autocommit=True
        ) as con:
            con.execute(f"CREATE DATABASE {name}")  # a fixed alphabet: nothing to quote
        return self.url(name)

    def stop(self) -> None:
        if self.folder is None:
            return
        data = self.folder / "data"
        if (data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
