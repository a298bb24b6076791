"""kvfabric.Store: a KV-cache store for torch/CUDA arrays over the C ABI."""

from __future__ import annotations

import ctypes
import json
import os
import threading
from array import array
from ctypes import byref, c_int32, c_int64, c_size_t, c_uint32, c_uint64
from typing import Any, Iterable, Sequence

from . import _exit, _native
from . import errors as _errors
from . import _buffers
from ._buffers import Buf, resolve
from ._views import Views, _prepare
from .errors import (
    OK,
    BUFFER_TOO_SMALL,
    INVALID_ARGUMENT,
    ClosedError,
    CleanupPendingError,
    ConfigError,
    InvalidArgumentError,
    KvfabricError,
    error_for,
)

PUT_PIN = 0x1
PUT_SOFT_PIN = 0x2
#: Replace an existing value (readers holding the old one finish reading it).
PUT_UPSERT = 0x4
#: With PUT_UPSERT: keep the replaced value's soft pin and its expiry.
PUT_KEEP_SOFT_PIN = 0x8

#: A raw-buffer batch put of one buffer per key (_batch_put_flat) of at
#: least this many keys goes as a put stream, in pieces of
#: STREAM_FIRST_PIECE keys doubling up to STREAM_MAX_PIECE, each converted
#: while the pieces before it copy. On the H200 a stream of 4096 keys paid
#: (16 KiB puts 0.39-0.40 -> 0.46 of the ceiling, 64 KiB 0.77-0.79 ->
#: 0.78-0.83), one of 1024 or 256 did not (256 KiB 0.90 -> 0.87-0.90, 1 MiB
#: 0.92-0.93 -> 0.90-0.92): there the conversion it hides is shorter than
#: what starting the stream costs (docs/perf/logs-2026-12-04-s17/runH).
#: Multi-buffer puts never stream: for vLLM's layouts (128-256 keys of 56-64
#: buffers) the stream was level or lower (docs/perf/logs-2026-12-04-s18/runJ).
STREAM_MIN_KEYS = 2048
STREAM_FIRST_PIECE = 64
STREAM_MAX_PIECE = 1024


def _codes(st: array) -> list[int]:
    """A batch call's statuses (an array of int32) as a list: [OK] * n when
    every one is OK, which one compare of their bytes tells (tolist makes n
    ints: 13–24 µs for 4096)."""
    n = len(st)
    return [OK] * n if st.tobytes() == bytes(st.itemsize * n) else st.tolist()


def _view(ctype, a: array) -> ctypes.Array:
    """A ctypes array of ctype over a's items (a kept alive by it)."""
    if not a:
        return (ctype * 0)()
    return (ctype * len(a)).from_buffer(a)


def all_ok(codes: list[int]) -> bool:
    """Whether every status of a batch is OK: list.count, whose C loop
    finds the one cached int 0 by identity (2–3 µs for 4096 codes against
    20–35 µs for any())."""
    return codes.count(OK) == len(codes)


def _ttl(soft_pin_ttl_ms, flags: int) -> int:
    """Validates a soft pin TTL in ms (0 or None: none)."""
    ttl = int(soft_pin_ttl_ms or 0)
    if ttl < 0 or ttl >= 1 << 63:
        raise InvalidArgumentError(f"kvfabric: soft_pin_ttl_ms={soft_pin_ttl_ms}: want 0 <= ttl < 2**63")
    if ttl and not flags & PUT_SOFT_PIN:
        raise InvalidArgumentError(f"kvfabric: soft_pin_ttl_ms={soft_pin_ttl_ms} without a soft pin")
    return ttl


def _put_flags(pin: bool, soft_pin: bool, upsert: bool = False) -> int:
    return (PUT_PIN if pin else 0) | (PUT_SOFT_PIN if soft_pin else 0) | (PUT_UPSERT if upsert else 0)

_STATUS_NAMES = {
    getattr(_errors, n): n
    for n in (
        "INTERNAL NO_SPACE INVALID_ARGUMENT NOT_FOUND ALREADY_EXISTS HAS_LEASE TRANSFER RPC CONFIG "
        "CLOSED CLEANUP_PENDING BUFFER_TOO_SMALL NOT_REGISTERED ALREADY_REGISTERED LEASE_EXPIRED "
        "INVALID_HANDLE PANIC BUFFER_IN_USE PERMISSION"
    ).split()
}


def status_name(code: int) -> str:
    """The kvfabric.h name of a status code."""
    if code == OK:
        return "OK"
    return _STATUS_NAMES.get(code, f"status {code}")


def _config_json(config) -> bytes:
    if isinstance(config, dict):
        try:
            return json.dumps(config).encode()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"kvfabric: config is not JSON-serializable: {e}") from None
    if isinstance(config, (str, os.PathLike)):
        s = os.fspath(config)
        if s.lstrip().startswith("{"):
            return s.encode()
        try:
            with open(s, "rb") as f:
                return f.read()
        except OSError as e:
            raise ConfigError(f"kvfabric: read config {s!r}: {e}") from None
    raise ConfigError(f"kvfabric: config must be a dict or the path of a JSON file, not {type(config).__name__}")


