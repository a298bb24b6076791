"""A Mooncake-Store-compatible facade over kvfabric.

``MooncakeDistributedStore`` and ``ReplicateConfig`` behave like
``mooncake.store``'s (the pybind11 module built from Mooncake's
``mooncake-integration/store/store_py.cpp``) for the calls LLM engines make —
SGLang HiCache, vLLM's Mooncake store connector, LMCache's Mooncake backend:
integer return codes instead of exceptions, Mooncake's error numbers (−200
no space, −704 not found, −705 already exists, −706 has lease, −600 invalid
params, −800 transfer failed, −900 RPC failed), positional batch results of
the keys' length, put-if-absent puts. Every method is thread-safe.

Install the ``kvfabric-mooncake-shim`` distribution (python/mooncake-shim)
so that unmodified ``from mooncake.store import MooncakeDistributedStore``
gets this class. See python/README.md for how setup() arguments map onto
kvfabric's configuration.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Sequence

from .. import errors as _e
from .._buffers import Buf, resolve
from ..errors import KvfabricError
from .. import store as _store
from ..store import Store, _key

log = logging.getLogger("kvfabric.compat.mooncake")

# Mooncake ErrorCode values used here.
INTERNAL_ERROR = -1
NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
TRANSFER_FAIL = -800
RPC_FAIL = -900

#: Environment variable: a JSON object, or the path of a JSON file, whose
#: kvfabric configuration keys override what setup() derives from its
#: arguments (e.g. {"master_server_addr": "embedded"} for unmodified engines).
ENV_CONFIG = "KVFABRIC_CONFIG"

_MIB = 1 << 20

# kvfabric status -> Mooncake code, for statuses Mooncake has no number for.
_TO_MOONCAKE = {
    _e.CONFIG: INVALID_PARAMS,
    _e.CLOSED: INVALID_PARAMS,  # Mooncake: client not initialized
    _e.INVALID_HANDLE: INVALID_PARAMS,
    _e.BUFFER_TOO_SMALL: INVALID_PARAMS,  # Mooncake get_into: buffer too small
    _e.NOT_REGISTERED: INVALID_PARAMS,
    _e.ALREADY_REGISTERED: INVALID_PARAMS,
    _e.LEASE_EXPIRED: TRANSFER_FAIL,
    _e.CLEANUP_PENDING: INTERNAL_ERROR,
    _e.PANIC: INTERNAL_ERROR,
    _e.BUFFER_IN_USE: INTERNAL_ERROR,  # Mooncake has no "busy" for buffers
    _e.PERMISSION: INTERNAL_ERROR,  # nor a permission code
}


def to_mooncake(code: int) -> int:
    """Maps a kvfabric status to Mooncake's ErrorCode number."""
    if code >= 0:
        return code
    return _TO_MOONCAKE.get(code, code)


def _code(err: BaseException) -> int:
    if isinstance(err, KvfabricError):
        return to_mooncake(err.code)
    return INVALID_PARAMS if isinstance(err, (ValueError, TypeError)) else INTERNAL_ERROR


def _put_code(code: int) -> int:
    # Mooncake puts are put-if-absent: an existing key is success.
    return 0 if code == _e.ALREADY_EXISTS else to_mooncake(code)


