"""The Mooncake facade, driven the way SGLang HiCache, vLLM's Mooncake store
connector and LMCache's Mooncake backend drive mooncake.store."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from kvfabric.compat.mooncake import BufferHandle, MooncakeDistributedStore, ReplicateConfig
from kvfabric.errors import InvalidArgumentError

from conftest import MIB, PYDIR, LibSpy

PAGE = 64 * 1024


def setup_args(tmp_path, gss=64 * MIB, **kw):
    # Mooncake's positional signature; kvfabric keys as keyword arguments.
    kw.setdefault("driver", "sim")
    kw.setdefault("socket_dir", str(tmp_path))
    return ("engine-host", "P2PHANDSHAKE", gss, 16 * MIB, "tcp", "", "embedded"), kw


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    args, kw = setup_args(tmp_path_factory.mktemp("mc"))
    s = MooncakeDistributedStore()
    assert s.setup(*args, **kw) == 0
    yield s
    assert s.close() == 0


@pytest.fixture
def ms(mc):
    assert mc.remove_all(force=True) >= 0
    return mc


@pytest.fixture
def pool(ms):
    """A large registered host pool, as the engines register their KV pool."""
    p = np.zeros(32 * MIB, np.uint8)
    assert ms.register_buffer(p.ctypes.data, p.nbytes) == 0
    yield p
    assert ms.unregister_buffer(p.ctypes.data) == 0


def fill(pool, n, seed):
    pool[: n * PAGE] = np.random.default_rng(seed).integers(0, 256, n * PAGE, dtype=np.uint8)


def test_sglang_hicache_sequence(ms, pool):
    # setup -> register_buffer(host pool) -> batch_is_exist -> batch_put_from
    # -> batch_get_into (positive counts) -> remove_all -> close
    n = 64
    fill(pool, n, 1)
    base = pool.ctypes.data
    keys = [f"sglang-{i:04d}" for i in range(n)]
    assert ms.batch_is_exist(keys) == [0] * n
    ptrs = [base + i * PAGE for i in range(n)]
    assert ms.batch_put_from(keys, ptrs, [PAGE] * n) == [0] * n
    exist = ms.batch_is_exist(keys + ["absent"])
    assert exist == [1] * n + [0] and all(type(v) is int for v in exist)
    dst = base + n * PAGE
    got = ms.batch_get_into(keys, [dst + i * PAGE for i in range(n)], [PAGE] * n)
    assert got == [PAGE] * n
    assert np.array_equal(pool[: n * PAGE], pool[n * PAGE: 2 * n * PAGE])
    # Put-if-absent on a second write of the same pages.
    assert ms.batch_put_from(keys[:4], ptrs[4:8], [PAGE] * 4) == [0] * 4
    assert ms.get_into(keys[0], dst, PAGE) == PAGE
    assert np.array_equal(pool[:PAGE], pool[n * PAGE: n * PAGE + PAGE])
    # batch_is_exist leased every key (for the lease TTL, as Mooncake's
    # does; a get releases its own lease once its copy is done): remove_all
    # leaves them, remove_all(force=True) removes them.
    assert ms.remove_all() == 0
    assert ms.remove_all(force=True) == n
    assert ms.batch_is_exist(keys[:3]) == [0, 0, 0]


def test_batch_flat_bad_input_changes_nothing(ms, pool):
    # batch_put_from / batch_get_into build their C arrays straight from
    # the lists: every bad list fails every key with -600 and stores or
    # writes nothing; str and bytes keys mix.
    fill(pool, 4, 7)
    base = pool.ctypes.data
    keys = ["flat-0", b"flat-1", "flat-2"]
    ptrs = [base + i * PAGE for i in range(3)]
    bad_lists = [
        (ptrs[:2], [PAGE] * 3),                     # lengths differ
        (ptrs, [PAGE, PAGE]),
        ([ptrs[0], -1, ptrs[2]], [PAGE] * 3),       # negative pointer
        (ptrs, [PAGE, -PAGE, PAGE]),                # negative size
        (ptrs, [PAGE, float(PAGE), PAGE]),          # not an integer
        ([ptrs[0], "0x1000", ptrs[2]], [PAGE] * 3),
    ]
    for p, z in bad_lists:
        assert ms.batch_put_from(keys, p, z) == [-600] * 3, (p, z)
        assert ms.batch_is_exist(keys) == [0, 0, 0], (p, z)
    assert ms.batch_put_from([1, "x", "y"], ptrs, [PAGE] * 3) == [-600] * 3  # a key that is not str/bytes
    assert ms.batch_put_from(keys, ptrs, [PAGE] * 3) == [0] * 3
    dst = base + 8 * PAGE
    pool[8 * PAGE: 11 * PAGE] = 0xEE
    for p, z in bad_lists:
        dp = [dst + (q - base) if isinstance(q, int) and q >= 0 else q for q in p]
        assert ms.batch_get_into(keys, dp, z) == [-600] * 3, (p, z)
        assert (pool[8 * PAGE: 11 * PAGE] == 0xEE).all(), "a refused get wrote its destination"
    assert ms.batch_get_into(keys, [dst + i * PAGE for i in range(3)], [PAGE] * 3) == [PAGE] * 3
    assert np.array_equal(pool[: 3 * PAGE], pool[8 * PAGE: 11 * PAGE])
    assert ms.batch_put_from([], [], []) == [] and ms.batch_get_into([], [], []) == []


@pytest.mark.parametrize("hide_packed", [False, True])
def test_batch_flat_key_paths(ms, pool, monkeypatch, hide_packed):
    # batch_put_from / batch_get_into pass keys joined by NUL (one join)
    # when they can, and key arrays when the keys mix str and bytes or the
    # library has no packed-keys functions; a key holding a NUL byte makes
    # the library refuse the packed keys (they split into more than n) and
    # the call is made again with arrays. The same bytes are stored and read
    # either way, at the same keys.
    st = ms._s()
    spy = LibSpy(st._lib, hide_packed)
    monkeypatch.setattr(st, "_lib", spy)
    fill(pool, 8, 5)
    base = pool.ctypes.data
    packed, arrays, refused = ["_packed"], [""], ["_packed", ""]
    cases = [
        (["paths-a", "paths-ключ", "paths-c"], packed),
        ([b"paths-d", b"paths-e", b"paths-f"], packed),
        (["paths-nul\0x", "paths-g"], refused),          # a key holds NUL
        ([b"paths-h", b"paths-nul\0y"], refused),
        (["paths-i", b"paths-j"], arrays),                # str and bytes
    ]
    at = 0
    for keys, calls in cases:
        if hide_packed:
            calls = arrays
        n = len(keys)
        src = [base + (at + i) * PAGE for i in range(n)]
        spy.called.clear()
        assert ms.batch_put_from(keys, src, [PAGE] * n) == [0] * n, keys
        dst = [base + (16 + i) * PAGE for i in range(n)]
        pool[16 * PAGE: (16 + n) * PAGE] = 0xEE
        assert ms.batch_get_into(keys, dst, [PAGE] * n) == [PAGE] * n, keys
        assert np.array_equal(pool[at * PAGE: (at + n) * PAGE], pool[16 * PAGE: (16 + n) * PAGE]), keys
        want = [f"kvfabric_batch_{op}{c}" for op in ("put", "get") for c in calls]
        assert spy.called == want, (keys, spy.called)
        # The same keys through the other calls: each one object.
        assert ms.batch_is_exist(keys) == [1] * n, keys
        at += n
    assert ms.remove_all(force=True) == at
    # A key that is not str or bytes: -600 for every key, nothing stored.
    assert ms.batch_put_from(["paths-x", 7], [base, base + PAGE], [PAGE] * 2) == [-600] * 2
    assert ms.batch_is_exist(["paths-x"]) == [0]
    # Refused whole for another reason (replicas=-1, which the library
    # checks): raised, not made again with arrays.
    spy.called.clear()
    with pytest.raises(InvalidArgumentError, match="replicas"):
        st._batch_put_flat(["paths-y"], [base], [PAGE], 0, -1)
    assert spy.called == ["kvfabric_batch_put" + ("" if hide_packed else "_packed")]
    assert ms.batch_is_exist(["paths-y"]) == [0]


@pytest.mark.parametrize("hide_packed", [False, True])
def test_batch_put_stream(ms, pool, monkeypatch, hide_packed):
    # A batch_put_from of at least STREAM_MIN_KEYS keys goes as a put stream:
    # its pieces (64, 128, the rest) are converted while the ones before
    # copy; every key is stored with its own bytes, with packed keys or key
    # arrays; without the library's put stream it is one batch call.
    from kvfabric import store as _store

    monkeypatch.setattr(_store, "STREAM_MIN_KEYS", 256)  # a smaller batch than the default's 2048
    st = ms._s()
    n, blk = 300, 4096
    base = pool.ctypes.data
    pool[: 2 * n * blk] = np.random.default_rng(11).integers(0, 256, 2 * n * blk, dtype=np.uint8)
    for hide_stream in (False, True):
        spy = LibSpy(st._lib, hide_packed, hide_stream)
        monkeypatch.setattr(st, "_lib", spy)
        keys = [f"stream-{hide_stream}-{i}" for i in range(n)]
        src = [base + i * blk for i in range(n)]
        assert ms.batch_put_from(keys, src, [blk] * n) == [0] * n
        feed = "kvfabric_put_stream_feed" + ("" if hide_packed else "_packed")
        want = (["kvfabric_batch_put" + ("" if hide_packed else "_packed")] if hide_stream else
                ["kvfabric_put_stream_begin", feed, feed, feed, "kvfabric_put_stream_end"])
        assert spy.called == want
        dst = base + n * blk
        pool[n * blk: 2 * n * blk] = 0xEE
        assert ms.batch_get_into(keys, [dst + i * blk for i in range(n)], [blk] * n) == [blk] * n
        assert np.array_equal(pool[: n * blk], pool[n * blk: 2 * n * blk])
    assert ms.remove_all(force=True) == 2 * n


class _Ptrs(list):
    """A list of pointers whose slice starting at fail_at raises, as a
    caller's sequence may while the stream converts it."""

    def __init__(self, values, fail_at):
        super().__init__(values)
        self.fail_at = fail_at

    def __getitem__(self, i):
        if isinstance(i, slice) and i.start == self.fail_at:
            raise RuntimeError("the caller's sequence failed")
        return super().__getitem__(i)