def _device_of(js: bytes) -> int:
    """The CUDA device ordinal of a configuration the Go side accepted
    (config key device, default 0)."""
    try:
        return int(json.loads(js).get("device", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _key(k) -> bytes:
    if isinstance(k, bytes):
        return k
    if isinstance(k, str):
        return k.encode()
    raise InvalidArgumentError(f"kvfabric: key must be str or bytes, not {type(k).__name__}")


def _keys_arg(keys: list):
    """The key arrays of a batch call (char* array, size_t array, keep —
    kept alive by the caller until the call returns) for str or bytes keys:
    str keys that are all ASCII by one join and one encode, no pass per key
    in Python (for 256 keys of the facade's batch_is_exist the per-key
    encode and ctypes arrays were ~0.5 µs a key, 6x the library call)."""
    if keys and type(keys[0]) is str:
        try:
            j = "".join(keys)
        except TypeError:  # not all str: _key says which
            j = None
        if j is not None and j.isascii():
            return _native.packed_joined(j.encode("ascii"), array(_native.U64, map(len, keys)))
    return _native.packed_keys([_key(k) for k in keys])


def _stream_handle(s) -> int | None:
    if s is None:
        return None
    if isinstance(s, int):
        return s
    for attr in ("cuda_stream", "ptr", "handle"):  # torch, cupy, others
        v = getattr(s, attr, None)
        if isinstance(v, int):
            return v
    raise InvalidArgumentError(f"kvfabric: cannot use {type(s).__name__} as a CUDA stream")


def _parts(obj, writable: bool) -> list[Buf]:
    """obj as a list of regions: a list of buffers is a scatter/gather list."""
    if type(obj) is tuple and len(obj) == 2:  # (ptr, nbytes), the common case, without resolve's checks
        p, n = obj
        if type(p) is int and type(n) is int and p >= 0 and n >= 0:
            return [Buf(p, n, None, None, None)]
    if isinstance(obj, list):
        if not obj:
            raise InvalidArgumentError("kvfabric: empty list of buffers")
        return [resolve(o, writable) for o in obj]
    return [resolve(obj, writable)]


def _raw_regions(objs: Sequence) -> tuple[list[int], list[int]] | None:
    """(pointers, sizes) when every obj is a (ptr, nbytes) tuple of plain
    non-negative ints — one region each, used as given, never staged — else
    None."""
    ptrs, sizes = [], []
    for o in objs:
        if type(o) is not tuple or len(o) != 2:
            return None
        p, n = o
        if type(p) is not int or type(n) is not int or p < 0 or n < 0:
            return None
        ptrs.append(p)
        sizes.append(n)
    return ptrs, sizes


def _parts_all(objs: Sequence, writable: bool) -> list[list[Buf]]:
    """[_parts(o, writable) for o in objs], with the two kinds a large batch
    is usually made of resolved inline: (ptr, nbytes) tuples of plain ints,
    and contiguous CUDA tensors of torch, whose current stream is looked up
    once per device and batch (nothing runs between the lookups that could
    change it). Every other object, and a tuple or tensor that is not of
    that kind, goes through _parts unchanged."""
    torch = _buffers._torch()
    tensor = torch.Tensor if torch is not None else None
    streams: dict[int, int] = {}
    out = []
    for o in objs:
        if type(o) is tuple and len(o) == 2:
            p, n = o
            if type(p) is int and type(n) is int and p >= 0 and n >= 0:
                out.append([Buf(p, n, None, None, None)])
                continue
        elif tensor is not None and type(o) is tensor and o.is_cuda and o.is_contiguous():
            dev = o.get_device()
            st = streams.get(dev)
            if st is None:
                st = streams[dev] = _buffers._current_stream(torch, o)
            out.append([Buf(int(o.data_ptr()), o.numel() * o.element_size(), True, st, o)])
            continue
        out.append(_parts(o, writable))
    return out


class Store:
    """One kvfabric client (a consumer and, when configured, a provider).

    ``config`` is a dict with the keys of kvfabric's one configuration schema
    (the same as the Go side and ``kvfabric`` CLI flags; validated by the Go
    side), or the path of a JSON file holding one.

    Buffers (``data``/``out``) are torch tensors (CUDA or CPU), objects with
    ``__cuda_array_interface__``, DLPack producers, numpy arrays, bytes-like
    objects or ``(ptr, nbytes)`` tuples; a list of them is a scatter/gather
    list (the object is their concatenation). Device memory, and host memory
    inside a range given to :meth:`register_buffer`, is copied directly by
    the GPU; other host memory is staged through the store's pinned buffer.
    ``(ptr, nbytes)`` is used as given: device memory, page-locked host
    memory or registered host memory; other host memory raises
    :class:`kvfabric.NotRegisteredError` (for that key only in a batch).

    CUDA copies are enqueued on ``stream`` (an int CUstream, a
    ``torch.cuda.Stream`` or anything with ``cuda_stream``/``ptr``); by
    default on the tensor's current torch stream, so a put right after the
    kernel that wrote the tensor needs no synchronization. Calls return when
    their copies are complete and release the GIL while they run.

    Thread-safe. Errors raise :class:`kvfabric.KvfabricError` subclasses
    carrying the native message. One kvfabric library per process; after
    creating a Store use ``multiprocessing`` with ``spawn``, not ``fork``.
    """

    def __init__(self, config: dict | str | os.PathLike):
        self._lib = _native.lib()
        js = _config_json(config)
        h = c_int64(0)
        err = ctypes.create_string_buffer(2048)
        rc = self._lib.kvfabric_open(js, len(js), byref(h), err, len(err))
        if rc != OK:
            raise error_for(rc, err.value.decode("utf-8", "replace"))
        self._lock = threading.Lock()  # guards _h, _regs, _views and _views_closed
        self._h: int | None = h.value
        self._regs: dict[int, int] = {}  # registered ptr -> size
        self._device = _device_of(js)  # the GPU the store copies with (views live there)
        self._views: dict[int, Views] = {}  # views handle -> Views not yet released
        self._views_closed = False  # close() ran: the native views handles are gone
        _exit.track(self, self._lib, h.value)  # closed at interpreter exit / SIGTERM unless closed before

    # ---- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Tears the store down. Idempotent. When teardown fails part-way,
        raises CleanupPendingError and the store stays closable: call close()
        again to retry what is left. The native client is destroyed only once
        teardown completed. Any other use of a closing or closed store raises
        ClosedError. Views still held are released (also by a close that
        fails part-way): their kernels must be done."""
        with self._lock:
            h = self._h
            if h is None:
                return
            rc = self._lib.kvfabric_close(h)
            # The native close released every views handle, whatever rc.
            self._views_closed = True
            views = list(self._views.values())
            self._views.clear()
            if rc == OK:
                self._h = None
                self._regs.clear()
        for v in views:
            v._invalidate()
        if rc != OK:
            raise error_for(rc, _native.last_error(h))

    @property
    def closed(self) -> bool:
        return self._h is None

    @property
    def cleanup_pending(self) -> bool:
        """True after a close() that failed part-way and must be retried."""
        h = self._h
        if h is None:
            return False
        rc = self._lib.kvfabric_cleanup_pending(h)
        if rc < 0:
            raise error_for(rc, _native.last_error(h))
        return rc == 1

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kvfabric.Store {'closed' if self._h is None else f'handle={self._h}'}>"

    def _handle(self) -> int:
        h = self._h
        if h is None:
            raise ClosedError("kvfabric: store is closed")
        return h

    def _raise(self, rc: int, h: int) -> None:
        if rc < 0:
            raise error_for(rc, _native.last_error(h))

    # ---- registration --------------------------------------------------------

    def register_buffer(self, buf, size: int | None = None) -> None:
        """Registers host memory (pinned for GPU copies) or device memory that
        later puts/gets point into. ``buf`` is a buffer object or a pointer
        (then ``size`` is required)."""
        ptr, n = self._ptr_size(buf, size)
        h = self._handle()
        self._raise(self._lib.kvfabric_register_buffer(h, ptr, n), h)
        with self._lock:
            self._regs[ptr] = n

    def unregister_buffer(self, buf) -> None:
        """Unregisters the buffer registered at buf's address. Waits for the
        puts and gets that use it to finish (new ones are refused), so its
        memory may be freed afterwards. Raises BufferInUseError, and leaves
        the buffer registered, if they are still running after 30 s."""
        ptr = buf if isinstance(buf, int) else resolve(buf).ptr
        h = self._handle()
        self._raise(self._lib.kvfabric_unregister_buffer(h, ptr), h)
        with self._lock:
            self._regs.pop(ptr, None)

    @staticmethod
    def _ptr_size(buf, size) -> tuple[int, int]:
        if isinstance(buf, int):
            if size is None:
                raise InvalidArgumentError("kvfabric: register_buffer(ptr) needs size")
            return buf, int(size)
        b = resolve(buf)
        return b.ptr, b.nbytes if size is None else int(size)

    def _registered(self, ptr: int, n: int) -> bool:
        with self._lock:
            for p, s in self._regs.items():
                if p <= ptr and ptr + n <= p + s:
                    return True
        return False

    def _direct(self, b: Buf) -> bool:
        """Whether the GPU can copy b directly (else it is staged)."""
        return b.device is not False or self._registered(b.ptr, b.nbytes)

    # ---- single-key operations -------------------------------------------------

    def put(self, key, data, stream=None, *, replicas: int = 0, pin: bool = False,
            preferred_segments: Sequence[str] | None = None, soft_pin: bool = False,
            soft_pin_ttl_ms: int = 0, upsert: bool = False) -> None:
        """Stores data under key. Raises AlreadyExistsError if key exists
        (unless ``upsert``: then the value is replaced; readers of the old
        one finish reading it intact), StoreFullError when there is no space.
        ``pin`` keeps the object from eviction until removed; ``soft_pin``
        makes it evicted only after every unpinned object (for
        ``soft_pin_ttl_ms`` ms after the put when > 0)."""
        rc, h = self._put(_key(key), _parts(data, False), _stream_handle(stream), replicas,
                          _put_flags(pin, soft_pin, upsert), preferred_segments, soft_pin_ttl_ms)
        self._raise(rc, h)

    def _put(self, k: bytes, bufs: list[Buf], stream, replicas=0, flags=0, preferred=None,
             soft_pin_ttl_ms=0) -> tuple[int, int]:
        h = self._handle()
        ttl = _ttl(soft_pin_ttl_ms, flags)
        pref = ",".join(preferred or ()).encode() if preferred else b""
        if len(bufs) == 1 and self._direct(bufs[0]):
            # One region: its pointer and length by reference, no arrays
            # and no generators (as _get1).
            b = bufs[0]
            s = stream if stream is not None else b.stream or 0
            rc = self._lib.kvfabric_put(h, k, len(k), byref(c_uint64(b.ptr)), byref(c_uint64(b.nbytes)), 1, s,
                                        replicas, flags, pref, len(pref), ttl)
            return rc, h
        if all(self._direct(b) for b in bufs):
            s = stream if stream is not None else next((b.stream for b in bufs if b.stream is not None), 0)
            rc = self._lib.kvfabric_put(
                h, k, len(k), _native.u64_array([b.ptr for b in bufs]), _native.u64_array([b.nbytes for b in bufs]),
                len(bufs), s, replicas, flags, pref, len(pref), ttl,
            )
            return rc, h
        if len(bufs) == 1:
            b = bufs[0]
            return self._lib.kvfabric_put_bytes(h, k, len(k), b.ptr, b.nbytes, replicas, flags, pref, len(pref), ttl), h
        data = b"".join(ctypes.string_at(b.ptr, b.nbytes) for b in bufs)
        return self._lib.kvfabric_put_bytes(h, k, len(k), data, len(data), replicas, flags, pref, len(pref), ttl), h

    def get(self, key, out, stream=None) -> int:
        """Reads key into out and returns the object's size in bytes. Raises
        NotFoundError (a KeyError) on a miss, BufferTooSmallError when out is
        smaller than the object."""
        if type(out) is tuple and len(out) == 2 and (stream is None or type(stream) is int):
            p, nb = out  # (ptr, nbytes): straight to the one-region call
            if type(p) is int and type(nb) is int and p >= 0 and nb >= 0:
                rc, n, h = self._get1(_key(key), p, nb, stream or 0)
                if rc < 0:
                    self._raise(rc, h)
                return n
        rc, n, h = self._get(_key(key), _parts(out, True), _stream_handle(stream))
        self._raise(rc, h)
        return n

    def _get1(self, k: bytes, ptr: int, nbytes: int, stream: int) -> tuple[int, int, int]:
        """A get into one region the GPU copies directly: its pointer and
        length go by reference, with no ctypes arrays, no generators and no
        Buf — the single get of an engine's request (Store.get, the facade's
        get_into). 9.6 -> 6.9-7.1 µs for one 4 KiB get on the dev VM
        (sim), where the native call alone takes 6.0-6.6 µs
        (docs/perf/latency.md, "Session 25: Python's share of one get")."""
        h = self._h
        if h is None:
            raise ClosedError("kvfabric: store is closed")
        n = c_uint64(0)
        rc = self._lib.kvfabric_get(h, k, len(k), byref(c_uint64(ptr)), byref(c_uint64(nbytes)), 1, stream, byref(n))
        return rc, n.value, h

    def _get(self, k: bytes, bufs: list[Buf], stream) -> tuple[int, int, int]:
        if len(bufs) == 1 and self._direct(bufs[0]):
            b = bufs[0]
            return self._get1(k, b.ptr, b.nbytes, stream if stream is not None else b.stream or 0)
        h = self._handle()
        n = c_uint64(0)
        if all(self._direct(b) for b in bufs):
            s = stream if stream is not None else next((b.stream for b in bufs if b.stream is not None), 0)
            rc = self._lib.kvfabric_get(
                h, k, len(k), _native.u64_array([b.ptr for b in bufs]), _native.u64_array([b.nbytes for b in bufs]),
                len(bufs), s, byref(n),
            )
            return rc, n.value, h
        if len(bufs) == 1:
            b = bufs[0]
            rc = self._lib.kvfabric_get_bytes(h, k, len(k), b.ptr, b.nbytes, byref(n))
            return rc, n.value, h
        total = sum(b.nbytes for b in bufs)
        tmp = ctypes.create_string_buffer(max(total, 1))
        rc = self._lib.kvfabric_get_bytes(h, k, len(k), tmp, total, byref(n))
        if rc == OK:
            off = 0
            for b in bufs:
                c = min(b.nbytes, n.value - off)
                if c <= 0:
                    break
                ctypes.memmove(b.ptr, ctypes.addressof(tmp) + off, c)
                off += c
        return rc, n.value, h

    def put_bytes(self, key, data, *, replicas: int = 0, pin: bool = False,
                  preferred_segments: Sequence[str] | None = None, soft_pin: bool = False) -> None:
        """Stores host bytes (any bytes-like object), staged."""
        b = resolve(data)
        k = _key(key)
        h = self._handle()
        pref = ",".join(preferred_segments or ()).encode()
        rc = self._lib.kvfabric_put_bytes(h, k, len(k), b.ptr, b.nbytes, replicas, _put_flags(pin, soft_pin), pref, len(pref), 0)
        self._raise(rc, h)

    def get_bytes(self, key) -> bytes:
        """Returns key's bytes (host memory)."""
        rc, data, h = self._get_bytes(_key(key))
        self._raise(rc, h)
        return data

    def _get_bytes(self, k: bytes) -> tuple[int, bytes, int]:
        h = self._handle()
        size = c_uint64(0)
        cap = 4096
        for _ in range(8):  # the object may be replaced between attempts
            buf = ctypes.create_string_buffer(max(cap, 1))
            rc = self._lib.kvfabric_get_bytes(h, k, len(k), buf, cap, byref(size))
            if rc == OK:
                return rc, buf.raw[: size.value], h
            if rc != BUFFER_TOO_SMALL:
                return rc, b"", h
            cap = size.value
        return rc, b"", h

    def exists(self, key) -> bool:
        k = _key(key)
        h = self._handle()
        rc = self._lib.kvfabric_exists(h, k, len(k))
        self._raise(rc, h)
        return rc == 1

    def size(self, key) -> int:
        k = _key(key)
        h = self._handle()
        n = c_uint64(0)
        self._raise(self._lib.kvfabric_size(h, k, len(k), byref(n)), h)
        return n.value

    def remove(self, key, force: bool = False) -> None:
        """Removes key. Raises NotFoundError on a miss, HasLeaseError while a
        reader holds a lease (unless force)."""
        k = _key(key)
        h = self._handle()
        self._raise(self._lib.kvfabric_remove(h, k, len(k), 1 if force else 0), h)

    def remove_all(self, force: bool = False) -> int:
        """Removes every object; returns how many."""
        h = self._handle()
        n = c_uint64(0)
        self._raise(self._lib.kvfabric_remove_all(h, 1 if force else 0, byref(n)), h)
        return n.value

    def _string(self, fn) -> str:
        h = self._handle()
        buf = ctypes.create_string_buffer(256)
        n = c_size_t(0)
        self._raise(fn(h, buf, len(buf), byref(n)), h)
        if n.value >= len(buf):
            buf = ctypes.create_string_buffer(n.value + 1)
            self._raise(fn(h, buf, len(buf), byref(n)), h)
        return buf.value.decode("utf-8", "replace")

    @property
    def hostname(self) -> str:
        return self._string(self._lib.kvfabric_hostname)

    @property
    def driver(self) -> str:
        """The CUDA driver this store runs on: "cuda" (the real driver) or
        "sim" (the simulator). driver="auto" never gives a provider the
        simulator on a host with a GPU; check this to be sure."""
        return self._string(self._lib.kvfabric_driver)

    @property
    def handle_type(self) -> str | None:
        """How the capacity this store provides is exported: "fabric" or
        "posix_fd" (handle_type="auto" resolved); None for a pure consumer."""
        return self._string(self._lib.kvfabric_handle_type) or None

    # The names of kvfabric_phases' values per kind, in order (kvfabric.h).
    _PHASES = ("calls", "keys", "check", "meta", "resolve", "copy", "master", "wait", "end")

    def phases(self) -> dict:
        """Where this store's batch puts and gets spent their time since it
        opened: ``{"put": {...}, "get": {...}}``, each with ``calls`` and
        ``keys`` and the seconds of ``check``, ``meta`` (waiting for the
        master), ``resolve``, ``copy`` and, overlapping those, ``master``,
        ``wait`` and ``end`` (see kvfabric.h, kvfabric_phases). Take two
        snapshots and subtract them."""
        phases = _native.fn("kvfabric_phases")
        h = self._handle()
        n = len(self._PHASES)
        out = (c_uint64 * (2 * n))()
        self._raise(phases(h, out, 2 * n), h)
        return {kind: {name: out[i * n + j] if j < 2 else out[i * n + j] / 1e9 for j, name in enumerate(self._PHASES)}
                for i, kind in enumerate(("put", "get"))}

    def health(self) -> None:
        """Raises when the store is unhealthy (master unreachable, …)."""
        h = self._handle()
        self._raise(self._lib.kvfabric_health(h), h)

    # ---- direct access: views and gather ----------------------------------------

    def acquire(self, keys: Sequence) -> Views:
        """Holds keys' objects in place and returns their :class:`Views`:
        per key a :class:`View` with the device address of its bytes on
        this store's GPU (``.ptr``, ``.size``, ``__cuda_array_interface__``,
        ``.tensor()``), or ``.error`` for a key that failed (others are
        held). Release them (``with store.acquire(keys) as views:``, or
        ``views.release()``) once no kernel reads them. Raises only when
        the call as a whole is rejected."""
        keys = list(keys)
        ks = [_key(k) for k in keys]
        acquire = _native.fn("kvfabric_acquire")
        h = self._handle()
        n = len(ks)
        kp, kl = _native.key_arrays(ks) if n else (None, None)
        vh = c_int64(0)
        addrs, sizes, st = (c_uint64 * n)(), (c_uint64 * n)(), (c_int32 * n)()
        rc = acquire(h, n, kp, kl, byref(vh), addrs, sizes, st)
        self._raise(rc, h)
        errs = self._results(ks, list(st), h)
        views = Views(self, vh.value, [(keys[i], sizes[i], addrs[i], errs[i]) for i in range(n)])
        with self._lock:
            closed = self._views_closed
            if not closed:
                self._views[vh.value] = views
        if closed:
            views._invalidate()  # a close() released them meanwhile
            raise ClosedError("kvfabric: store is closed")
        return views

    def _forget_views(self, vh: int) -> int | None:
        """Drops views handle vh from the store's table; returns the store
        handle to release it with, or None when close() released it."""
        with self._lock:
            self._views.pop(vh, None)
            return None if self._views_closed else self._h

    def gather(self, keys: Sequence, index, row_bytes: int, out, stream=None, *, counter=None):
        """Copies selected fixed-size rows of keys' objects into ``out`` and
        returns once the copy is complete (a one-shot acquire, gather,
        release; with :meth:`Views.gather` the views are held across
        gathers and the call does not wait).

        An object of N bytes has N // row_bytes rows. Output rows are in
        key order — the selected rows of the first key, then the second's,
        … — so ``out`` needs (number of indices) × row_bytes bytes: device
        memory, or registered/page-locked host memory (torch CUDA tensor,
        ``__cuda_array_interface__`` object, ``(ptr, nbytes)``; gathers are
        not staged).

        ``index`` selects the rows, either
          - on the GPU: a CUDA int32/int64 tensor (or
            ``__cuda_array_interface__`` object) of shape (len(keys), k),
            contiguous, read by the kernel in stream order (a top-k's
            output as is). An index out of range (negative ones included)
            zero-fills its row and is counted: the call returns a new
            1-element int32 CUDA tensor with the count for a torch index
            (or adds it to ``counter``, 4 bytes of device memory you
            zeroed, when given); otherwise it returns None. The new
            tensor costs an allocation and a fill kernel per call:
            latency-sensitive callers pass a counter they keep (and zero
            when they read it), or ``counter=False`` to count nothing
            (the rows are still zeroed).
          - on the host: a CPU tensor/array of shape (len(keys), k) or
            len(keys) sequences of ints (lengths may differ). Every index
            is checked first: a negative one raises InvalidArgumentError
            (a ValueError) naming its position, one not below its
            object's row count too (naming key and position). Returns
            None.

        The kernel runs on ``stream`` (an int CUstream or a stream
        object, as for get). By default: torch's current stream for a
        torch index; else the stream a ``__cuda_array_interface__`` index
        names, else ``out``'s (a torch tensor's: torch's current stream),
        else torch's current stream when torch has initialized CUDA, else
        the legacy default stream. Raises NotFoundError for a missing key,
        LeaseExpiredError when a lease ended before the copy finished."""
        ks = [_key(k) for k in keys]
        gather = _native.fn("kvfabric_gather")
        h = self._handle()
        g = _prepare(self, len(ks), index, row_bytes, out, stream, counter)
        kp, kl = _native.key_arrays(ks) if ks else (None, None)
        self._raise(gather(h, len(ks), kp, kl, *g.args), h)
        return g.result

    # ---- batches ----------------------------------------------------------------

    def batch_exists(self, keys: Iterable) -> list[bool]:
        rc, out = self._batch_exists(list(keys))
        if rc < 0:
            self._raise(rc, self._handle())
        return [v == 1 for v in out]

    def _batch_exists(self, keys: list, lease: bool = False) -> tuple[int, list[int]]:
        """(status, [1/0 per key]) for str or bytes keys; lease grants each
        existing key a read lease (the master's lease TTL, ended by
        expiry)."""
        h = self._handle()
        n = len(keys)
        if not n:
            return OK, []
        kp, kl, keep = _keys_arg(keys)
        out = array("i", bytes(4 * n))
        rc = self._lib.kvfabric_batch_exists(h, n, kp, kl, 1 if lease else 0, (c_int32 * n).from_buffer(out))
        del keep  # the keys' bytes, pointed into by kp, lived until here
        return rc, out.tolist()

    def _batch_remove(self, keys: list, force: bool = False) -> list[int]:
        """Removes str or bytes keys; one status code per key."""
        h = self._handle()
        n = len(keys)
        if not n:
            return []
        kp, kl, keep = _keys_arg(keys)
        st = array("i", bytes(4 * n))
        rc = self._lib.kvfabric_batch_remove(h, n, kp, kl, 1 if force else 0, (c_int32 * n).from_buffer(st))
        del keep
        return st.tolist() if rc == OK else [rc] * n

    def remove_by_regex(self, pattern: str, force: bool = False) -> int:
        """Removes every object whose key matches pattern (RE2 syntax,
        unanchored search) and returns how many; leased objects only with
        force. Raises InvalidArgumentError for a bad pattern."""
        h = self._handle()
        p = pattern.encode()
        n = c_uint64(0)
        self._raise(self._lib.kvfabric_remove_matching(h, p, len(p), 1 if force else 0, byref(n)), h)
        return n.value

    def _get_ranges(self, ks: list[bytes], ranges: list[list[tuple[int, int, int]]], stream=None) -> list[int]:
        """For key i, copies each (dst_ptr, src_offset, size) of ranges[i]:
        object bytes [src_offset, +size) to dst_ptr (device or registered
        host memory). One status code per key; a range past the object's
        end fails its key."""
        h = self._handle()
        if len(ks) != len(ranges):
            raise InvalidArgumentError(f"kvfabric: {len(ks)} keys but {len(ranges)} range lists")
        if not ks:
            return []
        kp, kl = _native.key_arrays(ks)
        flat = [r for rs in ranges for r in rs]
        st = (c_int32 * len(ks))()
        rc = self._lib.kvfabric_batch_get_ranges(
            h, len(ks), kp, kl, _native.u64_array([r[0] for r in flat]), _native.u64_array([r[1] for r in flat]),
            _native.u64_array([r[2] for r in flat]), (c_uint32 * len(ks))(*[len(rs) for rs in ranges]),
            stream if stream is not None else 0, st,
        )
        return list(st) if rc == OK else [rc] * len(ks)

    def _replicas(self, ks: list[bytes]) -> list[tuple[int, int, list[dict]]]:
        """Per key (status, size, [replica dicts: segment, node, owner, tier,
        location, handle, offset, length])."""
        h = self._handle()
        if not ks:
            return []
        kp, kl = _native.key_arrays(ks)
        st = (c_int32 * len(ks))()
        need = c_uint64(0)
        cap = 4096
        while True:
            buf = ctypes.create_string_buffer(cap)
            rc = self._lib.kvfabric_replicas(h, len(ks), kp, kl, buf, cap, byref(need), st)
            if rc == BUFFER_TOO_SMALL and need.value > cap:
                cap = need.value
                continue
            break
        if rc != OK:
            return [(rc, 0, [])] * len(ks)
        out = []
        for code, d in zip(st, json.loads(buf.raw[: need.value])):
            out.append((code, d["size"], d["replicas"]) if d is not None else (code, 0, []))
        return out

    def batch_put(self, keys: Sequence, datas: Sequence, stream=None, *, replicas: int = 0, pin: bool = False,
                  preferred_segments: Sequence[str] | None = None,
                  soft_pin: bool = False) -> list[KvfabricError | None]:
        """Puts many keys with one native call for the directly copyable
        ones. Returns one entry per key: None on success, else the exception
        (not raised). Raises only when the batch as a whole is rejected."""
        keys = list(keys)
        if len(keys) != len(datas):
            raise InvalidArgumentError(f"kvfabric: {len(keys)} keys but {len(datas)} buffers")
        flags, s = _put_flags(pin, soft_pin), _stream_handle(stream)
        raw = _raw_regions(datas)
        if raw is not None:  # the facade's flat path: no Buf per key
            codes, h = self._batch_put_flat(keys, raw[0], raw[1], s or 0, replicas, flags, preferred_segments)
        else:
            codes, h = self._batch_put([_key(k) for k in keys], _parts_all(datas, False), s, replicas, flags,
                                       preferred_segments)
        if all_ok(codes):
            return [None] * len(keys)
        return self._results([_key(k) for k in keys], codes, h)

    def _split_direct(self, parts: list[list[Buf]]) -> tuple[list[int], list[int]]:
        """The positions of the keys whose every buffer the GPU copies
        directly, and of the others (staged)."""
        direct, staged = [], []
        for i, bufs in enumerate(parts):
            if len(bufs) == 1:
                b = bufs[0]
                ok = b.device is not False or self._registered(b.ptr, b.nbytes)
            else:
                ok = all(self._direct(b) for b in bufs)
            (direct if ok else staged).append(i)
        return direct, staged

    @staticmethod
    def _direct_arrays(parts: list[list[Buf]], direct: list[int], stream):
        """The region arguments of the direct keys' batch call: (ptrs, lens,
        parts — None when every key has one buffer —, stream: the caller's,
        else the first one a buffer names, else 0)."""
        flat = [b for i in direct for b in parts[i]]
        s = stream if stream is not None else next((b.stream for b in flat if b.stream is not None), 0)
        counts = None
        if len(flat) != len(direct):
            counts = (c_uint32 * len(direct)).from_buffer(array("I", [len(parts[i]) for i in direct]))
        return _native.u64_view([b.ptr for b in flat]), _native.u64_view([b.nbytes for b in flat]), counts, s

    def _batch_put(self, ks, parts: list[list[Buf]], stream, replicas=0, flags=0, preferred=None,
                   soft_pin_ttl_ms=0):
        h = self._handle()
        ttl = _ttl(soft_pin_ttl_ms, flags)
        codes = [0] * len(ks)
        direct, staged = self._split_direct(parts)
        if direct:
            pref = ",".join(preferred or ()).encode()
            pa, la, ca, s = self._direct_arrays(parts, direct, stream)
            dk = ks if not staged else [ks[i] for i in direct]
            st = array("i", bytes(4 * len(dk)))
            rc = self._flat_call("kvfabric_batch_put_packed", "kvfabric_batch_put", dk, pa, la, ca, s, replicas,
                                 flags, pref, len(pref), ttl, (c_int32 * len(dk)).from_buffer(st))
            if rc < 0:
                self._raise(rc, h)
            if not staged:
                codes = st.tolist()
            else:
                for j, i in enumerate(direct):
                    codes[i] = st[j]
        for i in staged:
            codes[i], _ = self._put(ks[i], parts[i], stream, replicas, flags, preferred, ttl)
        return codes, h

    def batch_get(self, keys: Sequence, outs: Sequence, stream=None) -> list[int | KvfabricError]:
        """Gets many keys. Returns one entry per key: the object's size in
        bytes, or the exception (not raised; NotFoundError on a miss)."""
        keys = list(keys)
        if len(keys) != len(outs):
            raise InvalidArgumentError(f"kvfabric: {len(keys)} keys but {len(outs)} buffers")
        s = _stream_handle(stream)
        raw = _raw_regions(outs)
        if raw is not None:  # the facade's flat path: no Buf per key
            codes, sizes, h = self._batch_get_flat(keys, raw[0], raw[1], s or 0)
        else:
            codes, sizes, h = self._batch_get([_key(k) for k in keys], _parts_all(outs, True), s)
        if all_ok(codes):
            return sizes
        res = self._results([_key(k) for k in keys], codes, h)
        return [sizes[i] if r is None else r for i, r in enumerate(res)]

    def _batch_get(self, ks, parts: list[list[Buf]], stream):
        h = self._handle()
        codes = [0] * len(ks)
        sizes = [0] * len(ks)
        direct, staged = self._split_direct(parts)
        if direct:
            pa, la, ca, s = self._direct_arrays(parts, direct, stream)
            dk = ks if not staged else [ks[i] for i in direct]
            st = array("i", bytes(4 * len(dk)))
            nread = array("Q", bytes(8 * len(dk)))
            rc = self._flat_call("kvfabric_batch_get_packed", "kvfabric_batch_get", dk, pa, la, ca, s,
                                 (c_uint64 * len(dk)).from_buffer(nread), (c_int32 * len(dk)).from_buffer(st))
            if rc < 0:
                self._raise(rc, h)
            if not staged:
                codes, sizes = st.tolist(), nread.tolist()
            else:
                for j, i in enumerate(direct):
                    codes[i], sizes[i] = st[j], nread[j]
        for i in staged:
            codes[i], sizes[i], _ = self._get(ks[i], parts[i], stream)
        return codes, sizes, h

    # ---- one raw buffer per key (the Mooncake facade's batch_put_from /
    # batch_get_into): the C arrays are built straight from the caller's
    # lists, with no Buf per key. A raw pointer is never staged (its memory
    # kind is unknown, as for _raw Bufs), so this is the direct path of
    # _batch_put / _batch_get.

    @staticmethod
    def _flat_regions(keys: list, ptrs: Sequence[int], sizes: Sequence[int]):
        """The region arrays of one raw buffer per key: (ptrs, sizes, parts);
        parts is None (NULL: one region per key)."""
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            raise InvalidArgumentError(f"kvfabric: {n} keys, {len(ptrs)} buffer pointers, {len(sizes)} sizes")
        try:
            return _native.u64_view(ptrs), _native.u64_view(sizes), None
        except (OverflowError, TypeError):
            for name, vals in (("ptr", ptrs), ("size", sizes)):
                for i, v in enumerate(vals):
                    if not isinstance(v, int) or v < 0:
                        raise InvalidArgumentError(f"kvfabric: key {keys[i]!r}: bad buffer {name} {v!r}") from None
            raise

    @staticmethod
    def _multi_counts(keys: list, all_ptrs: Sequence, all_sizes: Sequence) -> array:
        """The number of raw buffers of each key (an array of uint32) when
        key i has len(all_ptrs[i]) == len(all_sizes[i]) >= 1 of them; else
        InvalidArgumentError naming the first key that has not. One C loop
        over the keys, none over their buffers."""
        n = len(keys)
        if len(all_ptrs) != n or len(all_sizes) != n:
            raise InvalidArgumentError(
                f"kvfabric: {n} keys, {len(all_ptrs)} buffer pointer lists, {len(all_sizes)} size lists")
        try:
            counts = array("I", map(len, all_ptrs))
            ok = array("I", map(len, all_sizes)) == counts and 0 not in counts
        except (TypeError, OverflowError):
            ok = False
        if not ok:
            for i, (k, ps, zs) in enumerate(zip(keys, all_ptrs, all_sizes)):
                try:
                    np_, nz = len(ps), len(zs)
                except TypeError:
                    raise InvalidArgumentError(
                        f"kvfabric: key {k!r}: buffer pointers {type(ps).__name__} and sizes "
                        f"{type(zs).__name__}: want a sequence of each") from None
                if np_ != nz or not np_:
                    raise InvalidArgumentError(f"kvfabric: key {k!r}: {np_} buffer pointers, {nz} sizes"
                                               + ("" if np_ else ": a key needs at least one buffer"))
            raise InvalidArgumentError(f"kvfabric: {n} keys: too many buffers for one key")
        return counts

    @staticmethod
    def _multi_regions(keys: list, all_ptrs: Sequence, all_sizes: Sequence, counts: array):
        """The region arrays of keys scattered over several raw buffers each
        (the facade's *_multi_buffers): (ptrs, sizes, parts), key i's
        counts[i] regions consecutive, counts from _multi_counts. Built by
        array.fromlist per key (18-23 ns a buffer on a dev VM,
        docs/perf/logs-2026-12-04-s18/devvm-conversion.txt, against 0.7-1.2
        µs for a Buf per buffer on the H200, runJ); the sizes by one repeat of the first key's
        list when every key's list equals it, as a paged KV cache's blocks'
        do (list equality: a size of another number type equal to the first
        key's, 4096.0 for 4096, is then taken as that int)."""
        n = len(keys)

        def u64(rows):
            a = array(_native.U64)
            for row in rows:
                if type(row) is list:
                    a.fromlist(row)
                else:
                    a.extend(row)
            return a

        try:
            pa = u64(all_ptrs)
            first = all_sizes[0] if n else None
            try:
                same = type(first) is list and all_sizes.count(first) == n
            except (AttributeError, TypeError, ValueError):  # rows that do not compare as lists
                same = False
            sa = array(_native.U64, first) * n if same else u64(all_sizes)
        except (OverflowError, TypeError):
            for name, rows in (("ptr", all_ptrs), ("size", all_sizes)):
                for k, row in zip(keys, rows):
                    for j, v in enumerate(row):
                        try:
                            array("Q", (v,))
                        except (OverflowError, TypeError):
                            raise InvalidArgumentError(
                                f"kvfabric: key {k!r}: bad buffer {name} {v!r} (buffer {j})") from None
            raise
        if len(pa) != len(sa) or len(pa) != sum(counts):  # a sequence whose len and items disagree
            raise InvalidArgumentError(f"kvfabric: {n} keys: buffer lists changed while read")
        return _view(c_uint64, pa), _view(c_uint64, sa), _view(c_uint32, counts)

    def _flat_call(self, packed_fn: str, arrays_fn: str, keys: list, *args, pre=()):
        """Calls the library's packed-keys batch function (the keys joined
        by NUL: one join in Python) or, when the keys cannot be joined or
        the library predates it, the key-arrays one. keys: str or bytes.
        pre are the arguments between the handle and the count (a put
        stream's handle)."""
        lib = self._lib
        n = len(keys)
        j = _native.packed_keys_arg(keys)
        fn = getattr(lib, packed_fn, None) if j is not None else None
        if fn is not None:
            rc = fn(self._handle(), *pre, n, j[0], j[1], *args)
            del j  # what j[0] points into lived until here
            # A key holding NUL splits into more than n: the library refused
            # the whole batch before touching any key or buffer. Looked for
            # only then, so the fast path has no pass over the keys.
            if rc != INVALID_ARGUMENT or not any((b"\0" if isinstance(k, bytes) else "\0") in k for k in keys):
                return rc
        kp, kl, keep = _native.packed_keys([_key(k) for k in keys])
        rc = getattr(lib, arrays_fn)(self._handle(), *pre, n, kp, kl, *args)
        del keep  # the keys' bytes, pointed into by kp, lived until here
        return rc

    def _regions(self, keys: list, ptrs: Sequence, sizes: Sequence, multi: bool):
        """The region arrays of a flat batch: one raw buffer per key, or
        (multi) a list of them per key."""
        if not multi:
            return self._flat_regions(keys, ptrs, sizes)
        return self._multi_regions(keys, ptrs, sizes, self._multi_counts(keys, ptrs, sizes))

    def _batch_put_flat(self, keys: list, ptrs: Sequence, sizes: Sequence, stream: int = 0,
                        replicas=0, flags=0, preferred=None, soft_pin_ttl_ms=0, multi: bool = False):
        """_batch_put of raw buffers: (codes, handle). One buffer per key
        (ptrs and sizes of ints), or with multi a list of buffers per key
        (lists of ints; the object is their concatenation). keys: str or
        bytes. A batch of at least STREAM_MIN_KEYS keys of one buffer each
        goes as a put stream when the library has one (_batch_put_stream)."""
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            raise InvalidArgumentError(f"kvfabric: {n} keys, {len(ptrs)} buffer pointers, {len(sizes)} sizes")
        if not multi and n >= STREAM_MIN_KEYS and getattr(self._lib, "kvfabric_put_stream_begin", None) is not None:
            return self._batch_put_stream(keys, ptrs, sizes, stream, replicas, flags, preferred, soft_pin_ttl_ms)
        pa, sa, ca = self._regions(keys, ptrs, sizes, multi)
        h = self._handle()
        pref = ",".join(preferred or ()).encode()
        st = array("i", bytes(4 * n))
        rc = self._flat_call("kvfabric_batch_put_packed", "kvfabric_batch_put", keys, pa, sa, ca, stream, replicas,
                             flags, pref, len(pref), _ttl(soft_pin_ttl_ms, flags), (c_int32 * n).from_buffer(st))
        if rc < 0:
            self._raise(rc, h)
        return _codes(st), h

    def _batch_put_stream(self, keys: list, ptrs: Sequence[int], sizes: Sequence[int], stream: int,
                          replicas, flags, preferred, soft_pin_ttl_ms):
        """_batch_put_flat as a put stream (kvfabric_put_stream_*): the
        arrays of each piece are built while the pieces before it copy, not
        all before the first copy (for 4096 keys building them took
        0.5-0.75 ms of a 64 KiB batch's ~5.5 ms on the H200). The pieces
        start small, so that the first copies start early, and double.
        Anything raised while building a piece (a bad pointer or size, an
        interrupt) aborts the stream: nothing of the batch is stored, as
        when the whole batch was refused before any copy."""
        lib = self._lib
        n = len(keys)
        h = self._handle()
        pref = ",".join(preferred or ()).encode()
        sid = c_int64()
        rc = lib.kvfabric_put_stream_begin(h, n, stream, replicas, flags, pref, len(pref),
                                           _ttl(soft_pin_ttl_ms, flags), byref(sid))
        if rc < 0:
            self._raise(rc, h)
        try:
            sid = sid.value
            lo, step = 0, STREAM_FIRST_PIECE
            while lo < n:
                hi = min(n, lo + step)
                ks = keys[lo:hi]
                pa, sa, ca = self._flat_regions(ks, ptrs[lo:hi], sizes[lo:hi])
                rc = self._flat_call("kvfabric_put_stream_feed_packed", "kvfabric_put_stream_feed", ks, pa, sa, ca,
                                     pre=(sid,))
                if rc < 0:
                    self._raise(rc, h)
                lo, step = hi, min(2 * step, STREAM_MAX_PIECE)
        except BaseException:
            # The error's message was read above; the stream's end records
            # the abort's as the handle's last error after it.
            sid = sid.value if isinstance(sid, c_int64) else sid
            lib.kvfabric_put_stream_abort(h, sid)
            lib.kvfabric_put_stream_end(h, sid, None)
            raise
        st = array("i", bytes(4 * n))
        rc = lib.kvfabric_put_stream_end(h, sid, (c_int32 * n).from_buffer(st))
        if rc < 0:
            self._raise(rc, h)
        return _codes(st), h

    def _batch_get_flat(self, keys: list, ptrs: Sequence, sizes: Sequence, stream: int = 0, multi: bool = False):
        """_batch_get of raw buffers, one per key or (multi) a list per key
        that the object is scattered over in order: (codes, sizes read,
        handle). keys: str or bytes. Every buffer is converted before the
        call: a get refused for a bad argument writes nothing."""
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            raise InvalidArgumentError(f"kvfabric: {n} keys, {len(ptrs)} buffer pointers, {len(sizes)} sizes")
        pa, sa, ca = self._regions(keys, ptrs, sizes, multi)
        h = self._handle()
        st = array("i", bytes(4 * n))
        nread = array("Q", bytes(8 * n))
        rc = self._flat_call("kvfabric_batch_get_packed", "kvfabric_batch_get", keys, pa, sa, ca, stream,
                             (c_uint64 * n).from_buffer(nread), (c_int32 * n).from_buffer(st))
        if rc < 0:
            self._raise(rc, h)
        return _codes(st), nread.tolist(), h

    def _results(self, ks: list[bytes], codes: list[int], h: int) -> list[KvfabricError | None]:
        msg = None
        out: list[KvfabricError | None] = []
        for k, c in zip(ks, codes):
            if c == OK:
                out.append(None)
                continue
            if msg is None:
                msg = _native.last_error(h)  # the first failing key's message
                out.append(error_for(c, msg))
                continue
            out.append(error_for(c, f"key {k.decode('utf-8', 'replace')!r}: {status_name(c)}"))
        return out
