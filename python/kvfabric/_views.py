"""Direct access: views (objects held in place) and row gathers.

``Store.acquire(keys)`` returns :class:`Views`; ``Views.gather`` and
``Store.gather`` copy selected fixed-size rows of many objects into one
buffer with one kernel launch. See python/README.md ("Direct access") and
capi/kvfabric.h for the contract.
"""

from __future__ import annotations

import ctypes
import operator
import sys
import threading
from ctypes import c_uint64
from typing import Any, NamedTuple

from . import _native
from ._buffers import _compact, _torch, resolve, torch_stream
from .errors import (
    INVALID_HANDLE,
    OK,
    InvalidArgumentError,
    InvalidHandleError,
    KvfabricError,
    error_for,
)


class View:
    """One object of a :class:`Views`: where its bytes are on the Store's GPU.

    ``key`` is the key as given to ``acquire``; ``size`` the object's size
    in bytes; ``ptr`` the device address of its preferred replica in this
    process; ``error`` is None, or the :class:`KvfabricError` why this key
    has no view (then ``size`` and ``ptr`` are 0).

    Kernels on the Store's GPU may read the bytes while the views are
    held; nobody may write them. ``__cuda_array_interface__`` (a read-only
    uint8 array of ``size`` elements) and :meth:`tensor` hand them to
    CuPy/Numba/torch without a copy; a view that failed, or whose views
    were released, has neither.
    """

    __slots__ = ("key", "size", "ptr", "error", "_views")

    def __init__(self, views: "Views", key, size: int, ptr: int, error: KvfabricError | None):
        self._views = views
        self.key = key
        self.size = size
        self.ptr = ptr
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"<kvfabric.View {self.key!r} error={self.error.__class__.__name__}>"
        return f"<kvfabric.View {self.key!r} size={self.size} ptr={self.ptr:#x}>"

    def _unusable(self) -> str | None:
        if self.error is not None:
            return f"kvfabric: the view of {self.key!r} failed: {self.error}"
        if self._views.released:
            return f"kvfabric: the view of {self.key!r} was released"
        return None

    @property
    def __cuda_array_interface__(self) -> dict:
        # AttributeError, so that hasattr(view, "__cuda_array_interface__")
        # is False for a view without bytes (as torch does for CPU tensors).
        why = self._unusable()
        if why is not None:
            raise AttributeError(why + "; it has no __cuda_array_interface__")
        return {
            "shape": (self.size,),
            "typestr": "|u1",
            # CAI v3: a zero-size array has a null pointer.
            "data": (self.ptr if self.size else 0, True),
            "version": 3,
            "strides": None,
        }

    def tensor(self):
        """A torch uint8 CUDA tensor of ``size`` elements aliasing the
        view (``torch.as_tensor`` over ``__cuda_array_interface__``, on the
        Store's device). It is valid while the views are held. torch has
        no read-only tensors: it must not be written all the same. Needs
        torch."""
        try:
            import torch
        except ImportError as e:
            raise ImportError(
                "kvfabric: View.tensor() needs torch, which cannot be imported here; hand the view's "
                "__cuda_array_interface__ (or .ptr and .size) to another library instead"
            ) from e
        if self.error is not None:
            raise error_for(self.error.code, f"kvfabric: the view of {self.key!r} failed: {self.error}")
        if self._views.released:
            raise InvalidHandleError(f"kvfabric: the view of {self.key!r} was released")
        t = torch.as_tensor(_Writable(self), device=torch.device("cuda", self._views._store._device))
        if self.size and t.data_ptr() != self.ptr:
            # An older torch infers the device from the pointer and then
            # moves the tensor: that is a copy, not a view.
            raise KvfabricError(
                f"kvfabric: torch copied the view of {self.key!r} instead of aliasing it "
                f"(device inferred from {self.ptr:#x} is not cuda:{self._views._store._device})"
            )
        return t


class _Writable:
    """A view's array interface without the read-only flag, for torch,
    which refuses one that has it ("the read only flag is not supported,
    should always be False") and has no read-only tensors anyway. torch
    holds it as the tensor's owner, which keeps the View alive."""

    def __init__(self, view: View):
        self.view = view
        cai = dict(view.__cuda_array_interface__)
        cai["data"] = (cai["data"][0], False)
        self.__cuda_array_interface__ = cai