def test_batch_put_stream_bad_input_changes_nothing(ms, pool, monkeypatch):
    # A bad value in a late piece of a put stream (after the pieces before
    # it were started and copied) fails every key with -600 (-1 for an
    # error of the caller's own sequence) and stores nothing, as a batch refused before any copy does; so does a caller's
    # sequence that raises half-way. The same keys are stored afterwards
    # with their bytes (no put of them was left in progress).
    from kvfabric import store as _store

    monkeypatch.setattr(_store, "STREAM_MIN_KEYS", 256)
    n, blk = 300, 4096
    base = pool.ctypes.data
    keys = [f"stream-bad-{i}" for i in range(n)]
    ptrs = [base + i * blk for i in range(n)]
    bad = [
        (keys, ptrs[:250] + [-1] + ptrs[251:], [blk] * n, -600),          # a negative pointer in the third piece
        (keys, ptrs, [blk] * 290 + [float(blk)] + [blk] * 9, -600),        # a size that is not an integer
        (keys[:200] + [7] + keys[201:], ptrs, [blk] * n, -600),            # a key that is neither str nor bytes
        (keys, _Ptrs(ptrs, 192), [blk] * n, -1),                           # the caller's sequence raises (INTERNAL_ERROR)
    ]
    for k, p, z, code in bad:
        assert ms.batch_put_from(k, p, z) == [code] * n
        assert ms.batch_is_exist(keys) == [0] * n
    pool[: n * blk] = np.random.default_rng(12).integers(0, 256, n * blk, dtype=np.uint8)
    assert ms.batch_put_from(keys, ptrs, [blk] * n) == [0] * n
    dst = base + n * blk
    assert ms.batch_get_into(keys, [dst + i * blk for i in range(n)], [blk] * n) == [blk] * n
    assert np.array_equal(pool[: n * blk], pool[n * blk: 2 * n * blk])
    assert ms.remove_all(force=True) == n


