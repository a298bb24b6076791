"""Loading libkvfabric.so and declaring its C ABI (capi/kvfabric.h) for ctypes.

The library is loaded lazily, on first use, never at import. Loading starts
the Go runtime inside this process; it does not fork. ctypes releases the GIL
around every call into a CDLL, so long copies do not block other threads.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from array import array
from itertools import accumulate
from ctypes import (
    POINTER,
    c_char_p,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

#: Environment variable naming a prebuilt libkvfabric.so (takes precedence
#: over the copy built into the package).
ENV_LIB = "KVFABRIC_LIB"

ABI_VERSION = 2

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None

c_uintptr = ctypes.c_size_t  # uintptr_t on every Linux ABI we build for
_p_u64 = POINTER(c_uint64)
_p_i32 = POINTER(c_int32)
_p_u32 = POINTER(c_uint32)
_p_size = POINTER(c_size_t)

# name: (restype, argtypes)
_PROTOS = {
    "kvfabric_abi_version": (c_int32, []),
    "kvfabric_open": (c_int32, [c_char_p, c_size_t, POINTER(c_int64), c_void_p, c_size_t]),
    "kvfabric_close": (c_int32, [c_int64]),
    "kvfabric_cleanup_pending": (c_int32, [c_int64]),
    "kvfabric_last_error": (c_size_t, [c_int64, c_void_p, c_size_t]),
    "kvfabric_put": (
        c_int32,
        [c_int64, c_char_p, c_size_t, _p_u64, _p_u64, c_uint32, c_uintptr, c_int32, c_uint32, c_char_p, c_size_t,
         c_uint64],
    ),
    "kvfabric_get": (c_int32, [c_int64, c_char_p, c_size_t, _p_u64, _p_u64, c_uint32, c_uintptr, _p_u64]),
    "kvfabric_batch_put": (
        c_int32,
        [
            c_int64, c_size_t, POINTER(c_char_p), _p_size, _p_u64, _p_u64, _p_u32,
            c_uintptr, c_int32, c_uint32, c_char_p, c_size_t, c_uint64, _p_i32,
        ],
    ),
    "kvfabric_batch_get": (
        c_int32,
        [c_int64, c_size_t, POINTER(c_char_p), _p_size, _p_u64, _p_u64, _p_u32, c_uintptr, _p_u64, _p_i32],
    ),
    "kvfabric_put_bytes": (
        c_int32,
        [c_int64, c_char_p, c_size_t, c_void_p, c_uint64, c_int32, c_uint32, c_char_p, c_size_t, c_uint64],
    ),
    "kvfabric_get_bytes": (c_int32, [c_int64, c_char_p, c_size_t, c_void_p, c_uint64, _p_u64]),
    "kvfabric_exists": (c_int32, [c_int64, c_char_p, c_size_t]),
    "kvfabric_batch_exists": (c_int32, [c_int64, c_size_t, POINTER(c_char_p), _p_size, c_int32, _p_i32]),
    "kvfabric_batch_remove": (c_int32, [c_int64, c_size_t, POINTER(c_char_p), _p_size, c_int32, _p_i32]),
    "kvfabric_remove_matching": (c_int32, [c_int64, c_char_p, c_size_t, c_int32, _p_u64]),
    "kvfabric_batch_get_ranges": (
        c_int32,
        [c_int64, c_size_t, POINTER(c_char_p), _p_size, _p_u64, _p_u64, _p_u64, _p_u32, c_uintptr, _p_i32],
    ),
    "kvfabric_replicas": (c_int32, [c_int64, c_size_t, POINTER(c_char_p), _p_size, c_void_p, c_size_t, _p_u64, _p_i32]),
    "kvfabric_size": (c_int32, [c_int64, c_char_p, c_size_t, _p_u64]),
    "kvfabric_remove": (c_int32, [c_int64, c_char_p, c_size_t, c_int32]),
    "kvfabric_remove_all": (c_int32, [c_int64, c_int32, _p_u64]),
    "kvfabric_register_buffer": (c_int32, [c_int64, c_uintptr, c_uint64]),
    "kvfabric_unregister_buffer": (c_int32, [c_int64, c_uintptr]),
    "kvfabric_hostname": (c_int32, [c_int64, c_void_p, c_size_t, _p_size]),
    "kvfabric_driver": (c_int32, [c_int64, c_void_p, c_size_t, _p_size]),
    "kvfabric_handle_type": (c_int32, [c_int64, c_void_p, c_size_t, _p_size]),
    "kvfabric_health": (c_int32, [c_int64]),
}


# Added after 0.1.0 without an ABI bump (an added function breaks no
# caller), so a library of the same ABI may lack them: fn() names the
# missing one instead of failing the load.
_OPTIONAL = {
    "kvfabric_phases": (c_int32, [c_int64, _p_u64, c_size_t]),
    # The packed keys are a c_void_p: bytes, or the address of a str's
    # UTF-8 bytes (packed_keys_arg).
    "kvfabric_batch_put_packed": (
        c_int32,
        [c_int64, c_size_t, c_void_p, c_size_t, _p_u64, _p_u64, _p_u32, c_uintptr, c_int32, c_uint32, c_char_p,
         c_size_t, c_uint64, _p_i32],
    ),
    "kvfabric_batch_get_packed": (
        c_int32,
        [c_int64, c_size_t, c_void_p, c_size_t, _p_u64, _p_u64, _p_u32, c_uintptr, _p_u64, _p_i32],
    ),
    "kvfabric_acquire": (
        c_int32, [c_int64, c_size_t, POINTER(c_char_p), _p_size, POINTER(c_int64), _p_u64, _p_u64, _p_i32],
    ),
    "kvfabric_put_stream_begin": (
        c_int32, [c_int64, c_size_t, c_uintptr, c_int32, c_uint32, c_char_p, c_size_t, c_uint64, POINTER(c_int64)],
    ),
    "kvfabric_put_stream_feed": (
        c_int32, [c_int64, c_int64, c_size_t, POINTER(c_char_p), _p_size, _p_u64, _p_u64, _p_u32],
    ),
    "kvfabric_put_stream_feed_packed": (
        c_int32, [c_int64, c_int64, c_size_t, c_void_p, c_size_t, _p_u64, _p_u64, _p_u32],
    ),
    "kvfabric_put_stream_abort": (c_int32, [c_int64, c_int64]),
    "kvfabric_put_stream_end": (c_int32, [c_int64, c_int64, _p_i32]),
    "kvfabric_views_check": (c_int32, [c_int64, c_int64]),
    "kvfabric_views_release": (c_int32, [c_int64, c_int64]),
    "kvfabric_views_gather": (
        c_int32,
        [c_int64, c_int64, c_void_p, c_void_p, c_uint64, c_uint32, c_uint32, c_uint64, c_uint64, c_uint64, c_uint64,
         c_uintptr],
    ),
    "kvfabric_gather": (
        c_int32,
        [c_int64, c_size_t, POINTER(c_char_p), _p_size, c_void_p, c_void_p, c_uint64, c_uint32, c_uint32, c_uint64,
         c_uint64, c_uint64, c_uint64, c_uintptr],
    ),
}


def library_path() -> str:
    """The path of the libkvfabric.so that lib() loads."""
    env = os.environ.get(ENV_LIB)
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "libkvfabric.so")


def lib() -> ctypes.CDLL:
    """Loads libkvfabric.so once per process and returns it."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = library_path()
            if not os.path.exists(path):
                raise ImportError(
                    f"kvfabric: native library not found at {path!r}; install with "
                    f"`pip install ./python` (needs the Go toolchain) or set {ENV_LIB} "
                    "to a prebuilt libkvfabric.so"
                )
            dll = ctypes.CDLL(path)
            for name, (res, args) in _PROTOS.items():
                fn = getattr(dll, name)
                fn.restype = res
                fn.argtypes = args
            for name, (res, args) in _OPTIONAL.items():
                fn = getattr(dll, name, None)
                if fn is not None:
                    fn.restype = res
                    fn.argtypes = args
            v = dll.kvfabric_abi_version()
            if v != ABI_VERSION:
                raise ImportError(f"kvfabric: {path} has C ABI version {v}, this package needs {ABI_VERSION}")
            _check_release(dll, path)
            _lib = dll
    return _lib


