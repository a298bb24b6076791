"""A Mooncake-Store-compatible facade over kvfabric.

``MooncakeDistributedStore`` and its companions behave like
``mooncake.store``'s (the pybind11 module built from Mooncake's
``mooncake-integration/store/store_py.cpp``) for the calls LLM engines make —
SGLang HiCache, vLLM's Mooncake store connector, LMCache's Mooncake backend:
integer return codes instead of exceptions, Mooncake's error numbers (−200
no space, −704 not found, −705 already exists, −706 has lease, −600 invalid
params, −800 transfer failed, −900 RPC failed), positional batch results of
the keys' length, put-if-absent puts, upserts that replace. Only a wrong
argument name raises (TypeError, as pybind11 does). Every method is
thread-safe.

Install the ``kvfabric-mooncake-shim`` distribution (python/mooncake-shim)
so that unmodified ``from mooncake.store import MooncakeDistributedStore``
gets this class. python/README.md lists every method of Mooncake's class and
what it does here, and how setup() arguments map onto kvfabric's
configuration.
"""

from __future__ import annotations

import ctypes
import enum
import json
import logging
import os
import random
import re
import socket
import threading
from typing import Sequence

from .. import _exit
from .. import errors as _e
from .. import store as _store
from .._buffers import Buf, resolve
from ..errors import KvfabricError
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

# health_check() results (Mooncake's HealthCheckStatus).
HC_HEALTHY = 0
HC_NOT_INITIALIZED = 1
HC_MASTER_UNREACHABLE = 2

#: Mooncake's defaults and limits (mooncake-store/include/types.h).
DEFAULT_CLIENT_HTTP_PORT = 9300
DEFAULT_GLOBAL_SEGMENT_SIZE = 16 << 20
DEFAULT_LOCAL_BUFFER_SIZE = 16 << 20
MIN_SEGMENT_SIZE = 1 << 10
MAX_SEGMENT_SIZE = 1 << 40
#: ENABLE without soft_pin_ttl_ms: Mooncake's master default (30 min) and
#: the largest TTL it accepts (24 h).
DEFAULT_SOFT_PIN_TTL_MS = 30 * 60 * 1000
MAX_SOFT_PIN_TTL_MS = 24 * 60 * 60 * 1000
#: Where get_hostname()'s port comes from when local_hostname has none
#: (Mooncake binds its client RPC port there; MC_STORE_CLIENT_MIN_PORT and
#: MC_STORE_CLIENT_MAX_PORT override it, as in Mooncake).
MIN_PORT, MAX_PORT = 12300, 14300

#: Environment variable: a JSON object, or the path of a JSON file, whose
#: kvfabric configuration keys override what setup() derives from its
#: arguments (e.g. {"master_server_addr": "embedded"} for unmodified engines).
ENV_CONFIG = "KVFABRIC_CONFIG"

# How long close() waits for the native teardown before it lets it finish
# in the background (it waits there for other clients' read leases).
_CLOSE_WAIT_S = 0.5

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
    if isinstance(err, _Reject):
        return err.code
    if isinstance(err, KvfabricError):
        return to_mooncake(err.code)
    return INVALID_PARAMS if isinstance(err, (ValueError, TypeError, OverflowError)) else INTERNAL_ERROR


def _put_code(code: int) -> int:
    # Mooncake puts are put-if-absent: an existing key is success.
    return 0 if code == _e.ALREADY_EXISTS else to_mooncake(code)


class _Reject(Exception):
    """A request refused before it reached kvfabric, with Mooncake's code;
    the message is logged."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# ---- enums -------------------------------------------------------------------


class ObjectDataType(enum.IntEnum):
    """Mooncake's object classification (ReplicateConfig.data_type); kvfabric
    accepts it and does not use it."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class SoftPinAction(enum.IntEnum):
    """What a put or upsert does to the object's soft pin."""

    PRESERVE = 0  #: new object: none; upsert: keep the old object's
    ENABLE = 1  #: soft-pin (for soft_pin_ttl_ms, default 30 min)
    DISABLE = 2  #: no soft pin


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


# ---- ReplicateConfig ------------------------------------------------------------

_U64 = 1 << 64