def test_joined_keys():
    from kvfabric import _native

    assert _native.joined_keys([]) == b""
    assert _native.joined_keys(["a"]) == b"a"
    assert _native.joined_keys(["a", "", "ключ"]) == b"a\0\0" + "ключ".encode()
    assert _native.joined_keys([b"a", b"b"]) == b"a\0b"
    assert _native.joined_keys(["a\0b", "c"]) == b"a\0b\0c"  # the library counts 3 keys, not 2
    for keys in (["a", b"b"], [b"a", "b"], [1, 2], ["\udc80"]):
        assert _native.joined_keys(keys) is None, keys


def test_packed_keys_arg():
    # What kvfabric_batch_put_packed reads at the argument's address: the
    # joined keys' UTF-8 bytes, for str keys from the str itself.
    import ctypes

    from kvfabric import _native

    def read(keys):
        r = _native.packed_keys_arg(keys)
        if r is None:
            return None
        a, n, keep = r
        assert keep is not None
        return ctypes.string_at(a, n) if isinstance(a, int) else bytes(a[:n])

    assert read([]) == b""
    assert read([""]) == b""
    assert read(["a"]) == b"a"
    assert read(["a", "", "ключ"]) == b"a\0\0" + "ключ".encode()
    assert read([b"a", b"b"]) == b"a\0b"
    assert read(["a\0b", "c"]) == b"a\0b\0c"
    big = [f"bench/python/{i}" for i in range(4096)]
    assert read(big) == "\0".join(big).encode()
    for keys in (["a", b"b"], [b"a", "b"], [1, 2], ["x", 3], ["\udc80"], ["ok", "\udc80"]):
        assert read(keys) is None, keys


