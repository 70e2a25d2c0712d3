"""tlgemm.schedules.AutotuneCache: keys, location, atomic concurrent writes, and recovery from
truncated, foreign and newer-format files."""

import json
import multiprocessing
import os
import stat
import warnings

import pytest

from tlgemm.schedules import (CACHE_FORMAT, AutotuneCache, CacheWarning, Schedule, default_cache_dir, m_bucket,
                              shape_bucket)

GPU = "NVIDIA H100 80GB HBM3"
TUNED = Schedule(block_n=256, num_stages=4, num_warpgroups=2, is_persistent=True, num_sms=132, streamk_tiles=12)


def _writer(directory, worker, count, start):
    """One concurrent writer: `count` distinct entries (N identifies worker and entry)."""
    cache = AutotuneCache(directory, version="test")
    start.wait()  # all writers begin together
    for i in range(count):
        cache.put(GPU, "tilelang", "bf16", 64, 1000 * (worker + 1) + i, 4096, TUNED.stages(2 + i % 4),
                  info={"worker": worker, "i": i})


def _reader(directory, start, stop):
    """Reads while the writers write; any CacheWarning (a torn file) becomes an error exit."""
    warnings.simplefilter("error", CacheWarning)
    start.wait()
    while not stop.is_set():
        AutotuneCache(directory, version="test").entries()


def test_put_get_roundtrip(tmp_path):
    cache = AutotuneCache(tmp_path, version="0.1.0")
    assert cache.get(GPU, "triton", "bf16", 4096, 7168, 2048) is None  # no file yet
    cache.put(GPU, "triton", "bf16", 4096, 7168, 2048, TUNED, info={"tflops": 701.5})
    assert cache.get(GPU, "triton", "bf16", 4096, 7168, 2048) == TUNED
    # every key component matters
    assert cache.get(GPU, "tilelang", "bf16", 4096, 7168, 2048) is None
    assert cache.get("NVIDIA H200", "triton", "bf16", 4096, 7168, 2048) is None
    assert cache.get(GPU, "triton", "fp16", 4096, 7168, 2048) is None
    assert cache.get(GPU, "triton", "bf16", 4096, 7168, 4096) is None
    assert cache.get(GPU, "triton", "bf16", 4096, 7168, 2048, layout="nn") is None
    assert AutotuneCache(tmp_path, version="0.2.0").get(GPU, "triton", "bf16", 4096, 7168, 2048) is None
    data = json.loads((tmp_path / "autotune.json").read_text())
    assert data["format"] == CACHE_FORMAT
    (entry,) = data["entries"].values()
    assert entry["info"] == {"tflops": 701.5}
    assert cache.key(GPU, "triton", "bf16", 4096, 7168, 2048) == (
        f"{GPU}|triton|bfloat16,bfloat16,bfloat16|nt|M=4096,N=7168,K=2048|0.1.0")


def test_layouts_have_their_own_entries(tmp_path):
    """A winner tuned for one operand storage does not replace another's (the layouts run
    different kernels: B MN-major takes no block_n that is no power of two)."""
    cache = AutotuneCache(tmp_path, version="t")
    cache.put(GPU, "tilelang", "bf16", 4096, 7168, 2048, TUNED, layout="nt")
    cache.put(GPU, "tilelang", "bf16", 4096, 7168, 2048, TUNED.stages(2), layout="nn")
    assert cache.get(GPU, "tilelang", "bf16", 4096, 7168, 2048, layout="nt") == TUNED
    assert cache.get(GPU, "tilelang", "bf16", 4096, 7168, 2048, layout="nn") == TUNED.stages(2)
    assert cache.get(GPU, "tilelang", "bf16", 4096, 7168, 2048, layout="tt") is None
    with pytest.raises(ValueError, match=r"layout: expected one of nn, nt, tn, tt, got 'row'"):
        cache.get(GPU, "tilelang", "bf16", 4096, 7168, 2048, layout="row")


def test_format_1_file_is_ignored_with_a_warning(tmp_path):
    """Format 1 keys had no layout: its entries are not read as any layout's."""
    key = f"{GPU}|tilelang|bfloat16,bfloat16,bfloat16|M=4096,N=7168,K=2048|t"
    (tmp_path / "autotune.json").write_text(json.dumps(
        {"producer": "tlgemm.autotune", "format": 1, "entries": {key: {"schedule": TUNED.to_dict(), "info": {}}}}))
    cache = AutotuneCache(tmp_path, version="t")
    with pytest.warns(CacheWarning, match="format version 1, this library reads 2"):
        assert cache.get(GPU, "tilelang", "bf16", 4096, 7168, 2048) is None
    cache.put(GPU, "tilelang", "bf16", 4096, 7168, 2048, TUNED)
    assert json.loads((tmp_path / "autotune.json").read_text())["format"] == 2