class Views:
    """Objects held in place, returned by :meth:`kvfabric.Store.acquire`.

    A sequence of :class:`View` (positionally for the keys given). While
    held, no object of theirs is evicted, removed by a plain remove, or
    has its range reused; the Store renews their leases in the background.
    A view can still be lost (its provider's segment drains, or the master
    is unreachable for a lease TTL): :meth:`check` raises
    :class:`kvfabric.LeaseExpiredError` then, so check after the reads
    before trusting what was read.

    Use as a context manager::

        with store.acquire(keys) as views:
            ...  # kernels reading views[i] (torch: views[i].tensor())
            views.check()

    Leaving the block synchronizes torch's current stream on the Store's
    device when torch is loaded (the kernels reading the views must be
    done before their mappings can go) and releases the views. Without
    torch, or for kernels on other streams, synchronize them yourself
    before leaving the block (or calling :meth:`release`).

    Thread-safe. :meth:`release` is idempotent; closing the Store
    releases its views.
    """

    def __init__(self, store, handle: int, objs: list[tuple[Any, int, int, KvfabricError | None]]):
        self._store = store
        self._vh = handle
        self._lock = threading.Lock()  # guards _released
        self._released = False
        self._objs = [View(self, k, size, ptr, err) for k, size, ptr, err in objs]

    def __len__(self) -> int:
        return len(self._objs)

    def __getitem__(self, i):
        return self._objs[i]

    def __iter__(self):
        return iter(self._objs)

    def __repr__(self) -> str:
        state = "released" if self._released else f"handle={self._vh}"
        return f"<kvfabric.Views {len(self._objs)} keys {state}>"

    @property
    def released(self) -> bool:
        """True after :meth:`release` (or the Store's close)."""
        return self._released

    def _handles(self) -> tuple[int, int]:
        if self._released:
            raise InvalidHandleError("kvfabric: views released")
        return self._store._handle(), self._vh

    def check(self) -> None:
        """Raises :class:`kvfabric.LeaseExpiredError` when a view was lost
        (the message says why), :class:`kvfabric.InvalidHandleError` after
        release; returns None while every view is held."""
        h, vh = self._handles()
        rc = _native.fn("kvfabric_views_check")(h, vh)
        if rc != OK:
            raise error_for(rc, _native.last_error(h))

    def release(self) -> None:
        """Releases the views. Every kernel reading them (and every gather
        from them) must have completed. Idempotent."""
        with self._lock:
            if self._released:
                return
            self._released = True
        h = self._store._forget_views(self._vh)
        if h is None:
            return  # the Store was closed, which released them
        rc = _native.fn("kvfabric_views_release")(h, self._vh)
        if rc not in (OK, INVALID_HANDLE):  # INVALID_HANDLE: a close raced us
            raise error_for(rc, _native.last_error(h))

    def _invalidate(self) -> None:
        """Marks the views released without a native call (the Store's
        close released them)."""
        with self._lock:
            self._released = True

    def __enter__(self) -> "Views":
        return self

    def __exit__(self, *exc) -> None:
        try:
            torch = _torch()
            if torch is not None and not self._released and torch.cuda.is_initialized():
                torch.cuda.current_stream(torch.device("cuda", self._store._device)).synchronize()
        finally:
            self.release()

    def gather(self, index, row_bytes: int, out, stream=None, *, counter=None):
        """Enqueues a copy of the selected rows of the views' objects into
        ``out`` and returns without waiting (see :meth:`kvfabric.Store.gather`
        for ``index``, ``row_bytes``, ``out``, ``counter`` and the result).
        The kernel runs on ``stream`` (default as for Store.gather:
        torch's current stream with torch): synchronize it before reading
        ``out``, then :meth:`check`."""
        h, vh = self._handles()
        g = _prepare(self._store, len(self._objs), index, row_bytes, out, stream, counter)
        rc = _native.fn("kvfabric_views_gather")(h, vh, *g.args)
        if rc != OK:
            raise error_for(rc, _native.last_error(h))
        return g.result