def test_batch_codes():
    # The statuses of a batch as a list: all OK without a list per element,
    # a failure anywhere as tolist.
    from array import array

    from kvfabric import store

    assert store._codes(array("i", bytes(16))) == [0] * 4
    assert store._codes(array("i", [0, 0, -704, 0])) == [0, 0, -704, 0]
    assert store._codes(array("i", [0, 0, 0, 1])) == [0, 0, 0, 1]
    assert store._codes(array("i")) == []
    assert store.all_ok([0] * 3) and store.all_ok([])
    assert not store.all_ok([0, -704, 0]) and not store.all_ok([1])


def test_batch_get_into_large(ms, pool):
    # A batch_get_into of 4096 keys (an engine's batch, split into parts on
    # the Go side): codes and sizes stay positional, bad input anywhere
    # fails every key and writes nothing, and no thread outlives the call.
    n, blk = 4096, 1024
    base = pool.ctypes.data
    pool[: n * blk] = np.random.default_rng(11).integers(0, 256, n * blk, dtype=np.uint8)
    keys = [f"halves-{i}" for i in range(n)]
    absent = {5, 2047, 2048, 4095}  # both sides of the split
    stored = [i for i in range(n) if i not in absent]
    assert ms.batch_put_from([keys[i] for i in stored], [base + i * blk for i in stored], [blk] * len(stored)) == [0] * len(stored)
    dst = n * blk
    pool[dst: dst + n * blk] = 0xEE
    threads = threading.active_count()
    bad = [base + dst + i * blk for i in range(n)]
    bad[3000] = -1
    assert ms.batch_get_into(keys, bad, [blk] * n) == [-600] * n
    assert (pool[dst: dst + n * blk] == 0xEE).all(), "a refused get wrote its destination"
    got = ms.batch_get_into(keys, [base + dst + i * blk for i in range(n)], [blk] * n)
    assert got == [-704 if i in absent else blk for i in range(n)]
    for i in stored:
        assert np.array_equal(pool[i * blk: (i + 1) * blk], pool[dst + i * blk: dst + (i + 1) * blk]), i
    for i in absent:
        assert (pool[dst + i * blk: dst + (i + 1) * blk] == 0xEE).all(), i
    assert threading.active_count() == threads


def test_vllm_multi_buffer_sequence(ms, pool):
    # vLLM: per key a K and a V block from different places of the pool.
    n, half = 16, PAGE // 2
    fill(pool, 2 * n, 2)
    base = pool.ctypes.data
    keys = [f"vllm-{i}" for i in range(n)]
    kptrs = [[base + i * PAGE, base + (n + i) * PAGE] for i in range(n)]
    sizes = [[half, half]] * n
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    assert ms.batch_is_exist(keys) == [0] * n
    assert ms.batch_put_from_multi_buffers(keys, kptrs, sizes, cfg) == [0] * n
    assert ms.get_size(keys[0]) == PAGE
    out = base + 2 * n * PAGE
    optrs = [[out + i * PAGE, out + i * PAGE + half] for i in range(n)]
    assert ms.batch_get_into_multi_buffers(keys, optrs, sizes) == [PAGE] * n
    for i in range(n):
        o = pool[2 * n * PAGE + i * PAGE:][:PAGE]
        assert np.array_equal(o[:half], pool[i * PAGE:][:half])
        assert np.array_equal(o[half:], pool[(n + i) * PAGE:][:half])
    # The object is the concatenation: a single-buffer get sees it too.
    assert ms.get(keys[1]) == pool[PAGE:][:half].tobytes() + pool[(n + 1) * PAGE:][:half].tobytes()
    # Mismatched lists: -600 for every key, positional.
    assert ms.batch_put_from_multi_buffers(keys[:2], kptrs[:1], sizes[:1]) == [-600, -600]
    assert ms.batch_get_into_multi_buffers(keys[:2], [[out], [out, out]], [[half, half], [half, half]]) == [-600, -600]
    assert ms.batch_get_into(["vllm-0", "missing"], [out, out + PAGE], [PAGE, PAGE]) == [PAGE, -704]


def _layers(pool, nlayers, nblocks, blk, at=0):
    """vLLM's paged KV cache in pool from byte at: 2 * nlayers tensors (a K
    and a V per layer) of nblocks blocks of blk bytes; key i's buffers are
    block i of every tensor, in tensor order."""
    t = nblocks * blk
    base = pool.ctypes.data + at
    return [[base + j * t + i * blk for j in range(2 * nlayers)] for i in range(nblocks)]


def _object(pool, ptrs, blk):
    """The bytes of an object put from ptrs (blk each): their concatenation."""
    base = pool.ctypes.data
    return np.concatenate([pool[p - base: p - base + blk] for p in ptrs])


