"""Direct access (issue 15): Store.acquire -> Views, Views.gather and
Store.gather, on the simulator (device addresses are process addresses,
so the bytes behind a view are read with ctypes, and registered numpy
arrays stand in for device memory: destinations, index arrays, counters).
"""

import ctypes
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import kvfabric
from kvfabric import _native, errors

from conftest import header_dir, sim_config
from test_store import CAI, _run, rand

ROW = 48


def put_objects(store, rows, seed=0):
    """Puts obj{i} with rows[i] rows of ROW random bytes (plus a few
    trailing bytes that are not a row); returns keys and the values read
    back with full gets."""
    rng = np.random.default_rng(seed)
    keys, vals = [], []
    for i, n in enumerate(rows):
        k = f"obj{i}"
        store.put(k, rand(n * ROW + int(rng.integers(0, ROW)), seed + i))
        keys.append(k)
        vals.append(store.get_bytes(k))  # the reference is a full get
    return keys, vals


def selected(vals, sel):
    """The expected gather: rows sel[i] of vals[i] in order, a zero row
    for an index out of range."""
    out = b""
    for v, rs in zip(vals, sel):
        for r in rs:
            out += v[r * ROW:(r + 1) * ROW] if 0 <= r < len(v) // ROW else bytes(ROW)
    return out


def poisoned(a):
    a[:] = 0xEE
    return a


def test_acquire_and_read_through_the_view(store):
    keys, vals = put_objects(store, [10, 3])
    views = store.acquire(["obj0", "missing", b"obj1"])
    try:
        assert len(views) == 3 and [v.key for v in views] == ["obj0", "missing", b"obj1"]
        a, missing, b = views
        for v, want in ((a, vals[0]), (b, vals[1])):
            assert v.error is None and v.size == len(want) and v.ptr != 0
            assert ctypes.string_at(v.ptr, v.size) == want
            cai = v.__cuda_array_interface__
            assert cai == {"shape": (len(want),), "typestr": "|u1", "data": (v.ptr, True), "version": 3,
                           "strides": None}
            # What a CAI consumer sees: the object's bytes, in place.
            arr = np.ctypeslib.as_array((ctypes.c_uint8 * cai["shape"][0]).from_address(cai["data"][0]))
            assert arr.tobytes() == want
        assert isinstance(missing.error, kvfabric.NotFoundError) and "missing" in str(missing.error)
        assert missing.size == 0 and missing.ptr == 0
        assert not hasattr(missing, "__cuda_array_interface__")
        with pytest.raises(AttributeError, match="view of 'missing' failed"):
            missing.__cuda_array_interface__
        views.check()
        assert "3 keys" in repr(views) and "obj0" in repr(a)
    finally:
        views.release()