def _uint(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _U64:
        raise TypeError(f"ReplicateConfig.{name}: want an unsigned 64-bit int, not {v!r}")
    return v


def _bool(name: str, v) -> bool:
    if not isinstance(v, (bool, int)):
        raise TypeError(f"ReplicateConfig.{name}: want a bool, not {v!r}")
    return bool(v)


def _strs(name: str, v) -> list[str]:
    if isinstance(v, (str, bytes)) or not all(isinstance(x, str) for x in v):
        raise TypeError(f"ReplicateConfig.{name}: want a list of str, not {v!r}")
    return list(v)


def _enum(cls, name: str, v):
    try:
        return cls(v)
    except (ValueError, TypeError):
        raise TypeError(f"ReplicateConfig.{name}: want a {cls.__name__}, not {v!r}") from None


class ReplicateConfig:
    """Mooncake's ReplicateConfig, with exactly its attributes (others raise
    AttributeError, values of the wrong type TypeError).

    ``replica_num`` → replicas; ``with_hard_pin`` → never evicted until
    removed; ``soft_pin_action`` ENABLE → evicted only after every unpinned
    object, for ``soft_pin_ttl_ms`` (default 30 min, at most 24 h),
    DISABLE → no soft pin, PRESERVE → none on a new object, the old
    object's on an upsert (a TTL with PRESERVE or DISABLE is −600);
    ``preferred_segments``/``preferred_segment`` → tried first (a store's
    get_hostname() names all of its segments); ``prefer_alloc_in_same_node``
    → as in Mooncake, −600 except in batch_put_from_multi_buffers with
    replica_num 1 (kvfabric places near the writer anyway);
    ``nof_replica_num``/``dfs_replica_num`` > 0 → −600 (no NVMe-oF or DFS
    tier); ``preferred_nof_segments``, ``data_type`` and ``group_ids`` are
    accepted and unused. ``with_soft_pin`` is kept as an alias (True:
    ENABLE, False: PRESERVE) for code written against older Mooncake.
    """

    __slots__ = ("_replica_num", "_nof_replica_num", "_dfs_replica_num", "_soft_pin_action", "_soft_pin_ttl_ms",
                 "_with_hard_pin", "_preferred_segments", "_preferred_nof_segments", "_preferred_segment",
                 "_prefer_alloc_in_same_node", "_data_type", "_group_ids")

    def __init__(self):
        self._replica_num = 1
        self._nof_replica_num = 0
        self._dfs_replica_num = 0
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms: int | None = None
        self._with_hard_pin = False
        self._preferred_segments: list[str] = []
        self._preferred_nof_segments: list[str] = []
        self._preferred_segment = ""
        self._prefer_alloc_in_same_node = False
        self._data_type = ObjectDataType.UNKNOWN
        self._group_ids: list[str] | None = None

    replica_num = property(lambda s: s._replica_num,
                           lambda s, v: setattr(s, "_replica_num", _uint("replica_num", v)))
    nof_replica_num = property(lambda s: s._nof_replica_num,
                               lambda s, v: setattr(s, "_nof_replica_num", _uint("nof_replica_num", v)))
    dfs_replica_num = property(lambda s: s._dfs_replica_num,
                               lambda s, v: setattr(s, "_dfs_replica_num", _uint("dfs_replica_num", v)))
    soft_pin_action = property(
        lambda s: s._soft_pin_action,
        lambda s, v: setattr(s, "_soft_pin_action", _enum(SoftPinAction, "soft_pin_action", v)))
    soft_pin_ttl_ms = property(
        lambda s: s._soft_pin_ttl_ms,
        lambda s, v: setattr(s, "_soft_pin_ttl_ms", None if v is None else _uint("soft_pin_ttl_ms", v)))
    with_hard_pin = property(lambda s: s._with_hard_pin,
                             lambda s, v: setattr(s, "_with_hard_pin", _bool("with_hard_pin", v)))
    preferred_segments = property(
        lambda s: s._preferred_segments,
        lambda s, v: setattr(s, "_preferred_segments", _strs("preferred_segments", v)))
    preferred_nof_segments = property(
        lambda s: s._preferred_nof_segments,
        lambda s, v: setattr(s, "_preferred_nof_segments", _strs("preferred_nof_segments", v)))
    prefer_alloc_in_same_node = property(
        lambda s: s._prefer_alloc_in_same_node,
        lambda s, v: setattr(s, "_prefer_alloc_in_same_node", _bool("prefer_alloc_in_same_node", v)))
    data_type = property(lambda s: s._data_type,
                         lambda s, v: setattr(s, "_data_type", _enum(ObjectDataType, "data_type", v)))
    group_ids = property(
        lambda s: s._group_ids,
        lambda s, v: setattr(s, "_group_ids", None if v is None else _strs("group_ids", v)))

    @property
    def preferred_segment(self) -> str:
        return self._preferred_segment

    @preferred_segment.setter
    def preferred_segment(self, v) -> None:
        if not isinstance(v, str):
            raise TypeError(f"ReplicateConfig.preferred_segment: want a str, not {v!r}")
        self._preferred_segment = v

    @property
    def with_soft_pin(self) -> bool:
        """Alias of older Mooncake: soft_pin_action == ENABLE."""
        return self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v) -> None:
        self._soft_pin_action = SoftPinAction.ENABLE if _bool("with_soft_pin", v) else SoftPinAction.PRESERVE

    def __str__(self) -> str:
        ttl = "default" if self._soft_pin_ttl_ms is None else str(self._soft_pin_ttl_ms)
        s = (f"ReplicateConfig: {{ replica_num: {self._replica_num}, nof_replica_num: {self._nof_replica_num}, "
             f"dfs_replica_num: {self._dfs_replica_num}, soft_pin_action: {self._soft_pin_action.name}, "
             f"soft_pin_ttl_ms: {ttl}, with_hard_pin: {int(self._with_hard_pin)}, "
             f"preferred_segments: [{', '.join(self._preferred_segments)}]")
        if self._preferred_segment:
            s += f", preferred_segment (deprecated): {self._preferred_segment}"
        s += (f", preferred_nof_segments: [{', '.join(self._preferred_nof_segments)}], "
              f"prefer_alloc_in_same_node: {int(self._prefer_alloc_in_same_node)}, "
              f"data_type: {self._data_type.name} }}")
        return s

    __repr__ = __str__


class _Opts:
    """A ReplicateConfig resolved for one call: the Store's put arguments."""

    __slots__ = ("replicas", "flags", "preferred", "ttl")

    def __init__(self, replicas: int, flags: int, preferred: list[str], ttl: int):
        self.replicas, self.flags, self.preferred, self.ttl = replicas, flags, preferred, ttl


def _segment_name(name: str) -> str:
    """A Mooncake segment name (host:port) as the kvfabric client id that
    names the same provider; kvfabric segment ids pass unchanged."""
    if "/" in name:
        return name
    return re.sub(r"[^A-Za-z0-9._:-]", "_", name)[:128]