def test_multi_buffers_many_layers(ms, pool, monkeypatch):
    # vLLM's Mooncake store connector: per key (a KV block) one buffer in
    # each of 2 * 8 layer tensors, the object their concatenation. 96 keys
    # of 16 buffers in one batch call (a multi-buffer put does not stream,
    # even past the stream's key threshold); every key holds its own bytes,
    # read back scattered into another layout and whole.
    from kvfabric import store as _store

    monkeypatch.setattr(_store, "STREAM_MIN_KEYS", 64)
    st = ms._s()
    spy = LibSpy(st._lib)
    monkeypatch.setattr(st, "_lib", spy)
    nl, n, blk = 8, 96, 4096
    src = _layers(pool, nl, n, blk)
    total = 2 * nl * n * blk
    pool[:total] = np.random.default_rng(21).integers(0, 256, total, dtype=np.uint8)
    keys = [f"layers-{i}" for i in range(n)]
    sizes = [[blk] * (2 * nl) for _ in range(n)]  # equal lists, not one list repeated
    assert ms.batch_put_from_multi_buffers(keys, src, sizes) == [0] * n
    assert spy.called == ["kvfabric_batch_put_packed"]
    assert ms.get_size(keys[5]) == 2 * nl * blk
    dst = _layers(pool, nl, n, blk, at=total)
    pool[total: 2 * total] = 0xEE
    assert ms.batch_get_into_multi_buffers(keys, dst, sizes) == [2 * nl * blk] * n
    assert np.array_equal(pool[:total], pool[total: 2 * total])
    # One object whole: the concatenation of its buffers, in order.
    whole = 2 * total
    assert ms.get_into(keys[7], pool.ctypes.data + whole, 2 * nl * blk) == 2 * nl * blk
    assert np.array_equal(pool[whole: whole + 2 * nl * blk], _object(pool, src[7], blk))
    assert ms.remove_all(force=True) == n


def test_multi_buffers_uneven(ms, pool):
    # Keys of different buffer counts and sizes, tuples as lists: each key
    # is its own buffers' concatenation (the sizes are not taken from the
    # first key's list when the lists differ).
    base = pool.ctypes.data
    pool[: 1 * MIB] = np.random.default_rng(22).integers(0, 256, 1 * MIB, dtype=np.uint8)
    shapes = [[4096, 4096], [8192], (1024, 3072, 4096), [4096, 4096]]
    keys, ptrs, at = [], [], 0
    for i, zs in enumerate(shapes):
        ps = []
        for z in zs:
            ps.append(base + at)
            at += z + 512  # gaps: the buffers are not contiguous
        keys.append(f"uneven-{i}")
        ptrs.append(tuple(ps) if isinstance(zs, tuple) else ps)
    assert ms.batch_put_from_multi_buffers(keys, ptrs, shapes) == [0] * len(keys)
    out = 2 * MIB
    for k, ps, zs in zip(keys, ptrs, shapes):
        want = np.concatenate([pool[p - base: p - base + z] for p, z in zip(ps, zs)])
        assert ms.get_size(k) == sum(zs)
        assert ms.get_into(k, base + out, sum(zs)) == sum(zs)
        assert np.array_equal(pool[out: out + sum(zs)], want), k
    assert ms.remove_all(force=True) == len(keys)


def test_multi_buffers_bad_input_changes_nothing(ms, pool):
    # A bad buffer in a late key of a multi-buffer put fails every key with
    # -600 and stores nothing; a refused multi-buffer get writes nothing.
    # The same keys then go in and come back with their bytes.
    nl, n, blk = 2, 200, 4096
    src = _layers(pool, nl, n, blk)
    total = 2 * nl * n * blk
    keys = [f"multi-bad-{i}" for i in range(n)]
    sizes = [[blk] * (2 * nl) for _ in range(n)]

    def with_(rows, i, row):
        return rows[:i] + [row] + rows[i + 1:]

    bad = [
        (src[:-1], sizes),                                        # one pointer list short
        (src, sizes[:-1]),                                        # one size list short
        (with_(src, 150, src[150][:3]), sizes),                   # key 150: 3 pointers, 4 sizes
        (with_(src, 150, []), with_(sizes, 150, [])),             # key 150: no buffers
        (with_(src, 195, src[195][:3] + [-1]), sizes),            # a negative pointer in a late key
        (src, with_(sizes, 170, [blk, blk, blk + 0.5, blk])),     # a size that is not an integer
        (src, with_(sizes, 0, [float(blk)] * 4)),                  # the first key's sizes are floats
        (with_(src, 100, 7), sizes),                              # key 100's pointers are not a list
    ]
    for p, z in bad:
        assert ms.batch_put_from_multi_buffers(keys, p, z) == [-600] * n
        assert ms.batch_is_exist(keys) == [0] * n
    pool[:total] = np.random.default_rng(23).integers(0, 256, total, dtype=np.uint8)
    assert ms.batch_put_from_multi_buffers(keys, src, sizes) == [0] * n
    dst = _layers(pool, nl, n, blk, at=total)
    pool[total: 2 * total] = 0xEE
    for p, z in bad:
        if p is src:
            p = dst
        elif len(p) == n:
            p = [dst[i] if p[i] is src[i] else p[i] for i in range(n)]
        assert ms.batch_get_into_multi_buffers(keys, p, z) == [-600] * n
        assert (pool[total: 2 * total] == 0xEE).all(), "a refused get wrote its destination"
    assert ms.batch_get_into_multi_buffers(keys, dst, sizes) == [2 * nl * blk] * n
    assert np.array_equal(pool[:total], pool[total: 2 * total])
    assert ms.remove_all(force=True) == n