class _Gather(NamedTuple):
    #: The row and destination arguments of kvfabric_views_gather/gather:
    #: host_rows, host_counts, dev_rows, per_key, elem_bytes, bad,
    #: row_bytes, dst, dst_len, stream.
    args: tuple
    #: What the call returns: the counter tensor it allocated, or None.
    result: Any
    #: Keeps index copies and buffers alive during the call.
    keep: Any


_DEVICE_DTYPES = ("i4", "i8")


def _prepare(store, n: int, index, row_bytes, out, stream, counter) -> _Gather:
    """The native arguments of a gather over n keys."""
    from .store import _stream_handle

    try:
        rb = operator.index(row_bytes)
    except TypeError:
        raise InvalidArgumentError(f"kvfabric: row_bytes must be an int, not {type(row_bytes).__name__}") from None
    if not 0 < rb < 1 << 64:
        raise InvalidArgumentError(f"kvfabric: row_bytes={rb}: want 0 < row_bytes < 2**64")
    if isinstance(out, list):
        raise InvalidArgumentError("kvfabric: a gather writes one buffer: out must not be a list")
    dst = resolve(out, True)
    torch = _torch()
    dev = store._device
    if torch is not None and isinstance(out, torch.Tensor) and out.is_cuda and out.get_device() != dev:
        raise InvalidArgumentError(f"kvfabric: out is on cuda:{out.get_device()}, the store on cuda:{dev}")
    s = _stream_handle(stream)

    if torch is not None and isinstance(index, torch.Tensor) and index.is_cuda:
        if index.dtype not in (torch.int32, torch.int64):
            raise InvalidArgumentError(f"kvfabric: a CUDA index must be int32 or int64, not {index.dtype}")
        _device_shape(tuple(index.shape), n)
        if not index.is_contiguous():
            raise InvalidArgumentError("kvfabric: a CUDA index must be contiguous (call .contiguous())")
        if index.get_device() != dev:
            raise InvalidArgumentError(f"kvfabric: index is on cuda:{index.get_device()}, the store on cuda:{dev}")
        if s is None:
            # torch's current stream: the one the indices were written on
            # (a top-k just before), so the kernel reads them in order.
            s = torch_stream(dev) or 0
        result = None
        if counter is False:
            bad = 0  # not counted (out-of-range rows are still zeroed)
        elif counter is None:
            # Zeroed on the gather's stream, so that the kernel's adds
            # follow the zeroing (and the caching allocator ties the
            # block to that stream).
            if s == torch_stream(dev):
                result = torch.zeros(1, dtype=torch.int32, device=index.device)
            else:
                with torch.cuda.stream(torch.cuda.ExternalStream(s, device=index.device)):
                    result = torch.zeros(1, dtype=torch.int32, device=index.device)
            bad = result.data_ptr()
        else:
            bad = _counter(counter)
        args = (None, None, index.data_ptr(), index.shape[1], index.element_size(), bad)
        keep: Any = (index, result, counter)
    elif hasattr(index, "__cuda_array_interface__"):
        cai = index.__cuda_array_interface__
        typestr = cai["typestr"]
        if typestr[0] not in "<|=" or typestr[1:] not in _DEVICE_DTYPES:
            raise InvalidArgumentError(f"kvfabric: a CUDA index must be int32 or int64, not typestr {typestr!r}")
        shape = tuple(int(d) for d in cai["shape"])
        _device_shape(shape, n)
        if not _compact(shape, cai.get("strides"), int(typestr[2:])):
            raise InvalidArgumentError("kvfabric: a CUDA index must be C-contiguous")
        if s is None:
            st = cai.get("stream")
            s = 0 if st == 1 else st
        result = None
        bad = 0 if counter is None or counter is False else _counter(counter)
        args = (None, None, int(cai["data"][0] or 0), shape[1], int(typestr[2:]), bad)
        keep = (index, counter)
    else:
        if counter is not None and counter is not False:
            raise InvalidArgumentError("kvfabric: counter is for CUDA indices (host indices are checked instead)")
        rows, counts, keep = _host_rows(index, n)
        result = None
        args = (rows, counts, 0, 0, 0, 0)
    if s is None:
        s = dst.stream
    if s is None:
        s = torch_stream(dev) or 0
    return _Gather(args + (rb, dst.ptr, dst.nbytes, s), result, (keep, dst))