def _resolve(config: ReplicateConfig | None, *, upsert: bool = False, same_node_ok: bool = False) -> _Opts:
    c = config if config is not None else ReplicateConfig()
    if not isinstance(c, ReplicateConfig):
        raise _Reject(INVALID_PARAMS, f"config must be a ReplicateConfig, not {type(c).__name__}")
    if c.replica_num < 1:
        raise _Reject(INVALID_PARAMS, f"replica_num={c.replica_num}: must be >= 1")
    if c.nof_replica_num or c.dfs_replica_num:
        raise _Reject(INVALID_PARAMS, "nof_replica_num/dfs_replica_num: kvfabric has no NVMe-oF or DFS tier")
    if c.prefer_alloc_in_same_node and not (same_node_ok and c.replica_num == 1):
        raise _Reject(INVALID_PARAMS, "prefer_alloc_in_same_node is not supported here (Mooncake: only in "
                                      "batch_put_from_multi_buffers, with replica_num=1)")
    action, ttl = c.soft_pin_action, c.soft_pin_ttl_ms
    if ttl is not None and action != SoftPinAction.ENABLE:
        raise _Reject(INVALID_PARAMS, f"soft_pin_ttl_ms={ttl} needs soft_pin_action=ENABLE (is {action.name})")
    flags, ttl_ms = 0, 0
    if c.with_hard_pin:
        flags |= _store.PUT_PIN
    if action == SoftPinAction.ENABLE:
        ttl_ms = DEFAULT_SOFT_PIN_TTL_MS if ttl is None else ttl
        if ttl_ms > MAX_SOFT_PIN_TTL_MS:
            raise _Reject(INVALID_PARAMS, f"soft_pin_ttl_ms={ttl_ms}: more than {MAX_SOFT_PIN_TTL_MS}")
        if ttl_ms > 0:  # a TTL of 0 ends the soft pin at once: none
            flags |= _store.PUT_SOFT_PIN
    elif action == SoftPinAction.PRESERVE and upsert:
        flags |= _store.PUT_KEEP_SOFT_PIN
    if upsert:
        flags |= _store.PUT_UPSERT
    segs = [_segment_name(s) for s in c.preferred_segments]
    if c.preferred_segment and _segment_name(c.preferred_segment) not in segs:
        segs.insert(0, _segment_name(c.preferred_segment))
    return _Opts(int(c.replica_num), flags, segs, ttl_ms if flags & _store.PUT_SOFT_PIN else 0)


# ---- results -------------------------------------------------------------------------


class BufferHandle(bytearray):
    """The bytes of one object, as Mooncake's BufferHandle: ``ptr()``,
    ``size()``, ``len()`` and the buffer protocol (``memoryview(h)``,
    ``numpy.frombuffer(h, …)``)."""

    def ptr(self) -> int:
        if not len(self):
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def size(self) -> int:
        return len(self)


class Descriptor:
    """Where one replica's bytes are (Mooncake's AllocatedBuffer
    descriptor): ``size`` bytes at ``buffer_address`` in the segment of the
    provider ``transport_endpoint``. kvfabric: ``buffer_address`` is the
    offset in the segment (a segment is not mapped at one address in every
    process), ``transport_endpoint`` the provider's client id — a facade
    store's get_hostname() — and ``segment``, ``node``, ``tier`` ("dram" or
    "hbm"), ``location`` (NUMA node or GPU) and ``handle`` ("posix_fd" or
    "fabric") say more."""

    __slots__ = ("size", "buffer_address", "transport_endpoint", "segment", "node", "tier", "location", "handle")

    def __init__(self, size=0, buffer_address=0, transport_endpoint="", segment="", node="", tier="",
                 location=-1, handle=""):
        self.size, self.buffer_address, self.transport_endpoint = size, buffer_address, transport_endpoint
        self.segment, self.node, self.tier, self.location, self.handle = segment, node, tier, location, handle

    def __repr__(self) -> str:
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint} segment={self.segment}>")


class MemoryDescriptor:
    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor: Descriptor):
        self.buffer_descriptor = buffer_descriptor


class ReplicaDescriptor:
    """One replica of an object (Mooncake's ReplicaDescriptor). kvfabric
    replicas are all memory replicas (DRAM or HBM) and COMPLETE: a get
    never sees a replica being written."""

    __slots__ = ("status", "_mem")

    def __init__(self, mem: MemoryDescriptor, status: ReplicaStatus = ReplicaStatus.COMPLETE):
        self.status = status
        self._mem = mem

    def is_memory_replica(self) -> bool:
        return True

    def is_disk_replica(self) -> bool:
        return False

    def is_local_disk_replica(self) -> bool:
        return False

    def get_memory_descriptor(self) -> MemoryDescriptor:
        return self._mem

    def get_disk_descriptor(self):
        raise RuntimeError("kvfabric: a memory replica has no disk descriptor")

    def __repr__(self) -> str:
        return f"<ReplicaDescriptor {self.status.name} {self._mem.buffer_descriptor!r}>"


def _replica_descriptors(reps: list[dict]) -> list[ReplicaDescriptor]:
    return [ReplicaDescriptor(MemoryDescriptor(Descriptor(
        size=r.get("length", 0), buffer_address=r.get("offset", 0), transport_endpoint=r.get("owner", ""),
        segment=r.get("segment", ""), node=r.get("node", ""), tier=r.get("tier", ""),
        location=r.get("location", -1), handle=r.get("handle", ""))))
        for r in reps]


# ---- host memory for setup_dummy --------------------------------------------------------


class MooncakeHostMemAllocator:
    """Page-aligned host memory for a store set up with setup_dummy():
    ``alloc(size)`` → pointer (0 on failure), ``free(ptr)`` → 0 or −1.

    In Mooncake this is shared memory that the dummy client's real client
    (another process) maps. kvfabric has no real-client process: register
    the memory with the store (``register_buffer``, as SGLang does for its
    host KV pool) and puts and gets copy it directly. Thread-safe."""

    _PROT_RW = 0x1 | 0x2  # PROT_READ | PROT_WRITE
    _MAP_PRIVATE_ANON = 0x02 | 0x20  # MAP_PRIVATE | MAP_ANONYMOUS (Linux)

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        self._mmap = libc.mmap
        self._mmap.restype = ctypes.c_void_p
        self._mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_long]
        self._munmap = libc.munmap
        self._munmap.restype = ctypes.c_int
        self._munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._lock = threading.Lock()  # guards _sizes
        self._sizes: dict[int, int] = {}

    def alloc(self, size: int) -> int:
        if not isinstance(size, int) or size <= 0:
            return 0
        p = self._mmap(None, size, self._PROT_RW, self._MAP_PRIVATE_ANON, -1, 0)
        if p is None or p == ctypes.c_void_p(-1).value:
            log.error("kvfabric: MooncakeHostMemAllocator.alloc(%d): mmap failed: %s", size,
                      os.strerror(ctypes.get_errno()))
            return 0
        with self._lock:
            self._sizes[p] = size
        return p

    def free(self, ptr: int) -> int:
        with self._lock:
            size = self._sizes.pop(ptr, None)
        if size is None:
            return -1
        return 0 if self._munmap(ptr, size) == 0 else -1