def test_multi_buffers_errors_name_the_key():
    from kvfabric.store import Store

    keys = ["a", "b"]
    with pytest.raises(InvalidArgumentError, match=r"key 'b': 1 buffer pointers, 2 sizes"):
        Store._multi_counts(keys, [[1], [2]], [[1], [2, 3]])
    with pytest.raises(InvalidArgumentError, match=r"key 'a': 0 buffer pointers, 0 sizes: a key needs"):
        Store._multi_counts(keys, [[], [2]], [[], [3]])
    with pytest.raises(InvalidArgumentError, match=r"key 'b': buffer pointers int and sizes list"):
        Store._multi_counts(keys, [[1], 5], [[1], [2]])
    with pytest.raises(InvalidArgumentError, match=r"2 keys, 1 buffer pointer lists, 2 size lists"):
        Store._multi_counts(keys, [[1]], [[1], [2]])
    c = Store._multi_counts(keys, [[1], [2, 3]], [[4], [5, 6]])
    with pytest.raises(InvalidArgumentError, match=r"key 'b': bad buffer ptr -3 \(buffer 1\)"):
        Store._multi_regions(keys, [[1], [2, -3]], [[4], [5, 6]], c)
    with pytest.raises(InvalidArgumentError, match=r"key 'a': bad buffer size 'x' \(buffer 0\)"):
        Store._multi_regions(keys, [[1], [2, 3]], [["x"], [5, 6]], c)
    p, z, k = Store._multi_regions(keys, [[1], (2, 3)], [[4], [5, 6]], c)
    assert (list(p), list(z), list(k)) == ([1, 2, 3], [4, 5, 6], [1, 2])
    # Equal size lists: one list repeated, the same values.
    c = Store._multi_counts(keys, [[1, 2], [3, 4]], [[7, 8], [7, 8]])
    p, z, k = Store._multi_regions(keys, [[1, 2], [3, 4]], [[7, 8], [7, 8]], c)
    assert (list(p), list(z), list(k)) == ([1, 2, 3, 4], [7, 8, 7, 8], [2, 2])


def test_exist_and_remove_key_kinds(ms, pool):
    # batch_is_exist / batch_remove take their keys by one join when every
    # key is an ASCII str, else key by key: the answers are the same for
    # ASCII, non-ASCII and NUL-holding str keys, bytes keys and a mix; a key
    # that is neither str nor bytes fails the whole call with -600.
    base = pool.ctypes.data
    kinds = {
        "ascii": [f"kinds-{i}" for i in range(5)],
        "utf8": ["ключ-0", "kinds-é", "鍵"],
        "nul": ["kinds\0a", "kinds\0b"],
        "bytes": [b"kinds-b0", b"kinds-b1"],
    }
    for name, keys in kinds.items():
        present = keys[::2]
        for k in present:
            assert ms.put_from(k, base, 4096) == 0, (name, k)
        want = [1 if k in present else 0 for k in keys]
        assert ms.batch_is_exist(keys) == want, name
        assert ms.batch_is_exist(keys + ["kinds-absent"]) == want + [0], name
        assert ms.batch_remove(keys, force=True) == [0 if k in present else -704 for k in keys], name
        assert ms.batch_is_exist(keys) == [0] * len(keys), name
    mixed = ["kinds-m0", b"kinds-m1", "kinds-é1"]
    assert ms.put_from(mixed[1], base, 4096) == 0
    assert ms.batch_is_exist(mixed) == [0, 1, 0]
    assert ms.batch_is_exist(["kinds-m0", 7]) == [-600, -600]
    assert ms.batch_remove(["kinds-m0", 7]) == [-600, -600]
    assert ms.batch_remove(mixed, force=True) == [-704, 0, -704]