def _release_of(dll: ctypes.CDLL) -> str | None:
    # kvfabric_version came in 0.1.0 without an ABI bump (an added function
    # breaks no caller), so a library of the same ABI may lack it.
    fn = getattr(dll, "kvfabric_version", None)
    if fn is None:
        return None
    fn.restype = c_char_p
    fn.argtypes = []
    return fn().decode()


def _check_release(dll: ctypes.CDLL, path: str) -> None:
    """Warns when the library is not the release of this package. The C ABI
    version (checked before, an error when it differs) decides whether the
    two work together; a different release of the same ABI works, but is
    rarely what was meant — typically a stale KVFABRIC_LIB."""
    from ._version import __version__

    got = _release_of(dll)
    if got != __version__:
        warnings.warn(
            f"kvfabric: {path} is kvfabric {got or 'older than 0.1.0'}, this Python package is {__version__}"
            + (f" ({ENV_LIB} is set)" if os.environ.get(ENV_LIB) else ""),
            RuntimeWarning,
            stacklevel=3,
        )


def library_version() -> str | None:
    """The release of the loaded libkvfabric.so (kvfabric_version()), or None
    for a library older than 0.1.0."""
    return _release_of(lib())


def fn(name: str):
    """The library's function name, one of those added after 0.1.0
    (_OPTIONAL); raises NotImplementedError when the loaded library
    predates it."""
    f = getattr(lib(), name, None)
    if f is None:
        raise NotImplementedError(
            f"kvfabric: {library_path()} has no {name} (kvfabric {_release_of(lib()) or 'older than 0.1.0'}); "
            f"this Python package needs a newer library" + (f" ({ENV_LIB} is set)" if os.environ.get(ENV_LIB) else "")
        )
    return f