def test_context_manager_releases(store):
    store.put("k", b"held in place")
    with store.acquire(["k"]) as views:
        assert not views.released
        with pytest.raises(kvfabric.HasLeaseError):
            store.remove("k")  # a held object refuses a plain remove
        views.check()
    assert views.released
    store.remove("k")  # released: the plain remove succeeds
    with pytest.raises(kvfabric.InvalidHandleError, match="views released"):
        views.check()
    with pytest.raises(kvfabric.InvalidHandleError):
        views.gather([[0]], 1, bytearray(1))
    assert not hasattr(views[0], "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="released"):
        views[0].__cuda_array_interface__
    views.release()  # idempotent


def test_release_idempotent_and_empty(store):
    store.put("k", b"v")
    views = store.acquire(["k"])
    views.release()
    views.release()
    store.remove("k")
    with store.acquire([]) as empty:
        assert len(empty) == 0
        empty.check()


@pytest.mark.parametrize("one_shot", [False, True])
def test_gather_host_indices(store, host, one_shot):
    keys, vals = put_objects(store, [40, 7, 100])
    cases = {
        "uniform lists": [[0, 39, 5, 5], [6, 0, 1, 2], [99, 50, 0, 1]],
        "ragged lists": [[3], [], [1, 2, 98, 7, 7]],
        "numpy (n, k)": np.array([[1, 2], [6, 6], [0, 99]], dtype=np.int64),
        "numpy uint32": np.array([[39], [0], [98]], dtype=np.uint32),
        "tuples": ((0,), (1,), (2,)),
    }
    out = host(32 * ROW)
    with store.acquire(keys) as views:
        for name, index in cases.items():
            sel = [list(map(int, r)) for r in index]
            want = selected(vals, sel)
            poisoned(out)
            if one_shot:
                got = store.gather(keys, index, ROW, out)
            else:
                got = views.gather(index, ROW, out, stream=0)
            assert got is None, name
            assert out[: len(want)].tobytes() == want, name
            assert (out[len(want):] == 0xEE).all(), name
        views.check()


@pytest.mark.parametrize("one_shot", [False, True])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_gather_device_indices(store, host, dtype, one_shot):
    # The index lives in "device" memory (a registered array behind a
    # __cuda_array_interface__), as a GPU top-k leaves it; out-of-range
    # rows (-1; 7 for a 7-row object; 1000) are zero-filled and counted.
    keys, vals = put_objects(store, [40, 7, 100], seed=3)
    sel = [[0, 39, -1, 2], [6, 7, 0, 3], [99, 1000, 4, 0]]
    isz = np.dtype(dtype).itemsize
    idx = host(12 * isz).view(dtype).reshape(3, 4)
    idx[:] = sel
    cnt = host(4).view(np.uint32)
    cnt[:] = 0
    out = poisoned(host(32 * ROW))
    want = selected(vals, sel)
    if one_shot:
        got = store.gather(keys, CAI(idx), ROW, out, counter=CAI(cnt))
    else:
        with store.acquire(keys) as views:
            got = views.gather(CAI(idx), ROW, out, counter=(cnt.ctypes.data, 4))
    assert got is None  # no torch: the count went to the counter given
    assert out[: len(want)].tobytes() == want
    assert (out[len(want):] == 0xEE).all()
    assert int(cnt[0]) == 3
    # Without a counter the rows are still zero-filled, just not counted.
    poisoned(out)
    assert store.gather(keys, CAI(idx), ROW, out) is None
    assert out[: len(want)].tobytes() == want


def test_gather_errors(store, host):
    keys, vals = put_objects(store, [4, 2])
    out = poisoned(host(1024))
    idx = host(16).view(np.int32).reshape(2, 2)
    idx[:] = 0
    with store.acquire(keys) as views, store.acquire(["obj0", "nope"]) as partial:
        for call, exc, what in [
            (lambda: views.gather([[0], [-1]], ROW, out), kvfabric.InvalidArgumentError, r"index\[1\]\[0\] = -1 is negative"),
            (lambda: views.gather(np.array([[0, 1], [1, -2]]), ROW, out), ValueError, r"index\[1\]\[1\] = -2"),
            (lambda: views.gather([[0], [2]], ROW, out), kvfabric.InvalidArgumentError, r"rows.Host\[1\]\[0\] = 2: key \"obj1\""),
            (lambda: views.gather([[0]], ROW, out), kvfabric.InvalidArgumentError, "1 row lists for 2 keys"),
            (lambda: views.gather([[0], [1.5]], ROW, out), kvfabric.InvalidArgumentError, r"index\[1\]\[0\] = 1.5 is not an integer"),
            (lambda: views.gather(7, ROW, out), kvfabric.InvalidArgumentError, "index must be"),
            (lambda: views.gather([[0], [0]], 0, out), kvfabric.InvalidArgumentError, "row_bytes=0"),
            (lambda: views.gather([[0], [0]], ROW, out[:ROW]), kvfabric.BufferTooSmallError, "need 96 bytes"),
            (lambda: views.gather([[0], [0]], ROW, np.zeros(1024, np.uint8)), kvfabric.NotRegisteredError, "gather destination"),
            (lambda: views.gather([[0], [0]], ROW, [out]), kvfabric.InvalidArgumentError, "one buffer"),
            (lambda: views.gather([[0], [0]], ROW, out, counter=(idx.ctypes.data, 4)), kvfabric.InvalidArgumentError, "counter is for CUDA"),
            (lambda: views.gather(CAI(idx.view(np.float32)), ROW, out), kvfabric.InvalidArgumentError, "int32 or int64"),
            (lambda: views.gather(CAI(idx[:1]), ROW, out), kvfabric.InvalidArgumentError, r"shape \(2, k\)"),
            (lambda: views.gather(CAI(idx), ROW, out, counter=(idx.ctypes.data + 1, 4)), kvfabric.InvalidArgumentError, "4-byte aligned"),
            (lambda: partial.gather([[0], [0]], ROW, out), kvfabric.NotFoundError, '"nope"'),
            (lambda: store.gather(["obj0", "nope"], [[0], [0]], ROW, out), kvfabric.NotFoundError, '"nope"'),
            (lambda: store.gather(keys, [[0], [5]], ROW, out), kvfabric.InvalidArgumentError, r"rows.Host\[1\]\[0\] = 5"),
            (lambda: store.gather(keys, [[0], [-5]], ROW, out), ValueError, "negative"),
        ]:
            with pytest.raises(exc, match=what):
                call()
            assert (out == 0xEE).all(), what  # nothing was copied
        views.check()
    assert partial[1].error is not None and partial[0].error is None


def test_views_after_store_close(tmp_path):
    s = kvfabric.Store(sim_config(tmp_path, lease_ttl="1s"))
    s.put("k", b"value")
    views = s.acquire(["k"])
    s.close()
    assert views.released
    with pytest.raises(kvfabric.ClosedError):  # InvalidHandleError is one
        views.check()
    assert not hasattr(views[0], "__cuda_array_interface__")
    views.release()  # nothing left to release: a no-op
    with views:  # leaving the block releases again: still a no-op
        pass
    with pytest.raises(kvfabric.ClosedError):
        s.acquire(["k"])
    with pytest.raises(kvfabric.ClosedError):
        s.gather(["k"], [[0]], 1, bytearray(1))


VIEWS_FAILED_CLOSE = r"""
import tempfile, kvfabric
from conftest import sim_config
s = kvfabric.Store(sim_config(tempfile.mkdtemp()))
s.put("k", b"v")
views = s.acquire(["k"])
try:
    s.close()
    raise SystemExit("close succeeded despite the injected fault")
except kvfabric.CleanupPendingError:
    pass
print("released:", views.released)
try:
    views.check()
except kvfabric.InvalidHandleError as e:
    print("check:", e.code)
try:
    s.acquire(["k"])
except kvfabric.ClosedError as e:
    print("acquire:", e.code)
s.close()
print("closed:", s.closed)
"""


def test_views_released_by_a_close_that_fails():
    # The native close frees the views handles even when teardown fails
    # part-way; the Python Views say so.
    r = _run(VIEWS_FAILED_CLOSE, KVFABRIC_TEST_FAULTS=json.dumps([{"method": "MemUnmap", "nth": 1, "code": 999}]))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["released: True", f"check: {errors.INVALID_HANDLE}",
                                     f"acquire: {errors.CLOSED}", "closed: True"]


def _torch_importable():
    import importlib.util

    return importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(_torch_importable(), reason="torch is importable here (View.tensor runs on the GPU machine)")
def test_tensor_needs_torch(store):
    store.put("k", b"v")
    with store.acquire(["k"]) as views:
        with pytest.raises(ImportError, match="needs torch"):
            views[0].tensor()


def test_library_without_views():
    # A library of the same ABI from before views: the call says what is
    # missing instead of failing to load.
    with pytest.raises(NotImplementedError, match="kvfabric_no_such_call"):
        _native.fn("kvfabric_no_such_call")


C_VIEWS = r"""
#include <stdio.h>
#include <string.h>
#include "kvfabric.h"
static char obj[100], out[64];
int main(int argc, char **argv) {
    int64_t h = 0, v = 0; char err[256];
    if (kvfabric_open(argv[1], strlen(argv[1]), &h, err, sizeof err) != 0) { puts(err); return 10; }
    for (int i = 0; i < 100; i++) obj[i] = (char)i;
    if (kvfabric_put_bytes(h, "k", 1, obj, sizeof obj, 0, 0, NULL, 0, 0) != 0) return 11;
    if (kvfabric_register_buffer(h, (uintptr_t)out, sizeof out) != 0) return 12;
    const char *keys[2] = {"k", "x"}; size_t klen[2] = {1, 1};
    uint64_t addrs[2], sizes[2]; int32_t st[2];
    if (kvfabric_acquire(h, 2, keys, klen, &v, addrs, sizes, st) != 0 || v <= 0) return 13;
    if (st[0] != 0 || st[1] != KVFABRIC_ERR_NOT_FOUND || sizes[0] != 100 || addrs[1] != 0) return 14;
    /* the simulator's device addresses are process addresses */
    if (memcmp((const void *)(uintptr_t)addrs[0], obj, 100) != 0) return 15;
    if (kvfabric_views_check(h, v) != 0) return 16;
    uint64_t rows[2] = {9, 0}, counts[1] = {2};
    if (kvfabric_gather(h, 1, keys, klen, rows, counts, 0, 0, 0, 0, 10, (uint64_t)(uintptr_t)out, sizeof out, 0) != 0) return 17;
    if (memcmp(out, obj + 90, 10) != 0 || memcmp(out + 10, obj, 10) != 0) return 18;
    /* the views hold "x" failed: gathering from them fails that key */
    uint64_t counts2[2] = {2, 0};
    if (kvfabric_views_gather(h, v, rows, counts2, 0, 0, 0, 0, 10, (uint64_t)(uintptr_t)out, sizeof out, 0) != KVFABRIC_ERR_NOT_FOUND) return 19;
    if (kvfabric_views_release(h, v) != 0) return 20;
    if (kvfabric_views_check(h, v) != KVFABRIC_ERR_INVALID_HANDLE) return 21;
    if (kvfabric_views_release(h, v) != KVFABRIC_ERR_INVALID_HANDLE) return 22;
    if (kvfabric_acquire(h, 1, keys, klen, NULL, NULL, NULL, NULL) != KVFABRIC_ERR_INVALID_ARGUMENT) return 23;
    if (kvfabric_unregister_buffer(h, (uintptr_t)out) != 0) return 24;
    if (kvfabric_close(h) != 0) return 25;
    puts("c-views-ok");
    return 0;
}
"""


def test_c_header_views(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    lib = os.path.abspath(_native.library_path())
    (tmp_path / "views.c").write_text(C_VIEWS)
    exe = tmp_path / "views"
    subprocess.run(
        [cc, "-std=c99", "-Wall", "-Werror", "-I", header_dir(), str(tmp_path / "views.c"),
         lib, f"-Wl,-rpath,{os.path.dirname(lib)}", "-o", str(exe)],
        check=True,
    )
    r = subprocess.run([str(exe), json.dumps(sim_config(tmp_path))], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "c-views-ok", (r.returncode, r.stdout, r.stderr)


# ---- the torch code paths, against a stand-in for torch ---------------------
#
# No torch here: a minimal fake module (CUDA tensors backed by registered
# arrays, a current stream, ExternalStream, zeros) in sys.modules drives the
# branches that real torch takes on the GPU machine — a CUDA index tensor
# with the counter allocated zeroed on the gather's stream, the default
# stream, device checks, the context manager's synchronize, View.tensor().


class FakeTensor:
    def __init__(self, arr, device=0):
        self.arr = arr
        self.is_cuda = True
        self.dtype = {np.dtype(np.int32): "int32", np.dtype(np.int64): "int64", np.dtype(np.uint8): "uint8",
                      np.dtype(np.float32): "float32"}[arr.dtype]
        self.shape = arr.shape
        self.device = FakeTorch.device("cuda", device)

    def is_contiguous(self):
        return self.arr.flags.c_contiguous

    def data_ptr(self):
        return self.arr.ctypes.data

    def element_size(self):
        return self.arr.itemsize

    def numel(self):
        return self.arr.size

    def get_device(self):
        return self.device.index


class FakeStream:
    def __init__(self, torch, raw):
        self.torch, self.cuda_stream = torch, raw

    def synchronize(self):
        self.torch.synced.append(self.cuda_stream)


class FakeTorch:
    """The slice of torch's API that kvfabric's views code uses."""

    Tensor = FakeTensor
    int32, int64, float32 = "int32", "int64", "float32"

    @staticmethod
    def device(kind, index):
        import types

        return types.SimpleNamespace(type=kind, index=index)

    def __init__(self, take, current=0x51):
        import types

        self.take, self.current = take, current
        self.synced, self.zeros_on = [], []
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: self.current)
        fake = self

        class Cuda:
            @staticmethod
            def is_initialized():
                return True

            @staticmethod
            def current_stream(device=None):
                return FakeStream(fake, fake.current)

            @staticmethod
            def ExternalStream(raw, device=None):
                return FakeStream(fake, raw)

            @staticmethod
            def stream(s):
                import contextlib

                @contextlib.contextmanager
                def cm():
                    old, fake.current = fake.current, s.cuda_stream
                    try:
                        yield
                    finally:
                        fake.current = old

                return cm()

        self.cuda = Cuda

    def zeros(self, n, dtype, device):
        a = self.take(4 * n).view(np.int32)
        a[:] = 0
        self.zeros_on.append(self.current)
        return FakeTensor(a, device.index)

    def as_tensor(self, obj, device):
        cai = obj.__cuda_array_interface__
        if cai["data"][1]:  # as torch does (tensor_from_cuda_array_interface)
            raise TypeError("the read only flag is not supported, should always be False")
        a = np.ctypeslib.as_array((ctypes.c_uint8 * cai["shape"][0]).from_address(cai["data"][0]))
        return FakeTensor(a, device.index)


@pytest.fixture
def fake_torch(monkeypatch, host):
    """The fake torch in sys.modules; its streams (the simulator knows only
    stream 0) are recorded in .passed as the gathers pass them, and
    replaced by 0 on the way to the library."""
    import sys

    t = FakeTorch(host)
    t.passed = []
    monkeypatch.setitem(sys.modules, "torch", t)
    real = _native.fn

    def fn(name):
        f = real(name)
        if name not in ("kvfabric_views_gather", "kvfabric_gather"):
            return f

        def record(*args):
            t.passed.append(args[-1])
            return f(*args[:-1], 0)

        return record

    monkeypatch.setattr(_native, "fn", fn)
    return t


def test_torch_cuda_index(store, host, fake_torch):
    keys, vals = put_objects(store, [40, 7, 100], seed=5)
    sel = [[0, 39, -1, 2], [6, 7, 0, 3], [99, 1000, 4, 0]]
    idx = host(48).view(np.int32).reshape(3, 4)
    idx[:] = sel
    want = selected(vals, sel)
    out = poisoned(host(32 * ROW))
    with store.acquire(keys) as views:
        # Default stream: torch's current one; the counter is zeroed there.
        bad = views.gather(FakeTensor(idx), ROW, out)
        assert out[: len(want)].tobytes() == want
        assert isinstance(bad, FakeTensor) and bad.arr.tolist() == [3]
        assert fake_torch.zeros_on == [0x51] and fake_torch.passed == [0x51]
        # An explicit stream: the counter is zeroed on that stream instead.
        bad = views.gather(FakeTensor(idx), ROW, poisoned(out), stream=0x77)
        assert bad.arr.tolist() == [3] and fake_torch.zeros_on[-1] == 0x77 and fake_torch.passed[-1] == 0x77
        assert fake_torch.current == 0x51
        # Host indices and a plain destination: torch's current stream too.
        views.gather([[0], [0], [0]], ROW, poisoned(out))
        assert fake_torch.passed[-1] == 0x51
        # A counter of the caller's: nothing allocated, nothing returned.
        cnt = host(4).view(np.uint32)
        cnt[:] = 0
        assert views.gather(FakeTensor(idx), ROW, poisoned(out), counter=(cnt.ctypes.data, 4)) is None
        assert int(cnt[0]) == 3 and len(fake_torch.zeros_on) == 2
        # counter=False: nothing allocated or counted; the rows are still zeroed.
        o = poisoned(out)
        assert views.gather(FakeTensor(idx), ROW, o, counter=False) is None
        assert len(fake_torch.zeros_on) == 2 and int(cnt[0]) == 3
        for index, what in [
            (FakeTensor(idx.view(np.float32)), "int32 or int64"),
            (FakeTensor(idx[:, ::2]), "contiguous"),
            (FakeTensor(idx[:2]), r"shape \(3, k\)"),
            (FakeTensor(idx, device=1), "cuda:1, the store on cuda:0"),
        ]:
            with pytest.raises(kvfabric.InvalidArgumentError, match=what):
                views.gather(index, ROW, out)
        with pytest.raises(kvfabric.InvalidArgumentError, match="out is on cuda:2"):
            views.gather(FakeTensor(idx), ROW, FakeTensor(out, device=2))
        # One-shot, into a CUDA tensor.
        fake_torch.current = 0x99  # the out tensor's current stream
        bad = store.gather(keys, FakeTensor(idx), ROW, FakeTensor(poisoned(out)))
        assert bad.arr.tolist() == [3] and out[: len(want)].tobytes() == want
        assert fake_torch.passed[-1] == 0x99 and fake_torch.zeros_on[-1] == 0x99
        fake_torch.current = 0x51
        assert fake_torch.synced == []
    # Leaving the block synchronized torch's current stream, then released.
    assert fake_torch.synced == [0x51] and views.released


def test_torch_view_tensor(store, fake_torch):
    store.put("k", b"tensor bytes")
    with store.acquire(["k", "missing"]) as views:
        t = views[0].tensor()
        assert t.data_ptr() == views[0].ptr and t.arr.tobytes() == b"tensor bytes"
        with pytest.raises(kvfabric.NotFoundError, match="missing"):
            views[1].tensor()
    with pytest.raises(kvfabric.InvalidHandleError, match="released"):
        views[0].tensor()