def test_lmcache_sequence(ms, pool):
    # LMCache: put(bytes)/get(bytes), is_exist, get_into a registered buffer, remove.
    payload = os.urandom(3000)
    assert ms.is_exist("lm/0") == 0
    assert ms.put("lm/0", payload) == 0
    assert ms.put("lm/0", b"other") == 0  # put-if-absent keeps the value
    assert ms.get("lm/0") == payload
    assert ms.is_exist("lm/0") == 1
    assert ms.get_size("lm/0") == 3000
    assert ms.remove("lm/0") == -706  # is_exist leased it, as in Mooncake
    assert ms.get_into("lm/0", pool.ctypes.data, 4096) == 3000
    assert pool[:3000].tobytes() == payload
    assert ms.get_into("lm/0", pool.ctypes.data, 100) == -600  # too small
    assert ms.put_parts("lm/1", b"ab", bytearray(b"cd"), memoryview(b"ef")) == 0
    assert ms.get("lm/1") == b"abcdef"
    assert ms.get_batch(["lm/0", "lm/1", "nope"]) == [payload, b"abcdef", b""]
    assert ms.put_batch(["lm/2", "lm/3"], [b"2", b"3"]) == 0
    assert ms.remove("lm/0", force=True) == 0
    assert ms.remove("lm/0", force=True) == -704
    assert ms.remove("lm/0") == -704
    assert ms.get("lm/0") == b""
    assert ms.get_into("lm/0", pool.ctypes.data, 4096) == -704
    assert ms.get_size("lm/0") == -704


def test_buffers_and_misc(ms, pool):
    assert ms.put("bh", b"buffer-handle") == 0
    (h, miss) = ms.batch_get_buffer(["bh", "nope"])
    assert miss is None and isinstance(h, BufferHandle)
    assert h.size() == len(h) == 13 and bytes(h) == b"buffer-handle"
    assert bytes(memoryview(h)) == b"buffer-handle" and h.ptr() != 0
    assert np.frombuffer(h, np.uint8).size == 13
    assert ms.get_buffer("nope") is None
    host, port = ms.get_hostname().split(":")
    assert host == "engine-host" and 12300 <= int(port) <= 14300
    assert ms.health_check() == 0
    assert ms.put("", b"x") == -600
    assert ms.put("empty", b"") == -600
    assert ms.put_from("k", pool.ctypes.data, -1) == -600
    assert ms.register_buffer(pool.ctypes.data, pool.nbytes) == -600  # already registered
    assert ms.unregister_buffer(12345) == -600
    # Unregistered host memory cannot be a put_from source (the simulator
    # reports it as a failed copy). The Store fails every key of a batch
    # whose batched copy failed, so the good key may fail too.
    loose = np.ones(PAGE, np.uint8)
    assert ms.put_from("loose", loose.ctypes.data, PAGE) < 0
    r = ms.batch_put_from(["l1", "l2"], [loose.ctypes.data, pool.ctypes.data], [PAGE, PAGE])
    assert len(r) == 2 and r[0] < 0 and r[1] in (0, -800)


def test_threads(ms, pool):
    errs = []

    def work(t):
        try:
            base = pool.ctypes.data + t * 8 * PAGE
            keys = [f"thr{t}-{i}" for i in range(8)]
            assert ms.batch_put_from(keys, [base + i * PAGE for i in range(8)], [PAGE] * 8) == [0] * 8
            assert ms.batch_is_exist(keys) == [1] * 8
            assert ms.batch_get_into(keys, [base + i * PAGE for i in range(8)], [PAGE] * 8) == [PAGE] * 8
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs


def test_full_returns_minus_200(tmp_path):
    args, kw = setup_args(tmp_path, gss=4 * MIB)
    s = MooncakeDistributedStore()
    assert s.setup(*args, **kw) == 0
    p = np.zeros(8 * MIB, np.uint8)
    assert s.register_buffer(p.ctypes.data, p.nbytes) == 0
    pin = ReplicateConfig()
    pin.with_hard_pin = True
    assert s.put_from("a", p.ctypes.data, 3 * MIB, pin) == 0
    assert s.batch_put_from(["b", "c"], [p.ctypes.data, p.ctypes.data], [3 * MIB, 64]) == [-200, 0]
    assert s.put_from("d", p.ctypes.data, 3 * MIB) == -200
    assert s.close() == 0