def last_error(handle: int) -> str:
    """The last error message recorded on handle (0: process-wide)."""
    dll = lib()
    buf = ctypes.create_string_buffer(512)
    n = dll.kvfabric_last_error(handle, buf, len(buf))
    if n >= len(buf):
        buf = ctypes.create_string_buffer(n + 1)
        n = dll.kvfabric_last_error(handle, buf, len(buf))
    return buf.raw[: min(n, len(buf) - 1)].decode("utf-8", "replace")


def u64_array(values) -> ctypes.Array:
    return (c_uint64 * len(values))(*values)


def key_arrays(keys: list[bytes]):
    """A char* array and a size_t array for keys (bytes objects kept alive by the caller)."""
    n = len(keys)
    return (c_char_p * n)(*keys), (c_size_t * n)(*map(len, keys))


# Arrays for large batches, built by the array module's C loops instead of
# one ctypes conversion per element (a ctypes array of n values built from
# *values costs about 0.1 µs per value; these about a tenth of that), and
# handed to ctypes as views (from_buffer keeps the array alive).


# U64 is the array typecode of unsigned 64-bit integers that converts a
# list of ints fastest: "L" (unsigned long) where it is 8 bytes, as on
# Linux and macOS, where a batch's two arrays of 4096 ints took 54-58 µs
# against 108-133 µs as "Q" (dev VM, CPython 3; docs/perf/
# logs-2026-12-06-s31/devvm/pyprep-quiet.txt); "Q" elsewhere (Windows: a
# 4-byte long). Both refuse
# a negative value (OverflowError) and a non-integer (TypeError).
U64 = "L" if array("L").itemsize == 8 else "Q"


def u64_view(values) -> ctypes.Array:
    """A c_uint64 array of values: OverflowError for a negative value,
    TypeError for a non-integer."""
    a = array(U64, values)
    if not a:
        return (c_uint64 * 0)()
    return (c_uint64 * len(a)).from_buffer(a)


def _str_utf8():
    """CPython's PyUnicode_AsUTF8AndSize through ctypes (None elsewhere): the
    address of a str's UTF-8 bytes, which the str keeps — for an ASCII str
    its own characters, so nothing is copied."""
    try:
        f = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    except (AttributeError, ValueError):
        return None
    f.restype = c_void_p
    f.argtypes = [ctypes.py_object, POINTER(ctypes.c_ssize_t)]
    return f


_utf8 = _str_utf8()


def packed_keys_arg(keys: list):
    """The keys of kvfabric_batch_put_packed as (argument, size, keep): the
    keys joined by NUL (joined_keys), passed as the address of the joined
    str's UTF-8 bytes where CPython gives it (no encoded copy), else as
    bytes. For 4096 keys of 37 bytes join and encode took 38 µs in some runs
    of a dev VM and 137–157 µs in others — two 150 KB buffers alive at once,
    which malloc then maps and faults in afresh —, the join alone 30–45 µs.
    keep holds what the address points into; the caller keeps it until the
    call returns. None when joined_keys gives None."""
    if keys and _utf8 is not None and isinstance(keys[0], str):
        try:
            j = "\0".join(keys)
        except TypeError:
            return None
        size = ctypes.c_ssize_t()
        try:
            p = _utf8(j, ctypes.byref(size))
        except UnicodeEncodeError:
            return None
        return p, size.value, j
    b = joined_keys(keys)
    return None if b is None else (b, len(b), b)


def joined_keys(keys: list) -> bytes | None:
    """The keys of kvfabric_batch_put_packed: one bytes object, the keys
    separated by single NUL bytes, built by one join (for 4096 keys about a
    tenth of the time of packed_keys and the per-key encode before it).
    None when the keys cannot be joined: a key that is neither str nor
    bytes, a str that does not encode as UTF-8, or keys of both kinds. A key
    holding a NUL byte is not looked for here (that would be a pass over
    every key): the library counts more than n keys and refuses the batch
    before doing anything, and the caller then passes key arrays."""
    if not keys:
        return b""
    try:
        return "\0".join(keys).encode() if isinstance(keys[0], str) else b"\0".join(keys)
    except (TypeError, UnicodeEncodeError):
        return None


def packed_keys(keys: list[bytes]):
    """key_arrays for a large batch: the keys joined into one bytes object,
    and pointers into it. Returns (char* array, size_t array, the joined
    bytes): the caller keeps the third alive until the call returns."""
    return packed_joined(b"".join(keys), array(U64, map(len, keys)))


def packed_joined(joined: bytes, lens: array):
    """packed_keys of keys already joined (no separator) into joined, key i
    lens[i] bytes long."""
    n = len(lens)
    base = ctypes.cast(c_char_p(joined), c_void_p).value or 0
    ptrs = array(U64, accumulate(lens, initial=base))  # n + 1: the last is the end
    if n == 0:
        return (c_char_p * 0)(), (c_size_t * 0)(), joined
    return (c_char_p * n).from_buffer(ptrs), (c_size_t * n).from_buffer(lens), joined
