"""On-disk cache of autotuned schedules (the winners the kernels' autotuner finds).

One JSON file, ``<dir>/autotune.json``:
    {"producer": "tlgemm.autotune", "format": 2, "entries": {<key>: {"schedule": {...}, "info": {...}}}}
<dir> is $TLGEMM_CACHE_DIR, else $XDG_CACHE_HOME/tlgemm, else ~/.cache/tlgemm.
A key is "gpu|backend|a,b,c|layout|M=..,N=..,K=..|version": GPU name, backend, canonical dtypes,
the operands' storage (BLAS style, "nt": a row-major, b column-major; which schedules run and
which is fastest depend on it), ``shape_bucket(M, N, K)`` and the library version (an entry of
another version is a miss). Format 1 had no layout in its keys; such a file is ignored.

Writes are atomic and serialised: under an exclusive ``fcntl.flock`` on ``autotune.json.lock``
a writer reads the file, adds its entry, writes a temporary file in the same directory, fsyncs
it and renames it over the cache (``os.replace``); readers take no lock and always see a whole
file. A file that is truncated, not JSON, not ours or of another format version is ignored
with a ``CacheWarning`` (once per file state) and rebuilt by the next ``put``. The file gets
the permissions of a plain ``open`` (0666 less the umask), so a directory shared by a group
stays usable by all its users. POSIX only (fcntl), like the GPU backends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import warnings
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from ._checks import check_int
from .dtypes import gemm_dtypes
from .schedule import Schedule

__all__ = ["AutotuneCache", "CacheWarning", "CACHE_FORMAT", "default_cache_dir", "m_bucket", "shape_bucket"]

CACHE_FORMAT = 2
LAYOUTS = ("nn", "nt", "tn", "tt")
_PRODUCER = "tlgemm.autotune"
_FILENAME = "autotune.json"


class CacheWarning(UserWarning):
    """An unusable cache file was ignored (it is rebuilt on the next put)."""


def default_cache_dir() -> Path:
    """$TLGEMM_CACHE_DIR, else $XDG_CACHE_HOME/tlgemm, else ~/.cache/tlgemm."""
    explicit = os.environ.get("TLGEMM_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "tlgemm"


#: Above this M a power-of-two bucket is split in two at 3·2^(k-1): (2^k, 3·2^(k-1)] and
#: (3·2^(k-1), 2^(k+1)]. One schedule serves a bucket, and across a whole power of two a tile
#: grid can gain a wave (M = 385..512 run twice the waves of 128x256 tiles of M = 257..384 at
#: N = 11008). On the H100 the 119 picks the halves moved at M = 192..3072 measured 1.132x geomean
#: by kernel time (0.69-1.58x; against cuBLAS bf16 0.78 -> 0.88, fp8 0.85 -> 0.97;
#: benchmarks/results/model_backtest.md, "Half buckets above M = 128").
HALF_BUCKETS_ABOVE = 128


def m_bucket(M: int) -> tuple[int, int]:
    """(m_min, m_max): the range of token counts that share M's schedule (select() picks it at
    m_max with m_min): powers of two, (2^(k-1), 2^k], up to HALF_BUCKETS_ABOVE, halves above."""
    check_int("M", M, 1)
    top = 1 << (M - 1).bit_length()
    if top <= HALF_BUCKETS_ABOVE:
        return top // 2 + 1, top
    middle = 3 * top // 4
    return (top // 2 + 1, middle) if M <= middle else (middle + 1, top)


def shape_bucket(M: int, N: int, K: int) -> tuple[int, int, int]:
    """(m_max of ``m_bucket(M)``, N, K): M (tokens, batch) varies from call to call and is
    rounded up to its bucket's top; N and K are weight shapes and stay exact."""
    check_int("M", M, 1)
    check_int("N", N, 1)
    check_int("K", K, 0)
    return m_bucket(M)[1], N, K


def _library_version() -> str:
    try:
        return metadata.version("tlgemm")
    except metadata.PackageNotFoundError:
        return "unknown"


def _json_object(value: object) -> bool:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return False
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