class ReplicateConfig:
    """Mooncake's ReplicateConfig. ``replica_num`` → replicas;
    ``with_hard_pin`` → the object is pinned against eviction;
    ``with_soft_pin`` → it is evicted only after every unpinned object (it
    still goes under pressure, as in Mooncake); ``preferred_segments`` (or ``preferred_segment``) → segments
    tried first; ``group_ids`` and ``prefer_alloc_in_same_node`` are accepted
    (placement already prefers the DRAM tier near the caller's GPU)."""

    def __init__(self):
        self.replica_num = 1
        self.with_soft_pin = False
        self.with_hard_pin = False
        self.preferred_segment = ""
        self.preferred_segments: list[str] = []
        self.group_ids: list[str] = []
        self.prefer_alloc_in_same_node = False

    def _options(self) -> dict:
        segs = list(self.preferred_segments or ())
        if self.preferred_segment and self.preferred_segment not in segs:
            segs.insert(0, self.preferred_segment)
        if int(self.replica_num) < 1:
            raise _e.InvalidArgumentError(f"ReplicateConfig.replica_num={self.replica_num}: must be >= 1")
        return {
            "replicas": int(self.replica_num),
            "flags": _store.PUT_PIN if self.with_hard_pin else (_store.PUT_SOFT_PIN if self.with_soft_pin else 0),
            "preferred": segs,
        }

    def __str__(self) -> str:
        return (
            f"ReplicateConfig(replica_num={self.replica_num}, with_soft_pin={self.with_soft_pin}, "
            f"with_hard_pin={self.with_hard_pin}, preferred_segment={self.preferred_segment!r}, "
            f"preferred_segments={self.preferred_segments}, group_ids={self.group_ids})"
        )

    __repr__ = __str__


def _opts(config: ReplicateConfig | None) -> dict:
    return (config or ReplicateConfig())._options()


class BufferHandle(bytearray):
    """The bytes of one object, as Mooncake's BufferHandle: ``ptr()``,
    ``size()``, ``len()`` and the buffer protocol (``memoryview(h)``,
    ``numpy.frombuffer(h, …)``)."""

    def ptr(self) -> int:
        import ctypes

        if not len(self):
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def size(self) -> int:
        return len(self)


def _translate(cfg: dict) -> dict:
    """Mooncake setup arguments → kvfabric configuration keys."""
    out = {}
    for k, v in cfg.items():
        if v is None:
            continue
        if k in ("metadata_server", "rdma_devices", "device_name", "engine"):
            continue  # accepted, unused (see README)
        if k == "master_server_address":
            k = "master_server_addr"
        out[k] = v
    return out


def _env_config() -> dict:
    v = os.environ.get(ENV_CONFIG, "").strip()
    if not v:
        return {}
    if not v.startswith("{"):
        with open(v, "rb") as f:
            v = f.read().decode()
    d = json.loads(v)
    if not isinstance(d, dict):
        raise _e.ConfigError(f"{ENV_CONFIG}: want a JSON object")
    return d


def _raw(ptr: int, size: int) -> Buf:
    if not isinstance(ptr, int) or not isinstance(size, int) or ptr < 0 or size < 0:
        raise _e.InvalidArgumentError(f"bad buffer (ptr={ptr!r}, size={size!r})")
    return Buf(ptr, size, None, None, None)


