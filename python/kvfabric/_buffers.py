"""Turning Python objects into (pointer, nbytes) regions.

Accepted: torch tensors (CUDA or CPU), objects with ``__cuda_array_interface__``
(CuPy, Numba, …), numpy arrays and other ``__array_interface__`` objects,
DLPack producers (``__dlpack__``/``__dlpack_device__``), objects with the
buffer protocol (bytes, bytearray, memoryview), and ``(ptr, nbytes)`` tuples.
Every buffer must be contiguous.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, NamedTuple

from .errors import InvalidArgumentError

# DLPack device types.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


class Buf(NamedTuple):
    ptr: int
    nbytes: int
    #: True: device memory; False: host memory; None: unknown (a raw pointer).
    device: bool | None
    #: The stream the data is ordered on, when the object says (CUDA only).
    stream: int | None
    #: Keeps the producer (and any temporary) alive during the call.
    keep: Any


def _torch():
    return sys.modules.get("torch")


def _is_torch_tensor(obj) -> bool:
    t = _torch()
    return t is not None and isinstance(obj, t.Tensor)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _itemsize(typestr: str) -> int:
    return int(typestr[2:])


def _compact(shape, strides, itemsize) -> bool:
    if strides is None:
        return True
    expect = itemsize
    for dim, stride in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if dim != 1 and stride != expect:
            return False
        expect *= dim
    return True


def _from_torch(t, writable: bool) -> Buf:
    if not t.is_contiguous():
        raise InvalidArgumentError("kvfabric: tensor must be contiguous (call .contiguous())")
    nbytes = t.numel() * t.element_size()
    stream = None
    cuda = t.is_cuda
    if cuda:
        stream = _current_stream(_torch(), t)
    return Buf(int(t.data_ptr()), nbytes, cuda, stream, t)


def _current_stream(torch, t) -> int:
    """The raw CUstream of torch's current stream on t's device. torch's
    internal getter (what Triton uses) costs ~0.3 µs; building a
    torch.cuda.Stream object ~3 µs, which is a tenth of a small get."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(t.get_device()))
    return int(torch.cuda.current_stream(t.device).cuda_stream)


def torch_stream(device: int) -> int | None:
    """The raw CUstream of torch's current stream on CUDA device ordinal
    device, when torch is loaded and has initialized CUDA (no tensor or
    stream of torch's can be on the GPU before that); else None."""
    torch = _torch()
    if torch is None or not torch.cuda.is_initialized():
        return None
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def _from_cai(obj, writable: bool) -> Buf:
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    if writable and readonly:
        raise InvalidArgumentError("kvfabric: destination array is read-only")
    item = _itemsize(cai["typestr"])
    if not _compact(cai["shape"], cai.get("strides"), item):
        raise InvalidArgumentError("kvfabric: CUDA array must be C-contiguous")
    stream = cai.get("stream")
    # CAI v3: 1 is the legacy default stream, 2 the per-thread default.
    if stream == 1:
        stream = 0
    return Buf(int(ptr or 0), _prod(cai["shape"]) * item, True, stream, obj)


def _from_ai(obj, writable: bool) -> Buf:
    ai = obj.__array_interface__
    ptr, readonly = ai["data"]
    if writable and readonly:
        raise InvalidArgumentError("kvfabric: destination array is read-only")
    item = _itemsize(ai["typestr"])
    if not _compact(ai["shape"], ai.get("strides"), item):
        raise InvalidArgumentError("kvfabric: array must be C-contiguous")
    return Buf(int(ptr or 0), _prod(ai["shape"]) * item, False, None, obj)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def _from_dlpack(obj, writable: bool) -> Buf:
    dev_type, _ = obj.__dlpack_device__()
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    # A DLManagedTensor starts with its DLTensor. The capsule is not
    # consumed: obj stays alive (Buf.keep) and owns the memory.
    t = _DLTensor.from_address(get(capsule, b"dltensor"))
    shape = [t.shape[i] for i in range(t.ndim)]
    item = (t.dtype.bits * t.dtype.lanes + 7) // 8
    strides = None if not t.strides else [t.strides[i] * item for i in range(t.ndim)]
    if not _compact(shape, strides, item):
        raise InvalidArgumentError("kvfabric: DLPack tensor must be C-contiguous")
    device = dev_type in (_DL_CUDA, _DL_CUDA_MANAGED)
    if dev_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        raise InvalidArgumentError(f"kvfabric: DLPack device type {dev_type} is not supported")
    return Buf((t.data or 0) + t.byte_offset, _prod(shape) * item, device, None, (obj, capsule))


def _from_buffer(obj, writable: bool) -> Buf:
    mv = memoryview(obj)
    if not mv.contiguous:
        raise InvalidArgumentError("kvfabric: buffer must be contiguous")
    mv = mv.cast("B")
    n = mv.nbytes
    if mv.readonly:
        if writable:
            raise InvalidArgumentError("kvfabric: destination buffer is read-only")
        if isinstance(obj, bytes):
            ptr = ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value or 0
            return Buf(ptr, n, False, None, obj)
        data = mv.tobytes()  # a read-only non-bytes buffer: one copy
        ptr = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
        return Buf(ptr, n, False, None, data)
    if n == 0:
        return Buf(0, 0, False, None, obj)
    arr = (ctypes.c_char * n).from_buffer(mv)
    return Buf(ctypes.addressof(arr), n, False, None, (obj, mv, arr))


def resolve(obj, writable: bool = False) -> Buf:
    """The region of obj; writable=True for destinations."""
    if isinstance(obj, Buf):
        return obj
    if isinstance(obj, tuple) and len(obj) == 2 and all(isinstance(v, int) for v in obj):
        ptr, n = obj
        if ptr < 0 or n < 0:
            raise InvalidArgumentError(f"kvfabric: bad region (ptr={ptr:#x}, nbytes={n})")
        return Buf(ptr, n, None, None, None)
    if _is_torch_tensor(obj):
        return _from_torch(obj, writable)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, writable)
    if hasattr(obj, "__array_interface__"):
        return _from_ai(obj, writable)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, writable)
    try:
        return _from_buffer(obj, writable)
    except TypeError:
        raise InvalidArgumentError(
            f"kvfabric: cannot use {type(obj).__name__} as a buffer (want a tensor, array, "
            "bytes-like object or (ptr, nbytes))"
        ) from None
