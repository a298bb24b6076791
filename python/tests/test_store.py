import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import kvfabric
from kvfabric import errors

from conftest import MIB, PYDIR, header_dir, sim_config, LibSpy


def rand(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_put_get_registered_host(store, host):
    src, dst = host(1 * MIB), host(1 * MIB)
    src[:] = rand(MIB)
    store.put("a", src)
    assert store.exists("a")
    assert store.size("a") == MIB
    assert store.get("a", dst) == MIB
    assert np.array_equal(src, dst)


def test_put_get_unregistered_host_is_staged(store):
    src = rand(3000, 1)
    store.put("u", src)
    out = np.zeros(4096, dtype=np.uint8)
    assert store.get("u", out) == 3000
    assert np.array_equal(out[:3000], src)
    assert store.get_bytes("u") == src.tobytes()


def test_bytes_like_and_raw_pointer(store, host):
    store.put("b", b"hello")
    buf = bytearray(8)
    assert store.get("b", buf) == 5 and bytes(buf[:5]) == b"hello"
    mv = memoryview(bytearray(5))
    assert store.get("b", mv) == 5 and mv.tobytes() == b"hello"
    src, dst = host(64), host(64)
    src[:] = rand(64, 2)
    store.put(b"raw", (src.ctypes.data, 64))
    assert store.get(b"raw", (dst.ctypes.data, 64)) == 64
    assert np.array_equal(src, dst)


def test_scatter_gather(store, host):
    a, b, c = host(100), host(300), host(400)
    a[:] = 1
    b[:] = 2
    store.put("sg", [a, b])  # the object is a ‖ b
    assert store.size("sg") == 400
    assert store.get("sg", [c[:150], c[150:]]) == 400
    assert (c[:100] == 1).all() and (c[100:] == 2).all()
    # Unregistered parts are staged and scattered too.
    x, y = np.zeros(200, np.uint8), np.zeros(200, np.uint8)
    assert store.get("sg", [x, y]) == 400
    assert (x[:100] == 1).all() and (x[100:] == 2).all() and (y == 2).all()
    store.put("sg2", [np.full(10, 7, np.uint8), b"abc"])
    assert store.get_bytes("sg2") == bytes([7] * 10) + b"abc"


class CAI:
    """A minimal __cuda_array_interface__ producer over (sim) memory."""

    def __init__(self, arr, stream=None):
        self._arr = arr
        self.__cuda_array_interface__ = {
            "data": (arr.ctypes.data, False), "shape": arr.shape, "typestr": arr.dtype.str,
            "strides": None, "version": 3, "stream": stream,
        }


class DL:
    """A DLPack-only producer (hides numpy's __array_interface__)."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, stream=None):
        return self._arr.__dlpack__()

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_cuda_array_interface_and_dlpack(store, host):
    src, dst = host(4096).view(np.float32), host(4096).view(np.float32)
    src[:] = np.arange(1024, dtype=np.float32)
    store.put("cai", CAI(src, stream=None))
    assert store.get("cai", CAI(dst)) == 4096
    assert np.array_equal(src, dst)
    dst[:] = 0
    store.put("dl", DL(src))
    assert store.get("dl", DL(dst)) == 4096
    assert np.array_equal(src, dst)
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.put("nc", src.reshape(32, 32)[:, ::2])  # not contiguous
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.get("cai", b"read-only bytes")
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.put("x", object())


def test_stream_argument(store, host):
    src = host(16)
    store.put("s", src, stream=0)

    class TorchLikeStream:
        cuda_stream = 0

    store.get("s", host(16), stream=TorchLikeStream())
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.get("s", host(16), stream="default")


def test_errors_map_to_exceptions(store, host):
    with pytest.raises(kvfabric.NotFoundError) as ei:
        store.get("missing", host(16))
    assert isinstance(ei.value, KeyError)
    assert ei.value.code == -704 and "not found" in str(ei.value)
    with pytest.raises(KeyError):
        store.size("missing")
    with pytest.raises(kvfabric.NotFoundError):
        store.remove("missing")
    with pytest.raises(KeyError):
        store.get_bytes("missing")
    store.put("dup", b"1")
    with pytest.raises(kvfabric.AlreadyExistsError) as ei:
        store.put("dup", b"2")
    assert ei.value.code == -705
    assert store.get_bytes("dup") == b"1"
    store.put("big", b"x" * 100)
    with pytest.raises(kvfabric.BufferTooSmallError):
        store.get("big", host(10))
    with pytest.raises(kvfabric.BufferTooSmallError):
        store.get("big", bytearray(10))  # staged path
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.put("", b"x")
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.put(12, b"x")


def test_get_into_ptr_tuple(store, host):
    # Store.get(key, (ptr, nbytes)) and the facade's get_into take a
    # one-region path of their own (Store._get1): the same bytes, errors
    # and stream handling as the general path.
    src = host(300)
    src[:] = np.arange(300, dtype=np.uint8)
    store.put("t", src)
    dst = host(512)
    ptr = dst.ctypes.data
    assert store.get("t", (ptr, 512)) == 300
    assert bytes(dst[:300]) == bytes(src) and not dst[300:].any()
    dst[:] = 0
    assert store.get("t", (ptr, 300), stream=0) == 300 and bytes(dst[:300]) == bytes(src)
    dst[:] = 0
    assert store.get(b"t", [(ptr, 100), (ptr + 100, 412)]) == 300  # a list: the general path
    assert bytes(dst[:300]) == bytes(src)
    with pytest.raises(kvfabric.NotFoundError) as ei:
        store.get("missing", (ptr, 512))
    assert ei.value.code == -704 and "missing" in str(ei.value)
    with pytest.raises(kvfabric.BufferTooSmallError):
        store.get("t", (ptr, 299))
    with pytest.raises(kvfabric.InvalidArgumentError, match="ptr=-0x1"):
        store.get("t", (-1, 512))  # not taken by the one-region path: resolve names it
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.get("t", (ptr, 512), stream="default")

    from kvfabric.compat.mooncake import MooncakeDistributedStore

    ms = MooncakeDistributedStore()
    ms._store = store  # the facade over this Store (as scripts/device-latency.sh does)
    try:
        dst[:] = 0
        assert ms.get_into("t", ptr, 512) == 300 and bytes(dst[:300]) == bytes(src)
        assert ms.get_into("missing", ptr, 512) == -704
        assert ms.get_into("t", ptr, 299) < 0
        assert ms.get_into("t", -1, 512) < 0
    finally:
        ms._store = None


def test_get_one_region_closed(cfg):
    s = kvfabric.Store(cfg)
    s.close()
    with pytest.raises(kvfabric.ClosedError):
        s.get("k", (4096, 16))


def test_store_full(tmp_path):
    with kvfabric.Store(sim_config(tmp_path, global_segment_size="4MiB")) as s:
        pool = np.zeros(8 * MIB, np.uint8)
        s.register_buffer(pool)
        s.put("a", pool[: 3 * MIB], pin=True)  # pinned: eviction cannot make room
        with pytest.raises(kvfabric.StoreFullError) as ei:
            s.put("b", pool[3 * MIB: 6 * MIB])
        assert ei.value.code == -200 and "space" in str(ei.value)
        s.unregister_buffer(pool)


def test_remove_exists_size(store):
    for i in range(5):
        store.put(f"k{i}", bytes([i]) * (i + 1))
    assert store.batch_exists(["k0", "k4", "nope"]) == [True, True, False]
    assert store.size("k4") == 5
    store.remove("k0")
    assert not store.exists("k0")
    assert store.remove_all(force=True) == 4  # size() above leases k4 (see report)
    assert store.batch_exists([f"k{i}" for i in range(5)]) == [False] * 5
    assert store.batch_exists([]) == []


def test_batch_put_get(store, host):
    srcs = [host(1000 + i) for i in range(4)]
    for i, s in enumerate(srcs):
        s[:] = rand(len(s), i)
    res = store.batch_put([f"b{i}" for i in range(4)], srcs)
    assert res == [None] * 4
    # A second batch: one duplicate, one staged (unregistered) buffer.
    res = store.batch_put(["b0", "b9"], [srcs[0], rand(77, 9)])
    assert isinstance(res[0], kvfabric.AlreadyExistsError) and res[1] is None
    outs = [host(2000) for _ in range(5)]
    got = store.batch_get(["b0", "b1", "nope", "b3", "b9"], outs[:4] + [bytearray(100)])
    assert got[0] == 1000 and got[1] == 1001 and got[3] == 1003 and got[4] == 77
    assert isinstance(got[2], kvfabric.NotFoundError)
    for i in (0, 1, 3):
        assert np.array_equal(outs[i][: 1000 + i], srcs[i])
    # Multi-part entries.
    a, b = host(10), host(20)
    a[:] = 3
    b[:] = 4
    assert store.batch_put(["mp"], [[a, b]]) == [None]
    o1, o2 = host(15), host(15)
    assert store.batch_get(["mp"], [[o1, o2]]) == [30]
    assert (o1[:10] == 3).all() and (o1[10:] == 4).all() and (o2 == 4).all()
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.batch_put(["x", "y"], [srcs[0]])


def test_batch_raw_regions(store, host, monkeypatch):
    # batch_put / batch_get of (ptr, nbytes) tuples take the facade's flat
    # path (one packed call, no Buf per key) and behave as the Buf path did:
    # per-key errors at their keys, bad input refused whole.
    from kvfabric import store as store_mod

    spy = LibSpy(store._lib)
    monkeypatch.setattr(store, "_lib", spy)
    resolve_all = store_mod._parts_all

    def no_bufs(*args):
        raise AssertionError("raw regions resolved one by one")

    monkeypatch.setattr(store_mod, "_parts_all", no_bufs)
    srcs = [host(1000 + i) for i in range(4)]
    for i, a in enumerate(srcs):
        a[:] = rand(len(a), 20 + i)
    raw = [(a.ctypes.data, a.nbytes) for a in srcs]
    assert store.batch_put([f"raw{i}" for i in range(4)], raw) == [None] * 4
    assert spy.called == ["kvfabric_batch_put_packed"]
    res = store.batch_put(["raw0", b"raw9"], raw[:2])  # str and bytes keys: key arrays
    assert isinstance(res[0], kvfabric.AlreadyExistsError) and res[1] is None
    assert spy.called[-1] == "kvfabric_batch_put"
    outs = [host(2000) for _ in range(5)]
    spy.called.clear()
    got = store.batch_get(["raw0", "raw1", "nope", "raw3", "raw9"], [(o.ctypes.data, o.nbytes) for o in outs])
    assert spy.called == ["kvfabric_batch_get_packed"]
    assert got[0] == 1000 and got[1] == 1001 and got[3] == 1003 and got[4] == 1001
    assert isinstance(got[2], kvfabric.NotFoundError) and "nope" in str(got[2])
    for i in (0, 1, 3):
        assert np.array_equal(outs[i][: 1000 + i], srcs[i])
    # Pageable host memory given raw: that key alone is NotRegistered.
    loose = np.zeros(64, np.uint8)
    res = store.batch_put(["raw-a", "raw-b"], [raw[0], (loose.ctypes.data, 64)])
    assert res[0] is None and isinstance(res[1], kvfabric.NotRegisteredError)
    # Refused whole, nothing stored: a negative size (not raw: resolved as
    # before, which refuses it), a key neither str nor bytes.
    monkeypatch.setattr(store_mod, "_parts_all", resolve_all)
    for keys, regions in ((["raw-x", "raw-y"], [raw[0], (raw[1][0], -1)]), (["raw-x", 7], raw[:2])):
        with pytest.raises(kvfabric.InvalidArgumentError):
            store.batch_put(keys, regions)
        assert store.batch_exists(["raw-x", "raw-y"]) == [False, False]
    # A tuple of int subclasses is not raw: it goes the Buf way, as before.
    assert store.batch_put(["raw-bool"], [(srcs[0].ctypes.data, True)]) == [None]
    assert store.size("raw-bool") == 1


def test_batch_raw_regions_closed(tmp_path):
    # The flat path of a closed store raises ClosedError, as the Buf path does.
    s = kvfabric.Store(sim_config(tmp_path))
    pool = np.zeros(MIB, np.uint8)
    s.register_buffer(pool)
    raw = [(pool.ctypes.data, 64), (pool.ctypes.data + 64, 64)]
    assert s.batch_put(["c0", "c1"], raw) == [None, None]
    s.close()
    for call in (lambda: s.batch_put(["c2", "c3"], raw), lambda: s.batch_get(["c0", "c1"], raw)):
        with pytest.raises(kvfabric.ClosedError):
            call()


class _FakeTensor:
    """Enough of a torch CUDA tensor for kvfabric's resolution, over host
    memory (the simulator's device pointers are process addresses)."""

    def __init__(self, arr, dev=0, contiguous=True):
        self._arr, self._dev, self._contig = arr, dev, contiguous
        self.is_cuda = True
        self.device = f"cuda:{dev}"

    def is_contiguous(self):
        return self._contig

    def numel(self):
        return self._arr.size

    def element_size(self):
        return self._arr.itemsize

    def data_ptr(self):
        return self._arr.ctypes.data

    def get_device(self):
        return self._dev


def _fake_torch(monkeypatch):
    import types

    lookups = []
    fake = types.ModuleType("torch")
    fake.Tensor = _FakeTensor
    fake._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: lookups.append(dev) or 0)
    monkeypatch.setitem(sys.modules, "torch", fake)
    return lookups


def test_batch_parts_all_matches_parts(store, host, monkeypatch):
    # The batch resolver gives what resolving each object alone gives, and
    # looks torch's current stream up once per device and batch.
    from kvfabric import store as store_mod

    lookups = _fake_torch(monkeypatch)
    a, b = host(256), host(512)
    objs = [(a.ctypes.data, 256), _FakeTensor(a), _FakeTensor(b, dev=1), _FakeTensor(a), b, bytearray(8),
            [a, b], (a.ctypes.data, True), _FakeTensor(b)]
    got = store_mod._parts_all(objs, False)
    n_batch = len(lookups)
    want = [store_mod._parts(o, False) for o in objs]
    assert [[x[:4] for x in g] for g in got] == [[x[:4] for x in w] for w in want]
    assert n_batch == 2 and len(lookups) == 2 + 4  # once per device; _parts once per tensor
    with pytest.raises(kvfabric.InvalidArgumentError, match="contiguous"):
        store_mod._parts_all([_FakeTensor(a), _FakeTensor(b, contiguous=False)], True)


def test_batch_fake_tensors_round_trip(store, host, monkeypatch):
    _fake_torch(monkeypatch)
    srcs = [host(4096) for _ in range(3)]
    for i, a in enumerate(srcs):
        a[:] = rand(4096, 40 + i)
    assert store.batch_put(["t0", "t1", "t2"], [_FakeTensor(a) for a in srcs]) == [None] * 3
    outs = [host(4096) for _ in range(3)]
    assert store.batch_get(["t0", "t1", "t2"], [_FakeTensor(o) for o in outs]) == [4096] * 3
    for a, o in zip(srcs, outs):
        assert np.array_equal(a, o)


def test_phases(store, host):
    """Store.phases() counts the batch calls and keys of each kind and the
    time in their phases since the store opened."""
    before = store.phases()
    srcs = [host(4096) for _ in range(3)]
    assert store.batch_put([f"ph{i}" for i in range(3)], srcs) == [None] * 3
    outs = [host(4096) for _ in range(3)]
    for _ in range(2):
        assert store.batch_get([f"ph{i}" for i in range(3)], outs) == [4096] * 3
    after = store.phases()
    d = {k: {n: after[k][n] - before[k][n] for n in after[k]} for k in after}
    assert (d["put"]["calls"], d["put"]["keys"]) == (1, 3)
    assert (d["get"]["calls"], d["get"]["keys"]) == (2, 6)
    assert d["put"]["meta"] > 0 and d["get"]["copy"] > 0 and d["put"]["end"] > 0
    assert set(after["put"]) == {"calls", "keys", "check", "meta", "resolve", "copy", "master", "wait", "end"}


def test_registration(store):
    pool = np.zeros(MIB, np.uint8)
    store.register_buffer(pool)
    with pytest.raises(kvfabric.AlreadyRegisteredError):
        store.register_buffer(pool.ctypes.data, MIB)
    store.unregister_buffer(pool)
    with pytest.raises(kvfabric.NotRegisteredError):
        store.unregister_buffer(pool.ctypes.data)
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.register_buffer(pool.ctypes.data)  # size missing


def test_hostname_health(store):
    assert store.hostname == "pytest-host"
    store.health()


def test_driver_and_handle_type(store, tmp_path):
    # The chosen driver and the resolved handle type are visible (issue 11):
    # the simulator permits no FABRIC handles by default, so auto gives
    # POSIX fds; a pure consumer exports nothing.
    assert store.driver == "sim"
    assert store.handle_type == "posix_fd"
    cfg = sim_config(tmp_path, enable_egm_store_pool=False, global_segment_size=0)
    with kvfabric.Store(cfg) as consumer:
        assert consumer.driver == "sim"
        assert consumer.handle_type is None


def test_put_options(store):
    store.put("pinned", b"p", pin=True, replicas=1)
    store.put_bytes("pb", b"q", preferred_segments=["nonexistent-segment"])
    assert store.get_bytes("pinned") == b"p"
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.put("neg", b"x", replicas=-1)


def test_threads(store, host):
    bufs = [host(4096) for _ in range(8)]
    errs = []

    def work(t):
        try:
            for i in range(20):
                k = f"t{t}-{i}"
                bufs[t][:] = (t + i) % 256
                store.put(k, bufs[t])
                out = bytearray(4096)
                assert store.get(k, out) == 4096 and out[0] == (t + i) % 256
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs


def test_close_semantics(cfg):
    s = kvfabric.Store(cfg)
    s.put("k", b"v")
    s.close()
    assert s.closed
    s.close()  # idempotent
    with pytest.raises(kvfabric.ClosedError):
        s.put("k", b"v")
    with pytest.raises(kvfabric.ClosedError):
        s.exists("k")
    with kvfabric.Store(cfg) as s2:
        s2.put("k", b"v")
    assert s2.closed


# ---- configuration ------------------------------------------------------------


@pytest.mark.parametrize(
    "override,key",
    [
        ({"bogus": 1}, "bogus"),
        ({"protocol": "carrier-pigeon"}, "protocol"),
        ({"driver": "tpu"}, "driver"),
        ({"handle_type": "magic"}, "handle_type"),
        ({"global_segment_size": "lots"}, "global_segment_size"),
        ({"egm_numa_nodes": "1,1"}, "egm_numa_nodes"),
        ({"egm_numa_nodes": "-1"}, "egm_numa_nodes"),
        ({"master_server_addr": "nocolon"}, "master_server_addr"),
        # The EGM rules: enable_egm_store_pool=true needs nvlink, capacity,
        # and no local buffer.
        ({"protocol": "tcp"}, "protocol"),
        ({"protocol": "rdma"}, "protocol"),
        ({"global_segment_size": 0}, "global_segment_size"),
        ({"local_buffer_size": "16MiB"}, "local_buffer_size"),
        ({"lease_ttl": "forever"}, "lease_ttl"),
        ({"put_timeout": -1}, "put_timeout"),
        ({"client_ttl": "2d"}, "client_ttl"),
        ({"master_fast_path_spin": "11ms"}, "master_fast_path_spin=11ms"),
        ({"master_fast_path_spin": "-1us"}, "master_fast_path_spin=-1us"),
        # Issue 11: a fraction of a byte, and sizes no host can hold (they
        # used to get the provider OOM-killed while planning).
        ({"global_segment_size": 67108864.5}, "global_segment_size"),
        ({"global_segment_size": "67108864.5"}, "global_segment_size"),
        ({"global_segment_size": "16000000TiB"}, "global_segment_size"),
        ({"global_segment_size": 18446744073709551615}, "global_segment_size"),
    ],
)
def test_config_errors(tmp_path, override, key):
    with pytest.raises(kvfabric.ConfigError) as ei:
        kvfabric.Store(sim_config(tmp_path, **override))
    assert key in str(ei.value)
    assert ei.value.code == errors.CONFIG
    assert isinstance(ei.value, ValueError)


def test_config_embedded_master_settings(tmp_path):
    # The embedded master's lease TTL and put timeout are config keys.
    with kvfabric.Store(sim_config(tmp_path, lease_ttl="250ms", put_timeout=3, client_ttl="2s")) as s:
        s.put("k", b"v")
        assert s.get_bytes("k") == b"v"
        s.remove("k")  # the get released its lease: not leased


def test_config_egm_off_allows_local_buffer(tmp_path):
    cfg = sim_config(tmp_path, enable_egm_store_pool=False, protocol="tcp", local_buffer_size="16MiB")
    with kvfabric.Store(cfg) as s:
        s.put("k", b"v")
        assert s.get_bytes("k") == b"v"


def test_config_from_file(tmp_path):
    p = tmp_path / "kvfabric.json"
    p.write_text(json.dumps(sim_config(tmp_path)))
    with kvfabric.Store(str(p)) as s:
        assert s.hostname == "pytest-host"
    with pytest.raises(kvfabric.ConfigError):
        kvfabric.Store(str(tmp_path / "missing.json"))
    with pytest.raises(kvfabric.ConfigError):
        kvfabric.Store(42)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(kvfabric.ConfigError):
        kvfabric.Store(str(tmp_path / "bad.json"))
    # A key given twice is an error naming it (JSON parsers keep the last).
    dup = json.dumps(sim_config(tmp_path))[:-1] + ', "global_segment_size": "1TiB"}'
    (tmp_path / "dup.json").write_text(dup)
    with pytest.raises(kvfabric.ConfigError) as ei:
        kvfabric.Store(str(tmp_path / "dup.json"))
    assert "global_segment_size" in str(ei.value) and "twice" in str(ei.value)


# ---- process-level behaviour -----------------------------------------------------


def _run(code, **env):
    e = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.path.join(PYDIR, "tests"), **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


def test_import_is_lazy():
    r = _run("import kvfabric, kvfabric.compat.mooncake, kvfabric._native as n; print(n._lib is None)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


CLOSE_RETRY = r"""
import tempfile, kvfabric
from conftest import sim_config
s = kvfabric.Store(sim_config(tempfile.mkdtemp()))
s.put("k", b"v")
try:
    s.close()
    raise SystemExit("close succeeded despite the injected fault")
except kvfabric.CleanupPendingError as e:
    print("pending:", e.code, s.cleanup_pending, "|", str(e).splitlines()[0])
assert not s.closed
try:
    s.put("k2", b"v")
except kvfabric.ClosedError as e:
    print("closed-while-pending:", e.code)
s.close()
print("closed:", s.closed)
s.close()
"""


def test_close_retry_with_injected_teardown_fault():
    faults = json.dumps([{"method": "MemUnmap", "nth": 1, "code": 999}])
    r = _run(CLOSE_RETRY, KVFABRIC_TEST_FAULTS=faults)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"pending: {errors.CLEANUP_PENDING} True")
    assert lines[1] == f"closed-while-pending: {errors.CLOSED}"
    assert lines[2] == "closed: True"


def test_header_codes_match_python():
    with open(os.path.join(header_dir(), "kvfabric.h")) as f:
        hdr = f.read()
    codes = {n.removeprefix("ERR_"): v for n, v in re.findall(r"#define KVFABRIC_(OK|ERR_[A-Z_]+)\s+\(?(-?\d+)\)?", hdr)}
    assert len(codes) >= 18
    for name, value in codes.items():
        assert getattr(errors, name) == int(value), name
        assert errors.error_for(int(value), "m").code == int(value)


C_CHECK = r"""
#include <stdio.h>
#include <string.h>
#include "kvfabric.h"
int main(int argc, char **argv) {
    int64_t h = 0; char err[256];
    if (kvfabric_abi_version() != KVFABRIC_ABI_VERSION) return 10;
    if (strcmp(kvfabric_version(), argv[2]) != 0) { puts(kvfabric_version()); return 28; }
    if (kvfabric_open("{\"bogus\":1}", 11, &h, err, sizeof err) != KVFABRIC_ERR_CONFIG) return 11;
    if (!strstr(err, "bogus")) return 12;
    if (kvfabric_open(argv[1], strlen(argv[1]), &h, err, sizeof err) != KVFABRIC_OK) { puts(err); return 13; }
    const char *keys[2] = {"a", "b"}; size_t klen[2] = {1, 1};
    static char src[8] = "abcdefg", dst[8];
    uint64_t ptrs[2] = {(uint64_t)(uintptr_t)src, (uint64_t)(uintptr_t)(src + 4)}, lens[2] = {4, 4};
    int32_t st[2];
    /* host memory from the staged path: put_bytes, then get_bytes */
    if (kvfabric_put_bytes(h, "a", 1, src, 8, 0, 0, NULL, 0, 0) != 0) return 14;
    uint64_t n = 0;
    if (kvfabric_get_bytes(h, "a", 1, dst, 4, &n) != KVFABRIC_ERR_BUFFER_TOO_SMALL || n != 8) return 15;
    if (kvfabric_get_bytes(h, "a", 1, dst, 8, &n) != 0 || memcmp(src, dst, 8)) return 16;
    n = 0; /* the size alone: nothing is copied into a buffer of 0 bytes */
    if (kvfabric_get_bytes(h, "a", 1, NULL, 0, &n) != KVFABRIC_ERR_BUFFER_TOO_SMALL || n != 8) return 24;
    /* a NULL key with a length is a bad argument, not a panic */
    if (kvfabric_exists(h, NULL, 3) != KVFABRIC_ERR_INVALID_ARGUMENT) return 25;
    if (kvfabric_get_bytes(h, NULL, 3, dst, 8, &n) != KVFABRIC_ERR_INVALID_ARGUMENT) return 26;
    if (kvfabric_put(h, NULL, 3, ptrs, lens, 1, 0, 0, 0, NULL, 0, 0) != KVFABRIC_ERR_INVALID_ARGUMENT) return 27;
    int32_t ex[2];
    if (kvfabric_batch_exists(h, 2, keys, klen, 0, ex) != 0 || ex[0] != 1 || ex[1] != 0) return 17;
    /* unregistered (pageable) host pointers in a batch: per-key statuses,
       refused before the master is asked (so "a" is not ALREADY_EXISTS) */
    if (kvfabric_batch_put(h, 2, keys, klen, ptrs, lens, NULL, 0, 0, 0, NULL, 0, 0, st) != 0) return 18;
    if (st[0] != KVFABRIC_ERR_NOT_REGISTERED || st[1] != KVFABRIC_ERR_NOT_REGISTERED) return 19;
    /* the same keys packed ("a", NUL, "b"); three keys given as two are
       refused whole, every status set */
    if (kvfabric_batch_put_packed(h, 2, "a\0b", 3, ptrs, lens, NULL, 0, 0, 0, NULL, 0, 0, st) != 0) return 29;
    if (st[0] != KVFABRIC_ERR_NOT_REGISTERED || st[1] != KVFABRIC_ERR_NOT_REGISTERED) return 30;
    uint64_t nr[2];
    if (kvfabric_batch_get_packed(h, 2, "a\0b\0c", 5, ptrs, lens, NULL, 0, nr, st) != KVFABRIC_ERR_INVALID_ARGUMENT) return 31;
    if (st[0] != KVFABRIC_ERR_INVALID_ARGUMENT || st[1] != KVFABRIC_ERR_INVALID_ARGUMENT) return 32;
    char msg[8];
    size_t full = kvfabric_last_error(h, msg, sizeof msg);
    if (full == 0 || strlen(msg) != (full < 7 ? full : 7)) return 20;
    if (kvfabric_exists(h, "zz", 2) != 0) return 21;
    if (kvfabric_close(h) != 0) return 22;
    if (kvfabric_close(h) != KVFABRIC_ERR_INVALID_HANDLE) return 23;
    puts("c-ok");
    return 0;
}
"""


def test_c_header_compiles_and_links(tmp_path):
    import shutil

    from kvfabric import _native

    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    lib = os.path.abspath(_native.library_path())
    (tmp_path / "check.c").write_text(C_CHECK)
    exe = tmp_path / "check"
    subprocess.run(
        [cc, "-std=c99", "-Wall", "-Werror", "-I", header_dir(), str(tmp_path / "check.c"),
         lib, f"-Wl,-rpath,{os.path.dirname(lib)}", "-o", str(exe)],
        check=True,
    )
    cfg = json.dumps(sim_config(tmp_path))
    r = subprocess.run([str(exe), cfg, kvfabric.__version__], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "c-ok", (r.returncode, r.stdout, r.stderr)


def test_versions_agree():
    # One version (VERSION at the repository root) for the package, the C
    # library and the binary.
    from conftest import kvfabric_binary
    from kvfabric import _native

    assert re.fullmatch(r"\d+\.\d+\.\d+(rc\d+)?", kvfabric.__version__), kvfabric.__version__
    assert _native.library_version() == kvfabric.__version__
    exe = kvfabric_binary()
    if exe is None:
        pytest.skip("needs the kvfabric binary: `make python-test` builds it, or set KVFABRIC_BIN")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"kvfabric {kvfabric.__version__}", (r.stdout, r.stderr)


def test_other_release_of_library_warns(monkeypatch):
    # The C ABI version decides compatibility (an ImportError when it
    # differs); a library of another release of the same ABI loads with a
    # RuntimeWarning naming both versions, and one that predates
    # kvfabric_version is named as older.
    from kvfabric import _native

    class Fn:
        def __init__(self, v):
            self.v = v

        def __call__(self):
            return self.v

    class Dll:
        pass

    old = Dll()
    other = Dll()
    other.kvfabric_version = Fn(b"9.9.9")
    same = Dll()
    same.kvfabric_version = Fn(kvfabric.__version__.encode())
    monkeypatch.delenv(_native.ENV_LIB, raising=False)
    with pytest.warns(RuntimeWarning, match=r"/x\.so is kvfabric 9\.9\.9, this Python package is " + re.escape(kvfabric.__version__)):
        _native._check_release(other, "/x.so")
    with pytest.warns(RuntimeWarning, match="older than 0.1.0"):
        _native._check_release(old, "/x.so")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _native._check_release(same, "/x.so")