class MooncakeDistributedStore:
    """Mooncake's MooncakeDistributedStore over a kvfabric Store."""

    def __init__(self):
        self._lock = threading.Lock()  # guards _store across setup/close
        self._store: Store | None = None

    # ---- lifecycle ----------------------------------------------------------

    def setup(self, local_hostname=None, metadata_server=None, global_segment_size=16 * _MIB,
              local_buffer_size=16 * _MIB, protocol="tcp", rdma_devices="",
              master_server_addr="127.0.0.1:50051", engine=None, **kwargs) -> int:
        """``setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr,
        engine=None, **kwargs)`` or ``setup(config_dict)``. Extra keyword
        arguments and dict keys are kvfabric configuration keys. Returns 0 or
        a negative code (the reason is logged)."""
        if isinstance(local_hostname, dict):
            cfg = _translate(dict(local_hostname))
        else:
            cfg = _translate({
                "local_hostname": local_hostname,
                "metadata_server": metadata_server,
                "global_segment_size": global_segment_size,
                "local_buffer_size": local_buffer_size,
                "protocol": protocol,
                "rdma_devices": rdma_devices,
                "master_server_addr": master_server_addr,
            })
            if engine is not None:
                log.info("kvfabric: setup(engine=...) ignored: kvfabric copies with the GPU, not a transfer engine")
        try:
            cfg.update(_env_config())
            cfg.update(_translate(kwargs))
            with self._lock:
                if self._store is not None:
                    log.error("kvfabric: setup called twice; close() first")
                    return INVALID_PARAMS
                self._store = Store(cfg)
            return 0
        except Exception as err:  # noqa: BLE001 - Mooncake reports codes
            log.error("kvfabric: setup failed: %s", err)
            return _code(err)

    def close(self) -> int:
        """Tears down; idempotent. On failure returns a negative code and
        stays closable (call close() again to retry)."""
        with self._lock:
            s = self._store
            if s is None:
                return 0
            try:
                s.close()
            except KvfabricError as err:
                log.error("kvfabric: close: %s", err)
                return _code(err)
            self._store = None
            return 0

    def _s(self) -> Store:
        s = self._store
        if s is None:
            raise _e.ClosedError("kvfabric: store not set up (call setup) or closed")
        return s

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        try:
            self._s().register_buffer(int(buffer_ptr), int(size))
            return 0
        except Exception as err:  # noqa: BLE001
            log.error("kvfabric: register_buffer(%#x, %d): %s", buffer_ptr, size, err)
            return _code(err)

    def unregister_buffer(self, buffer_ptr: int) -> int:
        try:
            self._s().unregister_buffer(int(buffer_ptr))
            return 0
        except Exception as err:  # noqa: BLE001
            log.error("kvfabric: unregister_buffer(%#x): %s", buffer_ptr, err)
            return _code(err)

    def get_hostname(self) -> str:
        try:
            return self._s().hostname
        except Exception:  # noqa: BLE001
            return ""

    def health_check(self) -> int:
        """0 when healthy, else a negative code."""
        try:
            self._s().health()
            return 0
        except Exception as err:  # noqa: BLE001
            return _code(err)

    # ---- single key ------------------------------------------------------------

    def _put(self, key, bufs: list[Buf], config) -> int:
        try:
            o = _opts(config)
            if sum(b.nbytes for b in bufs) == 0:
                return INVALID_PARAMS  # Mooncake rejects empty objects
            rc, _ = self._s()._put(_key(key), bufs, None, o["replicas"], o["flags"], o["preferred"])
            return _put_code(rc)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def put(self, key, value, config: ReplicateConfig | None = None) -> int:
        """Stores a bytes-like value; an existing key keeps its value and
        returns 0."""
        try:
            b = resolve(value)
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put(key, [b], config)

    def put_parts(self, key, *parts, config: ReplicateConfig | None = None) -> int:
        """Stores the concatenation of bytes-like parts."""
        try:
            bufs = [resolve(p) for p in parts]
        except Exception as err:  # noqa: BLE001
            return _code(err)
        if not bufs:
            return INVALID_PARAMS
        return self._put(key, bufs, config)

    def put_from(self, key, buffer_ptr: int, size: int, config: ReplicateConfig | None = None) -> int:
        """Stores size bytes at buffer_ptr (registered host or device memory)."""
        try:
            return self._put(key, [_raw(buffer_ptr, size)], config)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def put_batch(self, keys: Sequence, values: Sequence, config: ReplicateConfig | None = None) -> int:
        if len(keys) != len(values):
            return INVALID_PARAMS
        for k, v in zip(keys, values):
            rc = self.put(k, v, config)
            if rc != 0:
                return rc
        return 0

    def get(self, key) -> bytes:
        """The object's bytes, or b"" on a miss or error."""
        try:
            rc, data, _ = self._s()._get_bytes(_key(key))
            return data if rc == 0 else b""
        except Exception:  # noqa: BLE001
            return b""

    def get_batch(self, keys: Sequence) -> list[bytes]:
        return [self.get(k) for k in keys]

    def get_buffer(self, key) -> BufferHandle | None:
        try:
            rc, data, _ = self._s()._get_bytes(_key(key))
        except Exception:  # noqa: BLE001
            return None
        return BufferHandle(data) if rc == 0 else None

    def batch_get_buffer(self, keys: Sequence) -> list[BufferHandle | None]:
        """One BufferHandle (a bytearray with ptr()/size()) per key, None on
        a miss."""
        return [self.get_buffer(k) for k in keys]

    def get_into(self, key, buffer_ptr: int, size: int) -> int:
        """Reads into [buffer_ptr, +size): bytes read, or a negative code
        (−704 miss, −600 buffer too small or not registered)."""
        try:
            rc, n, _ = self._s()._get(_key(key), [_raw(buffer_ptr, size)], None)
            return n if rc == 0 else to_mooncake(rc)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def is_exist(self, key) -> int:
        """1 when key exists, 0 when not, negative on error."""
        try:
            return 1 if self._s().exists(key) else 0
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def batch_is_exist(self, keys: Sequence) -> list[int]:
        """Per key: 1 present, 0 absent, negative on error."""
        keys = list(keys)
        try:
            rc, out = self._s()._batch_exists([_key(k) for k in keys])
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        if rc < 0:
            return [to_mooncake(rc)] * len(keys)
        return [1 if v == 1 else (0 if v == 0 else to_mooncake(v)) for v in out]

    def get_size(self, key) -> int:
        try:
            return self._s().size(key)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def remove(self, key, force: bool = False) -> int:
        try:
            self._s().remove(key, force)
            return 0
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def remove_all(self, force: bool = False) -> int:
        """Removes every object; the count removed, or a negative code."""
        try:
            return self._s().remove_all(force)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    # ---- batches ----------------------------------------------------------------

    def _batch_put(self, keys, parts: list[list[Buf]], config) -> list[int]:
        try:
            o = _opts(config)
            codes, _ = self._s()._batch_put([_key(k) for k in keys], parts, None, o["replicas"], o["flags"],
                                            o["preferred"])
            return [_put_code(c) for c in codes]
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)

    def _batch_get(self, keys, parts: list[list[Buf]]) -> list[int]:
        try:
            codes, sizes, _ = self._s()._batch_get([_key(k) for k in keys], parts, None)
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        return [n if c == 0 else to_mooncake(c) for c, n in zip(codes, sizes)]

    @staticmethod
    def _single(keys, ptrs, sizes) -> list[list[Buf]] | None:
        if not (len(keys) == len(ptrs) == len(sizes)):
            return None
        return [[_raw(p, s)] for p, s in zip(ptrs, sizes)]

    @staticmethod
    def _multi(keys, all_ptrs, all_sizes) -> list[list[Buf]] | None:
        if not (len(keys) == len(all_ptrs) == len(all_sizes)):
            return None
        out = []
        for ps, ss in zip(all_ptrs, all_sizes):
            if len(ps) != len(ss) or not ps:
                return None
            out.append([_raw(p, s) for p, s in zip(ps, ss)])
        return out

    def batch_put_from(self, keys: Sequence, buffer_ptrs: Sequence[int], sizes: Sequence[int],
                       config: ReplicateConfig | None = None) -> list[int]:
        """Per key: 0 (also when it already existed) or a negative code
        (−200 when the store is full)."""
        try:
            parts = self._single(keys, buffer_ptrs, sizes)
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        if parts is None:
            return [INVALID_PARAMS] * len(keys)
        return self._batch_put(keys, parts, config)

    def batch_get_into(self, keys: Sequence, buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> list[int]:
        """Per key: bytes read (> 0) or a negative code."""
        try:
            parts = self._single(keys, buffer_ptrs, sizes)
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        if parts is None:
            return [INVALID_PARAMS] * len(keys)
        return self._batch_get(keys, parts)

    def batch_put_from_multi_buffers(self, keys: Sequence, all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: ReplicateConfig | None = None) -> list[int]:
        """Like batch_put_from; key i is the concatenation of its buffers."""
        try:
            parts = self._multi(keys, all_buffer_ptrs, all_sizes)
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        if parts is None:
            return [INVALID_PARAMS] * len(keys)
        return self._batch_put(keys, parts, config)

    def batch_get_into_multi_buffers(self, keys: Sequence, all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_alloc_in_same_node: bool = False) -> list[int]:
        """Like batch_get_into; key i is scattered over its buffers in order."""
        try:
            parts = self._multi(keys, all_buffer_ptrs, all_sizes)
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        if parts is None:
            return [INVALID_PARAMS] * len(keys)
        return self._batch_get(keys, parts)


__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "BufferHandle", "to_mooncake"]
