"""The on-disk cache of raw material: LLM samples and embeddings (the only module
that touches ``diskcache``).

A sample is stored under a hash of everything that determines it — backend,
model, server host, system prompt, prompt, generation parameters, sample index
and seed — so samples stay independent, k = 30 after k = 20 draws only 10 new
ones, and an interrupted run resumes without repeating a call. Embeddings are
keyed by embedder and text. API keys are never part of a key or a value.
Statistics are not cached: they are cheap to recompute.

What is guaranteed:

* **No code in the cache.** Values are stored as data: JSON text, or float
  arrays as raw little-endian bytes behind a small JSON header (dtype, shape).
  Nothing is ever pickled, and :class:`SafeDisk` never unpickles what it finds:
  an entry written by an older version (a pickle) or planted by someone who can
  write to the folder reads as missing, so a later run simply asks again.
* **A damaged store is said in one line.** A truncated or garbage ``cache.db``
  raises :class:`CacheDamagedError` ("... `dbpa cache clear` repairs it");
  :meth:`Cache.clear` always works: it removes and recreates a damaged store. An
  intact store that cannot be used now — read-only, locked by another process, on a
  full disk — raises :class:`CacheError` saying so, and never advises clearing it.
* **Claimable keys.** :meth:`Cache.claim` lets one run take a key it is about to
  pay for; another run on the same folder sees the claim and waits for the value
  instead of paying again (see :mod:`dbpa_core.sampling`). A run that holds
  claims beats a heartbeat (:meth:`Cache.beat`); the claims of a run whose
  heartbeat stopped for HEARTBEAT_TTL seconds (a crashed process, a cancelled CI
  container on a shared volume) are broken, at once when it was a process on
  this host that no longer exists.

With ``DBPA_CACHE_URL`` (``postgresql://user@host/db``, or ``sqlite:///path``) the store is a
table in that database instead (:mod:`dbpa_core.cache_db`): the same keys, values, claims
and messages, shared by every machine that names the same database.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ._validate import valid_unicode

#: where the entries live: a diskcache.Cache folder or a table in a database
#: (:class:`~dbpa_core.cache_db.DatabaseStore`); both answer the same calls
Store = Any

DEFAULT_SIZE_LIMIT = 2 * 1024**3  # 2 GiB
CLAIM_TTL = 6 * 3600.0  # a claim's last-resort lifetime; liveness comes from the heartbeat
HEARTBEAT_TTL = 45.0  # a run that has not beaten for this long is gone: its claims are broken
HEARTBEAT_EVERY = 10.0  # seconds between beats of a run that holds claims
BATCH = 256  # keys read, claimed or stored in one transaction (a short lock, one commit)
_ARRAY_MAGIC = b"DBPA-NDARRAY\n"
_ARRAY_DTYPES = ("<f4", "<f8")


class CacheError(RuntimeError):
    """The cache cannot be used (damaged database, unusable folder); one line that
    says what to do."""


class CacheDamagedError(CacheError):
    """The store is damaged (truncated, garbage); :meth:`Cache.clear` rebuilds it."""


class _Unreadable(Exception):
    """An entry that is not plain data (a pickle, a path outside the store)."""


def default_cache_dir() -> Path:
    """``$DBPA_CACHE_DIR`` or the per-user cache folder."""
    env = os.environ.get("DBPA_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("dbpa"))


def make_key(kind: str, fields: dict[str, Any]) -> str:
    """A stable key: ``kind`` plus a SHA-256 of the canonical JSON of ``fields``."""
    blob = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"{kind}:{hashlib.sha256(blob.encode()).hexdigest()}"


# --------------------------------------------------------------------------- values as data
def encode_value(value: Any) -> str | bytes:
    """A value as data: an ndarray as header + raw little-endian bytes, anything
    else as JSON text (NaN and objects that are not JSON are refused)."""
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        if arr.dtype.kind != "f" or arr.dtype.itemsize not in (4, 8):
            raise TypeError(f"the cache stores float32/float64 arrays, not {arr.dtype}")
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        header = json.dumps({"dtype": arr.dtype.str, "shape": list(arr.shape)}).encode()
        return _ARRAY_MAGIC + header + b"\n" + arr.tobytes()
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the cache stores JSON data and float arrays only: {exc}") from None
    # never a lone surrogate (it cannot be written as UTF-8: the write would fail and lose
    # what arrived); the entry points replace and count them, this is the last guard
    return valid_unicode(text)[0]


def decode_value(raw: Any) -> Any:
    """The value of :func:`encode_value`, or None when ``raw`` is not one."""
    if isinstance(raw, bytes):
        if not raw.startswith(_ARRAY_MAGIC):
            return None
        head, sep, body = raw[len(_ARRAY_MAGIC) :].partition(b"\n")
        try:
            meta = json.loads(head)
            dtype, shape = meta["dtype"], tuple(int(x) for x in meta["shape"])
        except (ValueError, KeyError, TypeError):
            return None
        if not sep or dtype not in _ARRAY_DTYPES or any(x < 0 for x in shape):
            return None
        dt = np.dtype(dtype)
        if len(body) != dt.itemsize * math.prod(shape):
            return None
        return np.frombuffer(body, dtype=dt).reshape(shape).astype(dt.newbyteorder("="))
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return None
    return None


def _disk_class() -> type | None:
    import diskcache
    from diskcache.core import MODE_PICKLE, UNKNOWN

    class SafeDisk(diskcache.Disk):
        """A diskcache ``Disk`` that stores only text and bytes and never unpickles:
        reading a pickled entry (old format, or planted) raises, and the cache treats
        the key as missing. Files outside the store folder are never read or removed."""

        def _inside(self, filename: str) -> str:
            full = os.path.realpath(os.path.join(self._directory, str(filename)))
            root = os.path.realpath(self._directory)
            if os.path.commonpath([full, root]) != root:
                raise _Unreadable(f"a value file outside the cache: {filename!r}")
            return full

        def put(self, key: Any) -> tuple[Any, bool]:
            if type(key) is not str:
                raise TypeError("cache keys are strings")
            return super().put(key)

        def get(self, key: Any, raw: bool) -> Any:
            if not raw:
                raise _Unreadable("a pickled key")
            return super().get(key, raw)

        def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> tuple[int, int, str | None, Any]:
            if type(value) not in (str, bytes):
                raise TypeError("the dbpa cache stores text and bytes only (never a pickle)")
            return super().store(value, read, key=key)

        def fetch(self, mode: int, filename: str, value: Any, read: bool) -> Any:
            if mode == MODE_PICKLE:
                raise _Unreadable("a pickled value")
            if filename is not None:
                self._inside(filename)
            return super().fetch(mode, filename, value, read)

        def remove(self, file_path: str) -> None:
            try:
                self._inside(file_path)
            except _Unreadable:
                return  # never delete outside the store
            return super().remove(file_path)

    return SafeDisk


def _locked(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def _pid_alive(pid: int) -> bool:
    """Is process ``pid`` (on this host) still running? A killed process whose parent has
    not yet reaped it (a zombie) still has a pid, but it will never beat again: not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]  # the name may hold spaces
    except (OSError, IndexError):
        return True  # no /proc (macOS): os.kill said it exists
    return state not in (b"Z", b"X")