def test_setup_variants_and_close(tmp_path, monkeypatch):
    s = MooncakeDistributedStore()
    # Before setup: codes, not exceptions.
    assert s.is_exist("k") == -600 and s.get("k") == b"" and s.batch_is_exist(["a", "b"]) == [-600, -600]
    assert s.close() == 0
    # setup(dict) with Mooncake's key names.
    assert s.setup({
        "local_hostname": "dict-host", "metadata_server": "http://meta:8080/metadata",
        "global_segment_size": 16 * MIB, "local_buffer_size": 0, "protocol": "nvlink",
        "device_name": "mlx5_0", "master_server_address": "embedded", "driver": "sim",
        "enable_egm_store_pool": True, "socket_dir": str(tmp_path),
    }) == 0
    assert s.get_hostname().startswith("dict-host:")
    assert s.setup({"driver": "sim"}) == -600  # twice
    assert s.close() == 0 and s.close() == 0
    assert s.put("k", b"v") == -600 and s.get_hostname() == "" and s.health_check() == 1
    # Config errors are codes; the EGM rules apply.
    args, kw = setup_args(tmp_path)
    assert s.setup(*args, enable_egm_store_pool=True, **kw) == -600  # protocol=tcp
    assert s.setup(*args, bogus_key=1, **kw) == -600
    # KVFABRIC_CONFIG redirects unmodified engine code.
    monkeypatch.setenv("KVFABRIC_CONFIG", json.dumps({"master_server_addr": "embedded", "driver": "sim",
                                                      "socket_dir": str(tmp_path)}))
    assert s.setup("env-host:7000", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "rdma", "mlx5_0", "10.0.0.1:50051") == 0
    assert s.get_hostname() == "env-host:7000"
    assert s.close() == 0


def test_shim_provides_mooncake_store():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYDIR, os.path.join(PYDIR, "mooncake-shim")]))
    code = ("from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction, ObjectDataType\n"
            "from mooncake.store import ReplicaStatus, MooncakeHostMemAllocator, KVCACHE, COMPLETE\n"
            "import kvfabric.compat.mooncake as m\n"
            "assert MooncakeDistributedStore is m.MooncakeDistributedStore and ReplicateConfig is m.ReplicateConfig\n"
            "assert KVCACHE is ObjectDataType.KVCACHE and COMPLETE is ReplicaStatus.COMPLETE\n"
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


CLOSE_RETRY = r"""
import tempfile
from kvfabric.compat.mooncake import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("h", "P2PHANDSHAKE", 16 << 20, 16 << 20, "nvlink", "", "embedded", driver="sim",
               enable_egm_store_pool=True, socket_dir=tempfile.mkdtemp()) == 0
assert s.put("k", b"v") == 0
print(s.close(), s.put("k2", b"v"), s.close(), s.close())
"""


def test_close_retry_with_injected_fault():
    env = dict(os.environ, PYTHONPATH=PYDIR,
               KVFABRIC_TEST_FAULTS=json.dumps([{"method": "MemUnmap", "nth": 1, "code": 999}]))
    r = subprocess.run([sys.executable, "-c", CLOSE_RETRY], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # First close fails (-1, still closable; ops refused), retry succeeds, then idempotent.
    assert r.stdout.split() == ["-1", "-600", "0", "0"]


def test_soft_pin_is_evictable_under_pressure(tmp_path):
    # Mooncake's soft pin: kept while unpinned objects can be evicted
    # instead, evicted when nothing else can go (a hard pin never is).
    args, kw = setup_args(tmp_path, gss=8 * MIB)
    s = MooncakeDistributedStore()
    assert s.setup(*args, **kw) == 0
    try:
        buf = np.ones(2 * MIB, np.uint8)
        assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        soft = ReplicateConfig()
        soft.with_soft_pin = True
        for k in ("soft-a", "soft-b", "soft-c"):
            assert s.put_from(k, buf.ctypes.data, MIB, soft) == 0
        # More unpinned bytes than fit: unpinned objects are evicted, never
        # the soft-pinned ones.
        for i in range(8):
            assert s.put_from(f"plain{i}", buf.ctypes.data, MIB) == 0
        # (get_size, not is_exist: is_exist leases, and leased bytes stay
        # allocated after remove_all(force=True) until the lease ends.)
        assert [s.get_size(k) for k in ("soft-a", "soft-b", "soft-c")] == [MIB] * 3
        # Nothing but soft-pinned objects: under pressure they go too.
        assert s.remove_all(force=True) >= 0
        for i in range(8):
            assert s.put_from(f"soft{i}", buf.ctypes.data, MIB, soft) == 0
        assert s.put_from("plain", buf.ctypes.data, MIB) == 0
        assert sum(s.get_size(f"soft{i}") == MIB for i in range(8)) < 8
        # A hard pin never goes.
        hard = ReplicateConfig()
        hard.with_hard_pin = True
        assert s.remove_all(force=True) >= 0
        for i in range(8):
            assert s.put_from(f"hard{i}", buf.ctypes.data, MIB, hard) == 0
        assert s.put_from("plain-late", buf.ctypes.data, MIB) < 0
        assert s.unregister_buffer(buf.ctypes.data) == 0
    finally:
        assert s.close() == 0