# ---- setup arguments ----------------------------------------------------------------------

# Mooncake setup arguments that kvfabric accepts and does not use, with why.
_UNUSED = {
    "metadata_server": "the kvfabric master carries segment descriptors; there is no metadata service",
    "rdma_devices": "no RDMA NICs: copies are GPU copies",
    "engine": "no transfer engine to share",
    "enable_ssd_offload": "no SSD tier",
    "ssd_offload_path": "no SSD tier",
    "enable_client_http_server": "no client HTTP server",
    "client_http_port": "no client HTTP server",
    "ipc_socket_path": "no dummy/real client IPC",
}
_logged_unused: set[str] = set()
_logged_lock = threading.Lock()


def _log_unused(names: list[str]) -> None:
    with _logged_lock:
        new = [n for n in names if n not in _logged_unused]
        _logged_unused.update(new)
    if new:
        log.warning("kvfabric: Mooncake setup options accepted without effect: %s",
                    "; ".join(f"{n} ({_UNUSED[n]})" for n in new))


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30,
          "T": 1 << 40, "TB": 1 << 40}


def parse_size(v) -> int:
    """A Mooncake size: an int, or a string like "16MB", "16 MB", "1.5 GB",
    "1048576" (units B/K/KB/M/MB/G/GB/T/TB, powers of 1024, any case).
    Raises ValueError otherwise ("50%", negative, junk)."""
    if isinstance(v, bool):
        raise ValueError(f"size {v!r}")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"size {v}")
        return v
    s = str(v)
    if s.strip() == "infinite":
        return _U64 - 1
    m = _SIZE_RE.match(s)
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"size {s!r}: want a number with an optional unit B, KB, MB, GB or TB")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _parse_bool(v) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on", "enable"):
        return True
    if s in ("0", "false", "no", "off", "disable"):
        return False
    raise ValueError(f"boolean {v!r}")


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


def _split_host(h: str) -> tuple[str, int | None]:
    """"host:port" → (host, port); no port → (host, None). IPv6 in brackets."""
    if h.startswith("["):
        end = h.find("]")
        rest = h[end + 1:]
        if end > 0 and rest.startswith(":") and rest[1:].isdigit():
            return h[: end + 1], int(rest[1:])
        return h, None
    host, sep, port = h.rpartition(":")
    if sep and host and ":" not in host and port.isdigit():
        return host, int(port)
    return h, None


def _port_range() -> tuple[int, int]:
    try:
        lo = int(os.environ.get("MC_STORE_CLIENT_MIN_PORT", MIN_PORT))
        hi = int(os.environ.get("MC_STORE_CLIENT_MAX_PORT", MAX_PORT))
    except ValueError:
        return MIN_PORT, MAX_PORT
    if not 0 < lo <= hi < 65536:
        return MIN_PORT, MAX_PORT
    return lo, hi


def _bind_port() -> socket.socket:
    """A TCP socket bound to a free port of the client port range, held for
    the store's lifetime so that no other store on the host takes the
    same name."""
    lo, hi = _port_range()
    ports = list(range(lo, hi + 1))
    random.shuffle(ports)
    for port in ports[:200]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("0.0.0.0", port))
            return s
        except OSError:
            s.close()
    raise _Reject(INTERNAL_ERROR, f"no free port in {lo}..{hi} for this store's name (host:port)")


def _raw(ptr: int, size: int) -> Buf:
    if not isinstance(ptr, int) or not isinstance(size, int) or ptr < 0 or size < 0:
        raise _e.InvalidArgumentError(f"bad buffer (ptr={ptr!r}, size={size!r})")
    return Buf(ptr, size, None, None, None)


# ---- the store -----------------------------------------------------------------------------