def test_cache_file_takes_the_umask_not_0600(tmp_path):
    """A cache directory shared by a group: the file is created like a plain open's (0666 less
    the umask), not 0600 as tempfile.mkstemp makes it."""
    old = os.umask(0o002)
    try:
        AutotuneCache(tmp_path, version="t").put(GPU, "tilelang", "bf16", 64, 64, 64, TUNED)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "autotune.json").stat().st_mode) == 0o664


def test_shape_bucket():
    # M rounds up to a power of two up to 128, to 1.5 or 2 times one above; N and K stay exact.
    assert shape_bucket(1, 7168, 2048) == (1, 7168, 2048)
    assert shape_bucket(100, 7168, 2048) == (128, 7168, 2048)
    assert shape_bucket(128, 7168, 2048) == (128, 7168, 2048)
    assert shape_bucket(129, 7168, 2048) == (192, 7168, 2048)
    assert shape_bucket(193, 7168, 2048) == (256, 7168, 2048)
    assert shape_bucket(257, 7168, 2048) == (384, 7168, 2048)
    assert shape_bucket(385, 7168, 2048) == (512, 7168, 2048)
    assert shape_bucket(4097, 7168, 2048) == (6144, 7168, 2048)


def test_m_bucket_ranges_tile_the_token_counts():
    assert [m_bucket(M) for M in (1, 2, 3, 100, 129, 200, 300, 512)] == [
        (1, 1), (2, 2), (3, 4), (65, 128), (129, 192), (193, 256), (257, 384), (385, 512)]
    lo = 1
    for M in range(1, 5000):
        first, last = m_bucket(M)
        assert first <= M <= last and shape_bucket(M, 1, 1)[0] == last
        if M == last:
            assert first == lo, M
            lo = last + 1
    with pytest.raises(ValueError, match="M"):
        m_bucket(0)


def test_bucketed_m_shares_an_entry(tmp_path):
    cache = AutotuneCache(tmp_path, version="v")
    cache.put(GPU, "triton", "fp8", 100, 2112, 7168, TUNED)
    assert cache.get(GPU, "triton", "fp8", 65, 2112, 7168) == TUNED
    assert cache.get(GPU, "triton", "fp8", 129, 2112, 7168) is None
    cache.put(GPU, "triton", "fp8", 300, 2112, 7168, TUNED)
    assert cache.get(GPU, "triton", "fp8", 384, 2112, 7168) == TUNED
    assert cache.get(GPU, "triton", "fp8", 385, 2112, 7168) is None


