"""kvfabric: a KV-cache store for LLM serving, from Python.

    import kvfabric
    with kvfabric.Store({"driver": "sim", "global_segment_size": "64MiB"}) as s:
        s.put("k", tensor)
        s.get("k", out)

One kvfabric library per process. The native library is loaded on first use
(not at import) and starts the Go runtime in this process; after that, start
worker processes with multiprocessing's ``spawn`` (or ``forkserver``) start
method, never ``fork``.
"""

from ._version import __version__
from .errors import (
    AlreadyExistsError,
    AlreadyRegisteredError,
    BufferInUseError,
    BufferTooSmallError,
    CleanupPendingError,
    ClosedError,
    ConfigError,
    HasLeaseError,
    InternalError,
    InvalidArgumentError,
    InvalidHandleError,
    KvfabricError,
    LeaseExpiredError,
    NotFoundError,
    NotRegisteredError,
    PanicError,
    PermissionDeniedError,
    RPCError,
    StoreFullError,
    TransferError,
)
from ._views import View, Views
from .store import Store, status_name

__all__ = [
    "__version__",
    "Store",
    "View",
    "Views",
    "status_name",
    "KvfabricError",
    "AlreadyExistsError",
    "AlreadyRegisteredError",
    "BufferInUseError",
    "PermissionDeniedError",
    "BufferTooSmallError",
    "CleanupPendingError",
    "ClosedError",
    "ConfigError",
    "HasLeaseError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidHandleError",
    "LeaseExpiredError",
    "NotFoundError",
    "NotRegisteredError",
    "PanicError",
    "RPCError",
    "StoreFullError",
    "TransferError",
]