class MooncakeDistributedStore:
    """Mooncake's MooncakeDistributedStore over a kvfabric Store."""

    def __init__(self):
        self._lock = threading.Lock()  # guards the fields below across setup/close
        self._store: Store | None = None
        self._hostname = ""
        self._port: socket.socket | None = None  # holds get_hostname()'s port
        self._staging = 0  # Mooncake's local_buffer_size: the most a bytes put/get moves

    # ---- lifecycle ----------------------------------------------------------------

    def setup(self, local_hostname=None, metadata_server=None, global_segment_size=DEFAULT_GLOBAL_SEGMENT_SIZE,
              local_buffer_size=DEFAULT_LOCAL_BUFFER_SIZE, protocol="tcp", rdma_devices="",
              master_server_addr="127.0.0.1:50051", engine=None, enable_ssd_offload=False, ssd_offload_path="",
              tenant_id="default", enable_client_http_server=False, client_http_port=DEFAULT_CLIENT_HTTP_PORT,
              **kwargs) -> int:
        """``setup(local_hostname, metadata_server, global_segment_size=16MiB,
        local_buffer_size=16MiB, protocol="tcp", rdma_devices="",
        master_server_addr="127.0.0.1:50051", engine=None,
        enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
        enable_client_http_server=False, client_http_port=9300, **kwargs)``
        or ``setup(config_dict)`` with Mooncake's keys (values as strings or
        their types). Extra keyword arguments and dict keys are kvfabric
        configuration keys; KVFABRIC_CONFIG overrides the arguments, extra
        keyword arguments override both. Returns 0 or a negative code (the
        reason is logged)."""
        if isinstance(local_hostname, dict) and (metadata_server is not None or kwargs):
            raise TypeError("setup(config) takes no other arguments")
        try:
            if isinstance(local_hostname, dict):
                mc, extra = self._from_dict(local_hostname)
            else:
                mc = {"local_hostname": local_hostname, "metadata_server": metadata_server,
                      "global_segment_size": global_segment_size, "local_buffer_size": local_buffer_size,
                      "protocol": protocol, "rdma_devices": rdma_devices, "master_server_addr": master_server_addr,
                      "engine": engine, "enable_ssd_offload": enable_ssd_offload,
                      "ssd_offload_path": ssd_offload_path, "tenant_id": tenant_id,
                      "enable_client_http_server": enable_client_http_server,
                      "client_http_port": client_http_port}
                extra = {}
            return self._setup(mc, extra, kwargs)
        except Exception as err:  # noqa: BLE001 - Mooncake reports codes
            log.error("kvfabric: setup failed: %s", err)
            return _code(err)

    @staticmethod
    def _from_dict(d: dict) -> tuple[dict, dict]:
        """Mooncake's dict form. Mooncake converts every value with str();
        so do sizes, booleans and the port here. Keys Mooncake does not
        know are kvfabric configuration keys."""
        mc, extra = {}, {}
        aliases = {"master_server_address": "master_server_addr", "device_name": "rdma_devices"}
        known = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size", "protocol",
                 "rdma_devices", "master_server_addr", "ipc_socket_path", "enable_ssd_offload",
                 "ssd_offload_path", "tenant_id", "enable_client_http_server", "client_http_port"}
        for k, v in d.items():
            k = aliases.get(k, k)
            if k in known:
                mc[k] = v
            else:
                extra[k] = v
        for k in ("local_hostname", "metadata_server"):
            if not str(mc.get(k, "")):
                raise _Reject(INVALID_PARAMS, f"setup(config): missing required key {k}")
        for k in ("global_segment_size", "local_buffer_size"):
            if k in mc:
                mc[k] = parse_size(mc[k])
        for k in ("enable_ssd_offload", "enable_client_http_server"):
            if k in mc:
                try:
                    mc[k] = _parse_bool(mc[k])
                except ValueError:  # Mooncake: warn and use the default
                    log.warning("kvfabric: setup(config): %s=%r is not a boolean; using false", k, mc[k])
                    mc[k] = False
        if "client_http_port" in mc:
            mc["client_http_port"] = int(str(mc["client_http_port"]).strip())
        for k in ("local_hostname", "metadata_server", "protocol", "rdma_devices", "master_server_addr",
                  "ipc_socket_path", "ssd_offload_path", "tenant_id"):
            if k in mc:
                mc[k] = str(mc[k])
        mc.setdefault("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)
        mc.setdefault("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)
        mc.setdefault("protocol", "tcp")
        mc.setdefault("master_server_addr", "127.0.0.1:50051")
        return mc, extra

    def _setup(self, mc: dict, extra: dict, kwargs: dict) -> int:
        host_arg = mc["local_hostname"]
        if not isinstance(host_arg, str) or not host_arg.strip():
            raise _Reject(INVALID_PARAMS, f"local_hostname={host_arg!r}: must be a non-empty string")
        gss, lbs = parse_size(mc["global_segment_size"]), parse_size(mc["local_buffer_size"])
        if gss and gss < MIN_SEGMENT_SIZE:
            raise _Reject(INVALID_PARAMS, f"global_segment_size={gss}: must be 0 or at least {MIN_SEGMENT_SIZE}")
        if lbs and not MIN_SEGMENT_SIZE <= lbs <= MAX_SEGMENT_SIZE:
            raise _Reject(INVALID_PARAMS, f"local_buffer_size={lbs}: must be 0 or {MIN_SEGMENT_SIZE}..{MAX_SEGMENT_SIZE}")
        unused = ["metadata_server"] if mc.get("metadata_server") else []
        if mc.get("rdma_devices") not in (None, "", "auto-discovery"):
            unused.append("rdma_devices")
        for k, default in (("engine", None), ("enable_ssd_offload", False), ("ssd_offload_path", ""),
                           ("enable_client_http_server", False), ("client_http_port", DEFAULT_CLIENT_HTTP_PORT),
                           ("ipc_socket_path", "")):
            if mc.get(k, default) not in (default, None):
                unused.append(k)
        _log_unused(unused)

        host, port = _split_host(host_arg.strip())
        cfg = {"local_hostname": host, "global_segment_size": gss, "protocol": str(mc["protocol"]),
               "master_server_addr": str(mc["master_server_addr"])}
        tenant = str(mc.get("tenant_id") or "default").strip()
        if tenant not in ("", "default"):
            cfg["tenant"] = tenant
        cfg.update(extra)
        cfg.update(_env_config())
        cfg.update(kwargs)
        with self._lock:
            if self._store is not None:
                raise _Reject(INVALID_PARAMS, "setup called twice; close() first")
            bound = None
            if port is None:
                bound = _bind_port()
                port = bound.getsockname()[1]
            hostname = f"{host}:{port}"
            cfg.setdefault("client_id", _segment_name(hostname))
            try:
                st = Store(cfg)
            except BaseException:
                if bound is not None:
                    bound.close()
                raise
            self._store, self._hostname, self._port, self._staging = st, hostname, bound, lbs
        return 0

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int, server_address: str) -> int:
        """Mooncake's "dummy client" (SGLang's standalone_storage mode): a
        client without capacity of its own, whose host memory comes from
        MooncakeHostMemAllocator. kvfabric has no real-client process to
        attach to: this opens a consumer-only Store (global_segment_size 0)
        of the master named by KVFABRIC_CONFIG's master_server_addr, else
        server_address (then the address of a `kvfabric master`). Register
        the allocator's memory (register_buffer) for direct copies;
        mem_pool_size is not needed."""
        try:
            lbs = parse_size(local_buffer_size)
            parse_size(mem_pool_size)
            if not isinstance(server_address, str) or not server_address:
                raise _Reject(INVALID_PARAMS, f"server_address={server_address!r}")
            host = socket.gethostname() or "localhost"  # as kvfabric's default local_hostname
            return self._setup({"local_hostname": host, "metadata_server": "",
                                "global_segment_size": 0, "local_buffer_size": lbs, "protocol": "tcp",
                                "master_server_addr": server_address}, {}, {})
        except Exception as err:  # noqa: BLE001
            log.error("kvfabric: setup_dummy failed: %s", err)
            return _code(err)

    def close(self) -> int:
        """Tears down; idempotent. Waits at most about half a second: while
        other clients hold read leases on objects in this store's segments,
        the segments take no new puts or leases at once and are unmounted
        and freed when the leases end (interpreter exit waits for that).
        On a teardown failure returns a negative code and stays closable
        (call close() again to retry)."""
        with self._lock:
            s = self._store
            if s is None:
                return 0
            self._store = None
            port, self._port, self._hostname = self._port, None, ""
            result: list = []
            done = threading.Event()

            def finished(err):
                result.append(err)
                if err is None and port is not None:
                    port.close()  # the name is free once the teardown is
                done.set()
                if err is not None and returned.is_set():
                    log.error("kvfabric: close (in the background): %s", err)

            returned = threading.Event()
            _exit.close_in_background(s, finished)
            done.wait(_CLOSE_WAIT_S)
            returned.set()  # from now on finished() logs a failure itself
            if result and result[0] is not None:
                err = result[0]
                log.error("kvfabric: close: %s", err)
                self._store, self._port = s, port  # closable again
                return _code(err) if isinstance(err, Exception) else INTERNAL_ERROR
            return 0

    def _s(self) -> Store:
        s = self._store
        if s is None:
            raise _e.ClosedError("kvfabric: store not set up (call setup) or closed")
        return s

    def get_hostname(self) -> str:
        """``host:port``: this store's name, as Mooncake's segment name —
        ReplicateConfig.preferred_segment(s) naming it prefer its segments.
        The port is local_hostname's, or one of 12300..14300 held for the
        store's lifetime. "" before setup and after close."""
        return self._hostname

    def health_check(self) -> int:
        """0 healthy, 1 not set up or closed, 2 master unreachable."""
        s = self._store
        if s is None:
            return HC_NOT_INITIALIZED
        try:
            s.health()
            return HC_HEALTHY
        except _e.ClosedError:
            return HC_NOT_INITIALIZED
        except Exception:  # noqa: BLE001
            return HC_MASTER_UNREACHABLE

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

    # ---- puts -------------------------------------------------------------------------

    def _staged(self, key, n: int) -> None:
        if n > self._staging:
            raise _Reject(INVALID_PARAMS, f"key {key!r}: {n} bytes do not fit the local buffer "
                                          f"(local_buffer_size={self._staging})")

    def _put1(self, key, bufs: list[Buf], config, *, upsert: bool, staged: bool) -> int:
        try:
            s = self._s()
            o = _resolve(config, upsert=upsert)
            n = sum(b.nbytes for b in bufs)
            if staged:
                if n == 0:
                    raise _Reject(INVALID_PARAMS, f"key {key!r}: empty value")
                self._staged(key, n)
            elif n == 0:
                return 0  # Mooncake: a zero-size put_from/upsert_from stores nothing
            rc, _ = s._put(_key(key), bufs, None, o.replicas, o.flags, o.preferred, o.ttl)
            return _put_code(rc)
        except Exception as err:  # noqa: BLE001
            if isinstance(err, _Reject):
                log.error("kvfabric: %s", err)
            return _code(err)

    def _resolve_values(self, values) -> list[Buf]:
        return [resolve(v) for v in values]

    def put(self, key, value, config: ReplicateConfig | None = None) -> int:
        """Stores a bytes-like value (staged, at most local_buffer_size
        bytes); an existing key keeps its value and returns 0."""
        try:
            b = resolve(value)
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put1(key, [b], config, upsert=False, staged=True)

    def upsert(self, key, value, config: ReplicateConfig | None = None) -> int:
        """Like put, but replaces an existing value (readers holding a lease
        on the old one still read it)."""
        try:
            b = resolve(value)
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put1(key, [b], config, upsert=True, staged=True)

    def put_parts(self, key, *parts, config: ReplicateConfig | None = None) -> int:
        """Stores the concatenation of bytes-like parts."""
        try:
            bufs = self._resolve_values(parts)
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put1(key, bufs, config, upsert=False, staged=True)

    def upsert_parts(self, key, *parts, config: ReplicateConfig | None = None) -> int:
        try:
            bufs = self._resolve_values(parts)
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put1(key, bufs, config, upsert=True, staged=True)

    def put_from(self, key, buffer_ptr: int, size: int, config: ReplicateConfig | None = None) -> int:
        """Stores size bytes at buffer_ptr (registered host or device
        memory); size 0 stores nothing and returns 0, as in Mooncake."""
        try:
            bufs = [_raw(buffer_ptr, size)]
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put1(key, bufs, config, upsert=False, staged=False)

    def upsert_from(self, key, buffer_ptr: int, size: int, config: ReplicateConfig | None = None) -> int:
        try:
            bufs = [_raw(buffer_ptr, size)]
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put1(key, bufs, config, upsert=True, staged=False)

    def put_from_with_metadata(self, key, buffer_ptr: int, metadata_buffer_ptr: int, size: int, metadata_size: int,
                               config: ReplicateConfig | None = None) -> int:
        """Stores metadata ‖ data: metadata_size bytes at
        metadata_buffer_ptr followed by size bytes at buffer_ptr (registered
        host or device memory). size 0 stores nothing and returns 0.
        Failures are negative codes (Mooncake returns them negated)."""
        if size == 0:
            return 0
        try:
            bufs = [_raw(metadata_buffer_ptr, metadata_size), _raw(buffer_ptr, size)]
        except Exception as err:  # noqa: BLE001
            return _code(err)
        return self._put1(key, [b for b in bufs if b.nbytes], config, upsert=False, staged=False)

    def _putn(self, keys, parts: list[list[Buf]] | None, config, *, upsert: bool, staged: bool) -> list[int]:
        keys = list(keys)
        try:
            s = self._s()
            o = _resolve(config, upsert=upsert)
            if parts is None:
                raise _Reject(INVALID_PARAMS, f"{len(keys)} keys: buffer and size lists of other lengths")
            if not keys:
                return []
            if staged:
                for k, p in zip(keys, parts):
                    self._staged(k, sum(b.nbytes for b in p))
            codes, _ = s._batch_put([_key(k) for k in keys], parts, None, o.replicas, o.flags, o.preferred, o.ttl)
            return [_put_code(c) for c in codes]
        except Exception as err:  # noqa: BLE001
            if isinstance(err, _Reject):
                log.error("kvfabric: %s", err)
            return [_code(err)] * len(keys)

    def _bytes_batch(self, keys, values, config, upsert: bool) -> int:
        try:
            if len(keys) != len(values):
                raise _Reject(INVALID_PARAMS, f"{len(keys)} keys but {len(values)} values")
            parts = [[b] for b in self._resolve_values(values)]
            if any(p[0].nbytes == 0 for p in parts):
                raise _Reject(INVALID_PARAMS, "empty value")
        except Exception as err:  # noqa: BLE001
            if isinstance(err, _Reject):
                log.error("kvfabric: %s", err)
            return _code(err)
        return next((c for c in self._putn(keys, parts, config, upsert=upsert, staged=True) if c != 0), 0)

    def put_batch(self, keys: Sequence, values: Sequence, config: ReplicateConfig | None = None) -> int:
        """Stores bytes-like values; 0 or the first negative code."""
        return self._bytes_batch(keys, values, config, upsert=False)

    def upsert_batch(self, keys: Sequence, values: Sequence, config: ReplicateConfig | None = None) -> int:
        return self._bytes_batch(keys, values, config, upsert=True)

    def batch_put_from(self, keys: Sequence, buffer_ptrs: Sequence[int], sizes: Sequence[int],
                       config: ReplicateConfig | None = None) -> list[int]:
        """Per key: 0 (also when it already existed) or a negative code
        (−200 when the store is full)."""
        return self._putflat(keys, buffer_ptrs, sizes, config, upsert=False)

    def batch_upsert_from(self, keys: Sequence, buffer_ptrs: Sequence[int], sizes: Sequence[int],
                          config: ReplicateConfig | None = None) -> list[int]:
        return self._putflat(keys, buffer_ptrs, sizes, config, upsert=True)

    def _putflat(self, keys, ptrs, sizes, config, *, upsert: bool, multi: bool = False) -> list[int]:
        """batch_put_from / batch_upsert_from (one raw buffer per key) and
        batch_put_from_multi_buffers (multi: a list of them per key): the C
        arrays are built straight from the lists (no Buf per buffer)."""
        keys = list(keys)
        try:
            s = self._s()
            o = _resolve(config, upsert=upsert, same_node_ok=multi)
            if not keys:
                return []
            codes, _ = s._batch_put_flat(keys, ptrs, sizes, 0, o.replicas, o.flags, o.preferred, o.ttl, multi=multi)
        except Exception as err:  # noqa: BLE001
            if isinstance(err, _Reject):
                log.error("kvfabric: %s", err)
            return [_code(err)] * len(keys)
        if _store.all_ok(codes):
            return codes
        return [_put_code(c) for c in codes]

    def batch_put_from_multi_buffers(self, keys: Sequence, all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: ReplicateConfig | None = None) -> list[int]:
        """Like batch_put_from; key i is the concatenation of its buffers.
        What vLLM's Mooncake store connector calls: one key per KV block,
        its buffers the block in every layer's cache."""
        return self._putflat(keys, all_buffer_ptrs, all_sizes, config, upsert=False, multi=True)

    # ---- gets --------------------------------------------------------------------------

    def _get_bytes(self, key) -> bytes | None:
        try:
            rc, data, _ = self._s()._get_bytes(_key(key))
        except Exception:  # noqa: BLE001
            return None
        if rc != 0:
            return None
        if len(data) > self._staging:
            log.error("kvfabric: get %r: %d bytes do not fit the local buffer (local_buffer_size=%d)",
                      key, len(data), self._staging)
            return None
        return data

    def get(self, key) -> bytes:
        """The object's bytes (staged, at most local_buffer_size), or b"" on
        a miss or error."""
        data = self._get_bytes(key)
        return b"" if data is None else data

    def get_batch(self, keys: Sequence) -> list[bytes]:
        return [self.get(k) for k in keys]

    def get_buffer(self, key) -> BufferHandle | None:
        data = self._get_bytes(key)
        return None if data is None else BufferHandle(data)

    def batch_get_buffer(self, keys: Sequence) -> list[BufferHandle | None]:
        """One BufferHandle (a bytearray with ptr()/size()) per key, None on
        a miss."""
        return [self.get_buffer(k) for k in keys]

    def get_offload_rpc_read_count(self) -> int:
        """Reads served from another client's SSD tier: always 0 (kvfabric
        has no SSD tier)."""
        return 0

    def get_into(self, key, buffer_ptr: int, size: int) -> int:
        """Reads into [buffer_ptr, +size): bytes read, or a negative code
        (−704 miss, −600 buffer too small or not registered)."""
        try:
            b = _raw(buffer_ptr, size)
            rc, n, _ = self._s()._get1(_key(key), b.ptr, b.nbytes, 0)
            return n if rc == 0 else to_mooncake(rc)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def batch_get_into(self, keys: Sequence, buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> list[int]:
        """Per key: bytes read (> 0) or a negative code. One raw buffer per
        key: its C arrays are built straight from the lists."""
        return self._getflat(keys, buffer_ptrs, sizes, multi=False)

    def _getflat(self, keys, ptrs, sizes, *, multi: bool) -> list[int]:
        keys = list(keys)
        try:
            if not keys:
                return []
            codes, nread, _ = self._s()._batch_get_flat(keys, ptrs, sizes, multi=multi)
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        if _store.all_ok(codes):
            return nread
        return [n if c == 0 else to_mooncake(c) for c, n in zip(codes, nread)]

    def batch_get_into_multi_buffers(self, keys: Sequence, all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_alloc_in_same_node: bool = False) -> list[int]:
        """Like batch_get_into; key i is scattered over its buffers in order.
        prefer_alloc_in_same_node only groups Mooncake's transfers per
        segment; kvfabric batches all copies anyway."""
        return self._getflat(keys, all_buffer_ptrs, all_sizes, multi=True)

    def _capacity(self, s: Store, ptr: int) -> int:
        """Bytes from ptr to the end of the registered buffer holding it (0
        if none), as Mooncake sizes get_into_ranges destinations."""
        with s._lock:
            for p, n in s._regs.items():
                if p <= ptr < p + n:
                    return p + n - ptr
        return 0

    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[str]],
                        all_dst_offsets, all_src_offsets, all_sizes) -> list[list[list[int]]]:
        """Buffer-major ranged reads: for buffer i and its key j, fragment k
        copies all_sizes[i][j][k] bytes from offset all_src_offsets[i][j][k]
        of the object to buffer_ptrs[i] + all_dst_offsets[i][j][k]. Each
        buffer must lie in a registered buffer, which bounds it. Returns
        results shaped like all_dst_offsets: bytes copied, or a negative
        code (−704 missing key, −600 mismatched lists, a range past the end
        of the buffer or the object, an unregistered buffer)."""
        nbuf = len(buffer_ptrs)
        results = []
        for i in range(nbuf):
            keys = all_keys[i] if i < len(all_keys) else [None]
            rows = []
            for j in range(len(keys)):
                n = len(all_dst_offsets[i][j]) if i < len(all_dst_offsets) and j < len(all_dst_offsets[i]) else 1
                rows.append([INVALID_PARAMS] * n)
            results.append(rows)
        if not (nbuf == len(all_keys) == len(all_dst_offsets) == len(all_src_offsets) == len(all_sizes)):
            log.error("kvfabric: get_into_ranges: top-level lists of different lengths")
            return results
        try:
            s = self._s()
        except Exception:  # noqa: BLE001
            return results
        ks: list[bytes] = []
        ranges: list[list[tuple[int, int, int]]] = []
        where: list[tuple[int, int, int]] = []
        for i, ptr in enumerate(buffer_ptrs):
            cap = self._capacity(s, int(ptr)) if ptr else 0
            if cap == 0:
                continue
            keys, dsts, srcs, sizes = all_keys[i], all_dst_offsets[i], all_src_offsets[i], all_sizes[i]
            if not (len(keys) == len(dsts) == len(srcs) == len(sizes)):
                continue
            for j, key in enumerate(keys):
                if not (len(dsts[j]) == len(srcs[j]) == len(sizes[j])):
                    continue
                for k, (d, o, n) in enumerate(zip(dsts[j], srcs[j], sizes[j])):
                    if d < 0 or o < 0 or n < 0 or d > cap or n > cap - d:
                        continue  # past the destination buffer: −600
                    ks.append(_key(key))
                    ranges.append([(int(ptr) + d, o, n)])
                    where.append((i, j, k))
        if not ks:
            return results
        try:
            codes = s._get_ranges(ks, ranges)
        except Exception as err:  # noqa: BLE001
            codes = [_code(err)] * len(ks)
        for (i, j, k), c, r in zip(where, codes, ranges):
            results[i][j][k] = r[0][2] if c == 0 else to_mooncake(c)
        return results

    # ---- queries and removal -------------------------------------------------------------

    def is_exist(self, key) -> int:
        """1 when key exists (granting a read lease, as Mooncake's does), 0
        when not, negative on error."""
        return self.batch_is_exist([key])[0]

    def batch_is_exist(self, keys: Sequence) -> list[int]:
        """Per key: 1 present (read lease granted), 0 absent, negative on
        error."""
        keys = list(keys)
        if not keys:
            return []
        try:
            rc, out = self._s()._batch_exists(keys, lease=True)
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)
        if rc < 0:
            return [to_mooncake(rc)] * len(keys)
        if out.count(1) + out.count(0) == len(out):  # every key answered (two C loops)
            return out
        return [1 if v == 1 else (0 if v == 0 else to_mooncake(v)) for v in out]

    def get_size(self, key) -> int:
        try:
            return self._s().size(key)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def get_replica_desc(self, key) -> list[ReplicaDescriptor]:
        """The replicas of key ([] on a miss or error)."""
        return self.batch_get_replica_desc([key]).get(key, [])

    def batch_get_replica_desc(self, keys: Sequence) -> dict:
        """{key: [ReplicaDescriptor, …]} for the keys that exist."""
        keys = list(keys)
        try:
            res = self._s()._replicas([_key(k) for k in keys])
        except Exception as err:  # noqa: BLE001
            log.error("kvfabric: batch_get_replica_desc: %s", err)
            return {}
        return {k: _replica_descriptors(reps) for k, (code, _size, reps) in zip(keys, res) if code == 0}

    def remove(self, key, force: bool = False) -> int:
        try:
            self._s().remove(key, force)
            return 0
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def batch_remove(self, keys: Sequence, force: bool = False) -> list[int]:
        """Per key: 0 or a negative code (−704 missing, −706 leased)."""
        keys = list(keys)
        if not keys:
            return []
        try:
            return [to_mooncake(c) for c in self._s()._batch_remove(keys, force)]
        except Exception as err:  # noqa: BLE001
            return [_code(err)] * len(keys)

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Removes the keys (of this store's tenant) that the pattern
        matches anywhere (RE2 syntax, as Mooncake's std::regex_search);
        returns how many, or a negative code (−600 bad pattern)."""
        try:
            return self._s().remove_by_regex(regex_pattern, force)
        except Exception as err:  # noqa: BLE001
            return _code(err)

    def remove_all(self, force: bool = False) -> int:
        """Removes every object (of this store's tenant); the count removed,
        or a negative code."""
        try:
            return self._s().remove_all(force)
        except Exception as err:  # noqa: BLE001
            return _code(err)


__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "BufferHandle", "ObjectDataType", "SoftPinAction",
    "ReplicaStatus", "ReplicaDescriptor", "MemoryDescriptor", "Descriptor", "MooncakeHostMemAllocator",
    "to_mooncake",
]