class AutotuneCache:
    """get/put of tuned Schedules keyed by (GPU name, backend, dtypes, layout, shape bucket, version)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, version: str | None = None):
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.path = self.directory / _FILENAME
        if version is not None and (not isinstance(version, str) or not version or "|" in version):
            raise ValueError(f"version must be a non-empty string without '|', got {version!r}")
        self.version = version if version is not None else _library_version()
        self._warned: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) last warned about

    def key(self, gpu: str, backend: str, dtypes: object, M: int, N: int, K: int, *, layout: str = "nt") -> str:
        """The entry key: "gpu|backend|a,b,c|layout|M=..,N=..,K=..|version" (M bucketed);
        layout: a's and b's storage, "n" row-major, "t" column-major (a [M, K], b [K, N])."""
        for name, value in (("gpu", gpu), ("backend", backend)):
            if not isinstance(value, str) or not value or "|" in value:
                raise ValueError(f"{name} must be a non-empty string without '|', got {value!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
        bm, bn, bk = shape_bucket(M, N, K)
        return f"{gpu}|{backend}|{','.join(gemm_dtypes(dtypes))}|{layout}|M={bm},N={bn},K={bk}|{self.version}"

    def get(self, gpu: str, backend: str, dtypes: object, M: int, N: int, K: int, *,
            layout: str = "nt") -> Schedule | None:
        """The cached Schedule, or None (absent, or the file/entry is unusable: warned)."""
        key = self.key(gpu, backend, dtypes, M, N, K, layout=layout)
        entry = self._read().get(key)
        if entry is None:
            return None
        try:
            return Schedule.from_dict(entry["schedule"])
        except (KeyError, TypeError, ValueError) as err:
            warnings.warn(f"ignoring unusable autotune cache entry {key!r} in {self.path}: {err}", CacheWarning,
                          stacklevel=2)
            return None

    def put(self, gpu: str, backend: str, dtypes: object, M: int, N: int, K: int, schedule: Schedule,
            info: dict[str, Any] | None = None, *, layout: str = "nt") -> None:
        """Store schedule (and JSON-serialisable info, e.g. measured TFLOP/s) atomically."""
        if not isinstance(schedule, Schedule):
            raise ValueError(f"schedule must be a Schedule, got {type(schedule).__name__}")
        if info is not None and not _json_object(info):
            raise ValueError(f"info must be a dict with str keys and JSON-serialisable values, got {info!r}")
        key = self.key(gpu, backend, dtypes, M, N, K, layout=layout)
        value = {"schedule": schedule.to_dict(), "info": dict(info or {})}
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._locked():
            entries = self._read()
            entries[key] = value
            self._write({"producer": _PRODUCER, "format": CACHE_FORMAT, "entries": entries})

    def entries(self) -> dict[str, Any]:
        """All entries of a usable file (key -> {"schedule", "info"})."""
        return self._read()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / (_FILENAME + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                raw = f.read()
        except FileNotFoundError:
            return {}
        except OSError as err:  # a directory, no permission: a cache that cannot be read is not used
            self._warn((err.errno, str(err)), f"unreadable ({err})")
            return {}
        problem = None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as err:  # ValueError: bad UTF-8 or JSON, an int of > 4300 digits
            problem = f"not valid JSON (truncated or corrupt: {type(err).__name__}: {err})"
        else:
            if not isinstance(data, dict) or data.get("producer") != _PRODUCER:
                problem = "not a tlgemm autotune cache"
            elif data.get("format") != CACHE_FORMAT:
                problem = f"format version {data.get('format')!r}, this library reads {CACHE_FORMAT}"
            elif not isinstance(data.get("entries"), dict):
                problem = "no 'entries' table"
        if problem is None:
            return data["entries"]
        self._warn((stat.st_ino, stat.st_size, stat.st_mtime_ns), problem)
        return {}

    def _warn(self, state, problem: str) -> None:
        """One CacheWarning per state of the file (a later change of it warns again)."""
        if state != self._warned:
            self._warned = state
            warnings.warn(f"ignoring autotune cache {self.path}: {problem}; it will be rebuilt", CacheWarning,
                          stacklevel=4)

    def _write(self, data: dict[str, Any]) -> None:
        # a new file of a unique name, created 0666 less the umask (tempfile.mkstemp would make it 0600)
        tmp = self.directory / f"{_FILENAME}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
