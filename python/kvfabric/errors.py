"""Exceptions for kvfabric status codes (capi/kvfabric.h).

Every exception carries the native status in ``code`` and the native
message as its text.
"""

from __future__ import annotations

# Status codes: Mooncake's numbers where Mooncake has the condition.
OK = 0
INTERNAL = -1
NO_SPACE = -200
INVALID_ARGUMENT = -600
NOT_FOUND = -704
ALREADY_EXISTS = -705
HAS_LEASE = -706
TRANSFER = -800
RPC = -900
CONFIG = -3001
CLOSED = -3002
CLEANUP_PENDING = -3003
BUFFER_TOO_SMALL = -3004
NOT_REGISTERED = -3005
ALREADY_REGISTERED = -3006
LEASE_EXPIRED = -3007
INVALID_HANDLE = -3008
PANIC = -3009
BUFFER_IN_USE = -3010
PERMISSION = -3011


class KvfabricError(Exception):
    """Base class of every kvfabric error. ``code`` is the native status."""

    code = INTERNAL

    def __init__(self, message: str = "", code: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:  # KeyError would repr() its argument
        return self.message


class InternalError(KvfabricError):
    code = INTERNAL


class NotFoundError(KvfabricError, KeyError):
    """The key does not exist. A KeyError, so ``except KeyError`` works."""

    code = NOT_FOUND


class AlreadyExistsError(KvfabricError):
    code = ALREADY_EXISTS


class StoreFullError(KvfabricError):
    """No capacity left for the object (Mooncake -200); back off or evict."""

    code = NO_SPACE


class HasLeaseError(KvfabricError):
    code = HAS_LEASE


class LeaseExpiredError(KvfabricError):
    code = LEASE_EXPIRED


class InvalidArgumentError(KvfabricError, ValueError):
    code = INVALID_ARGUMENT


class ConfigError(KvfabricError, ValueError):
    """The configuration is invalid; the message names the key and value."""

    code = CONFIG


class TransferError(KvfabricError):
    code = TRANSFER


class RPCError(KvfabricError, ConnectionError):
    code = RPC


class ClosedError(KvfabricError):
    """The store is closed (or closing)."""

    code = CLOSED


class CleanupPendingError(KvfabricError):
    """close() failed part-way; the store stays closable, call close() again."""

    code = CLEANUP_PENDING


class BufferTooSmallError(KvfabricError, ValueError):
    code = BUFFER_TOO_SMALL


class NotRegisteredError(KvfabricError):
    code = NOT_REGISTERED


class AlreadyRegisteredError(KvfabricError):
    code = ALREADY_REGISTERED


class BufferInUseError(KvfabricError):
    """unregister_buffer waited too long for the copies using the buffer;
    it stays registered, so do not free its memory yet (retry)."""

    code = BUFFER_IN_USE


class PermissionDeniedError(KvfabricError, PermissionError):
    """The master authenticates its callers and refused this one: no valid
    certificate or token, or not its registration, segment or put (or an
    admin-only call)."""

    code = PERMISSION


class InvalidHandleError(ClosedError):
    """A native handle that is not open: a closed store's, or views that
    were released (by Views.release or the store's close)."""

    code = INVALID_HANDLE


class PanicError(InternalError):
    code = PANIC


_BY_CODE = {
    cls.code: cls
    for cls in (
        InternalError,
        NotFoundError,
        AlreadyExistsError,
        StoreFullError,
        HasLeaseError,
        LeaseExpiredError,
        InvalidArgumentError,
        ConfigError,
        TransferError,
        RPCError,
        ClosedError,
        CleanupPendingError,
        BufferTooSmallError,
        NotRegisteredError,
        AlreadyRegisteredError,
        BufferInUseError,
        PermissionDeniedError,
        InvalidHandleError,
        PanicError,
    )
}


def error_for(code: int, message: str) -> KvfabricError:
    """The exception for a native status code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return KvfabricError(f"{message} (status {code})", code)
    return cls(message, code)