def _device_shape(shape: tuple, n: int) -> None:
    if len(shape) != 2 or shape[0] != n:
        raise InvalidArgumentError(f"kvfabric: a CUDA index must have shape ({n}, k) for {n} keys, not {shape}")
    if shape[1] == 0:
        raise InvalidArgumentError(f"kvfabric: index has shape {shape}: no rows to gather")


def _counter(counter) -> int:
    b = resolve(counter, True)
    if b.nbytes < 4 or b.ptr % 4:
        raise InvalidArgumentError(
            "kvfabric: counter must be 4-byte aligned device memory of at least 4 bytes "
            f"(ptr={b.ptr:#x}, nbytes={b.nbytes})"
        )
    return b.ptr


def _negative(i: int, j: int, v) -> InvalidArgumentError:
    return InvalidArgumentError(f"kvfabric: index[{i}][{j}] = {v} is negative")


def _host_rows(index, n: int):
    """(host_rows address or None, host_counts address, keep) for host
    indices: a CPU tensor or array of shape (n, k), or n sequences of ints
    (ragged allowed)."""
    torch = _torch()
    np = sys.modules.get("numpy")
    flat: Any
    if torch is not None and isinstance(index, torch.Tensor):
        if index.dim() != 2 or index.shape[0] != n:
            raise InvalidArgumentError(
                f"kvfabric: index must have shape ({n}, k) for {n} keys, not {tuple(index.shape)}")
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise InvalidArgumentError(f"kvfabric: index must hold integers, not {index.dtype}")
        if index.numel() and bool((index < 0).any()):
            i, j = (int(v) for v in (index < 0).nonzero()[0])
            raise _negative(i, j, int(index[i, j]))
        flat = index.to(torch.int64).contiguous()
        k = index.shape[1]
        counts = (c_uint64 * n)(*([k] * n))
        return (flat.data_ptr() if flat.numel() else None), ctypes.addressof(counts), (flat, counts)
    if np is not None and isinstance(index, np.ndarray) and index.ndim == 2 and index.dtype.kind in "iu":
        if index.shape[0] != n:
            raise InvalidArgumentError(f"kvfabric: index must have shape ({n}, k) for {n} keys, not {index.shape}")
        if index.dtype.kind == "i" and index.size and (index < 0).any():
            i, j = (int(v) for v in np.argwhere(index < 0)[0])
            raise _negative(i, j, int(index[i, j]))
        flat = np.ascontiguousarray(index, dtype=np.uint64)
        k = index.shape[1]
        counts = (c_uint64 * n)(*([k] * n))
        return (flat.ctypes.data if flat.size else None), ctypes.addressof(counts), (flat, counts)
    try:
        lists = [list(r) for r in index]
    except TypeError:
        raise InvalidArgumentError(
            f"kvfabric: index must be a CUDA tensor/array of shape ({n}, k) or {n} sequences of row indices, "
            f"not {type(index).__name__}"
        ) from None
    if len(lists) != n:
        raise InvalidArgumentError(f"kvfabric: index has {len(lists)} row lists for {n} keys")
    vals = []
    for i, r in enumerate(lists):
        for j, x in enumerate(r):
            try:
                v = operator.index(x)
            except TypeError:
                raise InvalidArgumentError(f"kvfabric: index[{i}][{j}] = {x!r} is not an integer") from None
            if v < 0:
                raise _negative(i, j, v)
            if v >= 1 << 64:
                raise InvalidArgumentError(f"kvfabric: index[{i}][{j}] = {v} does not fit in 64 bits")
            vals.append(v)
    counts = (c_uint64 * n)(*[len(r) for r in lists])
    arr = (c_uint64 * len(vals))(*vals)
    return (ctypes.addressof(arr) if vals else None), ctypes.addressof(counts), (arr, counts)