# --------------------------------------------------------------------------- the cache
class Cache:
    """A disk cache under ``directory/store`` (the folder also holds converted models), or
    the database of ``url`` (default ``$DBPA_CACHE_URL``; the folder then holds only the
    converted models).

    ``get``/``set`` take JSON-ready values or float arrays (stored as data, never
    pickled); a value that cannot be read as data reads as missing. Every
    operation raises :class:`CacheError` (one line) when the store is damaged.
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        *,
        size_limit: int = DEFAULT_SIZE_LIMIT,
        enabled: bool = True,
        url: str | None = None,
    ):
        self.directory = Path(directory) if directory else default_cache_dir()
        self.url = url or os.environ.get("DBPA_CACHE_URL", "").strip() or None
        self.enabled = enabled
        self.size_limit = size_limit
        self._store = None
        self._db_path = str(self.directory / "store" / "cache.db")
        self._opened: tuple[int, int] | None = None
        self._lock = threading.RLock()
        self.owner: dict[str, Any] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "token": uuid.uuid4().hex,
        }
        self.repaired = False  # set by clear() when it had to rebuild a damaged store
        self._beaten: dict[str, float] = {}  # token -> when its heartbeat was last set

    @property
    def store_dir(self) -> Path:
        return self.directory / "store"

    @property
    def where(self) -> str:
        """Where the cached samples are: the store folder, or the database (no password)."""
        if self.url:
            from .db import masked

            return masked(self.url)
        return str(self.store_dir)

    def _exists(self) -> bool:
        return bool(self.url) or self.store_dir.exists()

    def _failure(self, exc: sqlite3.DatabaseError) -> CacheError:
        """The one line for a database error: locked, read-only, full or failing storage
        (the store is intact: nothing to repair, nothing removed), else damaged."""
        reason = " ".join(str(exc).split()) or type(exc).__name__
        low = reason.lower()
        if _locked(exc):
            return CacheError(
                f"The cache at {self.store_dir} stayed locked by another process; wait for it and try again."
            )
        if not isinstance(exc, sqlite3.OperationalError):
            return self._damaged(exc)
        if "readonly" in low or "read-only" in low or not os.access(self.store_dir, os.W_OK):
            return self._unusable(reason, "read-only")
        return self._unusable(reason, "full" if "full" in low else "")

    def _unusable(self, reason: str, why: str) -> CacheError:
        """An intact store that cannot be used now: never 'damaged', never 'clear it'."""
        if why == "read-only":
            return CacheError(
                f"The cache at {self.store_dir} is read-only ({reason}): make it writable, "
                "or run with --no-cache or another --cache-dir ($DBPA_CACHE_DIR). Nothing in "
                "it was changed."
            )
        if why == "full":
            return CacheError(
                f"The disk that holds the cache at {self.store_dir} is full "
                f"({reason}): free some space and run again; what was cached "
                "is kept."
            )
        db = Path(self._db_path)
        if db.exists() and not db.is_file():
            kind = "a folder" if db.is_dir() else "not a regular file"
            return CacheError(
                f"The cache at {self.store_dir} cannot be used: its database {db} is {kind} "
                f"({reason}). Move it out of the way (mv {db} {db}.moved) to start an empty "
                "cache there, or run with another --cache-dir ($DBPA_CACHE_DIR) or --no-cache. "
                "Nothing in it was changed."
            )
        return CacheError(
            f"The cache at {self.store_dir} cannot be used now ({reason}); nothing in it was "
            f"changed. Check that {db} is a file you can read and write, or run with another "
            "--cache-dir ($DBPA_CACHE_DIR) or --no-cache."
        )

    def _damaged(self, exc: BaseException | str) -> CacheDamagedError:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return CacheDamagedError(
            f"The cache at {self.store_dir} is damaged ({reason}); `dbpa cache clear` "
            "repairs it (it removes every cached response)."
        )

    def _open(self) -> Store:
        import diskcache

        if self.url:
            from .cache_db import DatabaseStore

            return DatabaseStore(self.url, CacheError)
        if self.store_dir.exists() and not self.store_dir.is_dir():
            raise self._damaged("not a folder")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(
                f"Cannot create the cache folder {self.directory} "
                f"({exc.strerror or exc}); choose another with --cache-dir "
                "or $DBPA_CACHE_DIR."
            ) from None
        try:
            return diskcache.Cache(
                str(self.store_dir),
                size_limit=self.size_limit,
                eviction_policy="least-recently-used",
                disk=_disk_class(),
            )
        except sqlite3.DatabaseError as exc:
            raise self._failure(exc) from None
        except diskcache.Timeout:
            raise CacheError(
                f"The cache at {self.store_dir} is locked by another process; try again."
            ) from None
        except OSError as exc:
            raise CacheError(f"Cannot open the cache at {self.store_dir} ({exc.strerror or exc}).") from None

    def _db_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self._db_path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is not None and self._db_id() != self._opened:
                self.close()  # another process removed and rebuilt the store: reopen it
            if self._store is None:
                self._store = self._open()
                self._opened = self._db_id()
            return self._store

    def _run(self, op: Callable[[Store], Any], *, retry: bool = True) -> Any:
        """``op(store)``; a database error closes the store and tries once more (another
        process may have just rebuilt it), then becomes one :class:`CacheError`."""
        import diskcache

        try:
            return op(self.store)
        except diskcache.Timeout:
            raise CacheError(
                f"The cache at {self.store_dir} stayed locked by another process; try again."
            ) from None
        except sqlite3.DatabaseError as exc:
            if _locked(exc):
                raise self._failure(exc) from None
            self.close()
            if retry:
                return self._run(op, retry=False)
            raise self._failure(exc) from None
        except OSError as exc:  # a large value is a file beside the database
            raise self._os_failure(exc) from None

    def _os_failure(self, exc: OSError) -> CacheError:
        """A value file that cannot be written: read-only, full, or the reason given."""
        import errno

        reason = exc.strerror or str(exc)
        why = (
            "read-only"
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
            else "full"
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
            else ""
        )
        return self._unusable(reason, why)

    def check(self) -> None:
        """Raise :class:`CacheError` now when the store is damaged (else do nothing)."""
        if self.enabled and self._exists():
            self._run(lambda s: s.get("dbpa:check"))

    # ------------------------------------------------------------------ values
    def get(self, key: str) -> Any:
        """The value, or None when missing or not readable as data (then it is removed)."""
        if not self.enabled:
            return None

        return self._run(lambda store: self._read(store, key))

    @staticmethod
    def _read(store: Store, key: str) -> Any:
        try:
            raw = store.get(key)
        except (_Unreadable, OSError, UnicodeDecodeError):
            raw = b""
        if raw is None:
            return None
        value = decode_value(raw)
        if value is None:  # an old pickle, a planted or half-written entry
            with contextlib.suppress(_Unreadable, OSError):
                store.delete(key)
        return value

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """The values of those ``keys`` that are stored and readable as data, read in
        transactions of :data:`BATCH` keys (one lock and one commit each, where
        :meth:`get` pays both per key: the store records each read for its LRU eviction)."""
        out: dict[str, Any] = {}
        if not self.enabled:
            return out

        def op(store: Store, chunk: list[str]) -> Any:
            with store.transact():
                for key in chunk:
                    value = self._read(store, key)
                    if value is not None:
                        out[key] = value

        keys = list(keys)
        for i in range(0, len(keys), BATCH):
            self._run(functools.partial(op, chunk=keys[i : i + BATCH]))
        return out

    def set(self, key: str, value: Any) -> None:
        if self.enabled:
            data = encode_value(value)
            self._run(lambda s: s.set(key, data))

    def delete(self, key: str) -> None:
        if self.enabled:
            self._run(lambda s: s.delete(key))

    def set_many(self, values: dict[str, Any], owner: dict | None = None) -> None:
        """Store ``values`` in one transaction and give up ``owner``'s claims on their keys
        (a claim of another claimant is left alone): what a run does with what it fetched."""
        if not self.enabled or not values:
            return
        token = (owner or self.owner)["token"]
        data = {k: encode_value(v) for k, v in values.items()}

        def op(store: Store) -> Any:
            with store.transact():
                for k, d in data.items():
                    store.set(k, d)
                    holder = self._holder(store, k)
                    if holder is not None and holder.get("token") == token:
                        store.delete("claim:" + k)

        self._run(op)

    def __contains__(self, key: str) -> bool:
        return self.enabled and self.get(key) is not None

    # ------------------------------------------------------------------ claims
    def new_owner(self) -> dict[str, Any]:
        """A fresh claimant (one per run: two runs in one process must not share one)."""
        return {"host": self.owner["host"], "pid": os.getpid(), "token": uuid.uuid4().hex}

    def claim(self, key: str, owner: dict | None = None, *, ttl: float = CLAIM_TTL) -> bool:
        """Take ``key`` for ``owner`` (default: this Cache object) and return True, unless
        another claimant holds it (False)."""
        if not self.enabled:
            return True
        owner = owner or self.owner
        if (
            time.monotonic() - self._beaten.get(owner["token"], -math.inf)
            > min(HEARTBEAT_EVERY, HEARTBEAT_TTL) / 2
        ):
            self.beat(owner)  # the heartbeat exists before the claim is visible
        value = json.dumps({**owner, "since": time.time()})
        return bool(self._run(lambda s: s.add("claim:" + key, value, expire=ttl)))

    def claim_many(
        self, keys: Iterable[str], owner: dict | None = None, *, ttl: float = CLAIM_TTL
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """:meth:`claim` for many keys, each first looked up, in transactions of
        :data:`BATCH` keys. Returns ``(state, values)``: ``state[key]`` is ``"stored"``
        (a value is there, in ``values``; nothing claimed), ``"mine"`` (claimed now for
        ``owner``) or ``"theirs"`` (another claimant holds it)."""
        keys = list(keys)
        if not self.enabled:
            return dict.fromkeys(keys, "mine"), {}
        owner = owner or self.owner
        self.beat(owner)  # the heartbeat exists before the claims are visible
        claim = json.dumps({**owner, "since": time.time()})
        state: dict[str, str] = {}
        values: dict[str, Any] = {}

        def op(store: Store, chunk: list[str]) -> Any:
            with store.transact():
                for key in chunk:
                    value = self._read(store, key)
                    if value is not None:
                        state[key], values[key] = "stored", value
                    else:
                        state[key] = "mine" if store.add("claim:" + key, claim, expire=ttl) else "theirs"

        for i in range(0, len(keys), BATCH):
            self._run(functools.partial(op, chunk=keys[i : i + BATCH]))
        return state, values

    def beat(self, owner: dict | None = None, *, ttl: float | None = None) -> None:
        """Say that ``owner`` is alive (for ``ttl`` seconds, default HEARTBEAT_TTL): its
        claims stand."""
        if self.enabled:
            token = (owner or self.owner)["token"]
            ttl = HEARTBEAT_TTL if ttl is None else ttl
            self._run(lambda s: s.set("owner:" + token, "alive", expire=ttl))
            self._beaten[token] = time.monotonic()

    def end_beat(self, owner: dict | None = None) -> None:
        """``owner`` holds no claims any more: remove its heartbeat."""
        token = (owner or self.owner)["token"]
        if self.enabled and self._beaten.pop(token, None) is not None:
            self._run(lambda s: s.delete("owner:" + token))

    def release(self, keys: Iterable[str], owner: dict | None = None) -> None:
        """Give up claims ``owner`` holds (a claim of another claimant is left alone)."""
        if not self.enabled:
            return
        token = (owner or self.owner)["token"]

        def op(store: Store) -> Any:
            for k in keys:
                holder = self._holder(store, k)
                if holder is not None and holder.get("token") == token:
                    store.delete("claim:" + k)

        self._run(op)

    @staticmethod
    def _holder(store: Store, key: str) -> dict | None:
        try:
            raw = store.get("claim:" + key)
        except (_Unreadable, OSError):
            return None
        try:
            holder = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            return None
        return holder if isinstance(holder, dict) else None

    def claim_holder(self, key: str) -> dict | None:
        """Who holds ``key`` (``host``, ``pid``, ``token``, ``since``), or None.

        A claim whose run is gone — its heartbeat stopped, or its process has ended
        on this host — is removed and reads as None.
        """
        if not self.enabled:
            return None

        def op(store: Store) -> Any:
            holder = self._holder(store, key)
            if holder is None:
                return None
            pid, token = holder.get("pid"), holder.get("token")
            dead = (
                holder.get("host") == self.owner["host"]
                and isinstance(pid, int)
                and pid != os.getpid()
                and not _pid_alive(pid)
            )
            if dead or not isinstance(token, str) or store.get("owner:" + token) is None:
                store.delete("claim:" + key)
                return None
            return holder

        return self._run(op)

    # ------------------------------------------------------------------ housekeeping
    def volume(self) -> int:
        """Bytes on disk used by the store."""
        if not self._exists():
            return 0
        return int(self._run(lambda s: s.volume()))

    def count(self) -> int:
        """Items stored (expired claims and heartbeats of crashed runs are purged first)."""
        if not self._exists():
            return 0
        return int(self._run(lambda s: (s.expire(), len(s))[1]))

    def clear(self) -> int:
        """Remove every cached sample and embedding; returns how many were removed.

        A damaged store is removed and recreated (``repaired`` is then True and
        the count is 0: it could not be read)."""
        self.repaired = False
        if not self._exists():
            return 0
        try:
            return int(self._run(lambda s: s.clear()))
        except CacheDamagedError:
            self.close()
            shutil.rmtree(self.store_dir, ignore_errors=True)
            if self.store_dir.exists():  # e.g. a file where the folder should be
                with contextlib.suppress(OSError):
                    self.store_dir.unlink()
            self.repaired = True
            self._run(lambda s: len(s))  # recreate it now (raises if it still cannot)
            return 0

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                with contextlib.suppress(Exception):
                    self._store.close()
                self._store = None