def test_location(tmp_path, monkeypatch):
    monkeypatch.setenv("TLGEMM_CACHE_DIR", str(tmp_path / "explicit"))
    assert AutotuneCache().path == tmp_path / "explicit" / "autotune.json"
    monkeypatch.delenv("TLGEMM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "tlgemm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tlgemm"
    AutotuneCache(version="v").put(GPU, "triton", "bf16", 1, 2, 3, TUNED)  # creates the directory
    assert (tmp_path / "home" / ".cache" / "tlgemm" / "autotune.json").is_file()


def test_bad_key_parts_raise(tmp_path):
    cache = AutotuneCache(tmp_path, version="v")
    with pytest.raises(ValueError, match="gpu must be a non-empty string"):
        cache.get("", "triton", "bf16", 1, 1, 1)
    with pytest.raises(ValueError, match="backend must be a non-empty string without"):
        cache.put(GPU, "tri|ton", "bf16", 1, 1, 1, TUNED)
    with pytest.raises(ValueError, match="schedule must be a Schedule"):
        cache.put(GPU, "triton", "bf16", 1, 1, 1, TUNED.to_dict())
    with pytest.raises(ValueError, match="version must be a non-empty string without '\\|', got '1\\|x'"):
        AutotuneCache(tmp_path, version="1|x")
    for info in ("abc", {1: 1, "a": 2}, {"a": object()}):
        with pytest.raises(ValueError, match="info must be a dict with str keys and JSON-serialisable values"):
            cache.put(GPU, "triton", "bf16", 1, 1, 1, TUNED, info)
    assert not cache.path.exists()


def test_concurrent_writers_lose_nothing_and_readers_never_see_a_torn_file(tmp_path):
    workers, count = 4, 25
    ctx = multiprocessing.get_context("spawn")
    start, stop = ctx.Barrier(workers + 1), ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, count, start)) for w in range(workers)]
    reader = ctx.Process(target=_reader, args=(str(tmp_path), start, stop))
    for p in [*procs, reader]:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    stop.set()
    reader.join(60)
    assert reader.exitcode == 0, "a reader saw a partially written cache file"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file must be whole: no CacheWarning
        cache = AutotuneCache(tmp_path, version="test")
        assert len(cache.entries()) == workers * count
        for w in range(workers):
            for i in range(count):
                assert cache.get(GPU, "tilelang", "bf16", 64, 1000 * (w + 1) + i, 4096) == TUNED.stages(2 + i % 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autotune.json", "autotune.json.lock"]  # no temp left


def test_truncated_file_is_ignored_and_rebuilt(tmp_path):
    cache = AutotuneCache(tmp_path, version="v")
    cache.put(GPU, "triton", "bf16", 64, 4096, 4096, TUNED)
    cache.put(GPU, "triton", "bf16", 64, 8192, 4096, TUNED)
    raw = cache.path.read_bytes()
    cache.path.write_bytes(raw[: len(raw) // 2])
    with pytest.warns(CacheWarning, match="not valid JSON"):
        assert cache.get(GPU, "triton", "bf16", 64, 4096, 4096) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per file state, not on every lookup
        assert cache.get(GPU, "triton", "bf16", 64, 8192, 4096) is None
    cache.put(GPU, "triton", "bf16", 64, 1024, 4096, TUNED)  # rebuilds a whole file
    assert list(cache.entries()) == [cache.key(GPU, "triton", "bf16", 64, 1024, 4096)]
    assert cache.get(GPU, "triton", "bf16", 64, 1024, 4096) == TUNED


def test_newer_format_is_ignored_and_rebuilt(tmp_path):
    cache = AutotuneCache(tmp_path, version="v")
    key = cache.key(GPU, "triton", "bf16", 64, 4096, 4096)
    future = {"producer": "tlgemm.autotune", "format": CACHE_FORMAT + 1,
              "entries": {key: {"schedule": {"tile": [128, 256, 64]}, "info": {}}}}
    cache.path.write_text(json.dumps(future))
    with pytest.warns(CacheWarning, match=f"format version {CACHE_FORMAT + 1}"):
        assert cache.get(GPU, "triton", "bf16", 64, 4096, 4096) is None
    with pytest.warns(CacheWarning):  # a fresh instance's put reads the same file: warned, then replaced
        AutotuneCache(tmp_path, version="v").put(GPU, "triton", "bf16", 64, 4096, 4096, TUNED)
    data = json.loads(cache.path.read_text())
    assert data["format"] == CACHE_FORMAT
    assert cache.get(GPU, "triton", "bf16", 64, 4096, 4096) == TUNED


@pytest.mark.parametrize("content", [b"[1, 2, 3]", b'{"format": 1, "entries": {}}', b"\xff\xfe binary"])
def test_foreign_file_is_ignored(tmp_path, content):
    cache = AutotuneCache(tmp_path, version="v")
    cache.path.write_bytes(content)
    with pytest.warns(CacheWarning, match="ignoring autotune cache"):
        assert cache.get(GPU, "triton", "bf16", 1, 1, 1) is None


def test_unreadable_or_deeply_nested_file_is_a_miss_with_a_warning(tmp_path):
    """Every lookup reads the file, so one that cannot be read or parsed must not raise: a
    directory in its place, or JSON nested beyond the parser's recursion limit."""
    cache = AutotuneCache(tmp_path / "dir", version="v")
    cache.path.mkdir(parents=True)
    with pytest.warns(CacheWarning, match=r"unreadable \(\[Errno 21\]"):
        assert cache.get(GPU, "triton", "bf16", 1, 1, 1) is None
    nested = AutotuneCache(tmp_path / "nested", version="v")
    nested.directory.mkdir()
    nested.path.write_bytes(b"[" * 200000 + b"]" * 200000)
    with pytest.warns(CacheWarning, match="not valid JSON .*RecursionError"):
        assert nested.get(GPU, "triton", "bf16", 1, 1, 1) is None


def test_file_with_an_overlong_integer_is_ignored_and_rebuilt(tmp_path):
    """json.loads refuses an integer of more than 4300 digits with a plain ValueError: a miss
    with a warning, and the next put rebuilds the file (get and put raised before)."""
    cache = AutotuneCache(tmp_path, version="v")
    cache.path.write_bytes(b'{"producer": "tlgemm.autotune", "format": 2, "entries": {}, "x": ' + b"1" * 5000 + b"}")
    with pytest.warns(CacheWarning, match="not valid JSON .*ValueError: Exceeds the limit"):
        assert cache.get(GPU, "triton", "bf16", 1, 1, 1) is None
    cache.put(GPU, "triton", "bf16", 1, 1, 1, TUNED)
    assert cache.get(GPU, "triton", "bf16", 1, 1, 1) == TUNED


def test_unusable_entry_is_a_miss_with_a_warning(tmp_path):
    cache = AutotuneCache(tmp_path, version="v")
    cache.put(GPU, "triton", "bf16", 64, 4096, 4096, TUNED)
    data = json.loads(cache.path.read_text())
    (key,) = data["entries"]
    data["entries"][key]["schedule"]["block_m"] = 96  # not a valid Schedule
    cache.path.write_text(json.dumps(data))
    with pytest.warns(CacheWarning, match="block_m must be a power of two"):
        assert cache.get(GPU, "triton", "bf16", 64, 4096, 4096) is None
