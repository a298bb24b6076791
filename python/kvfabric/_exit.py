"""Teardown of live Stores when the process ends.

A Store that is never closed keeps its segments registered at the master
until its client TTL runs out: consumers keep placing puts on memory that
went away with the process. So every Store is tracked here (weakly), and

- at interpreter exit (``atexit``, which also runs after an uncaught
  KeyboardInterrupt from Python's default SIGINT handler and after
  ``sys.exit`` from a signal handler of the application's own), every live
  Store is closed;
- SIGTERM and SIGINT get a handler of ours when, at the time the first
  Store is created from the main thread, their disposition is the default
  one (``SIG_DFL``; Python's own KeyboardInterrupt handler for SIGINT is
  left alone, atexit covers it). Ours closes every live Store, restores
  ``SIG_DFL`` and sends the signal again, so the process ends as it would
  have (killed by that signal). A handler the application installed is
  never replaced.

Like every Python signal handler, ours runs when the main thread next
executes Python code: a main thread blocked inside native code delays it.
Teardown at exit is bounded by EXIT_TIMEOUT; closes still running then are
abandoned (the process exit releases the memory; the master drops the
segments at the client TTL).

The registry holds Stores weakly, and their native handles: a Store that
was dropped without close() is torn down through its handle.

Thread-safe. Closes run on worker threads, so a signal that arrives while
the main thread holds a Store's lock cannot deadlock the handler.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import signal
import threading
import time
import weakref

from .errors import INVALID_HANDLE, OK

log = logging.getLogger("kvfabric")

#: Seconds that teardown at exit (atexit or a signal) waits for closes.
#: Enough for readers' leases (kvfabric master default 5 s) to end.
EXIT_TIMEOUT = 10.0

_lock = threading.Lock()  # guards everything below
_seq = itertools.count()
_live: dict[int, tuple] = {}  # seq -> (weakref to the Store, library, native handle)
_closing: set[threading.Thread] = set()  # closes running in the background
_hooked = False  # atexit registered
_signals: dict[int, object] = {}  # signal -> disposition before ours


def track(store, lib, handle: int) -> None:
    """Closes store (``closed``, ``close()``) at interpreter exit or on
    SIGTERM/SIGINT unless it was closed before; if the Store object is gone
    by then, closes its native handle (lib.kvfabric_close)."""
    global _hooked
    with _lock:
        # Forget Stores that are gone and whose handle is closed (an
        # invalid handle: handles are never reused).
        for k in [k for k, (ref, lb, h) in _live.items() if ref() is None and lb.kvfabric_cleanup_pending(h) < 0]:
            del _live[k]
        _live[next(_seq)] = (weakref.ref(store), lib, handle)
        if not _hooked:
            atexit.register(_at_exit)
            _hooked = True
    _install_signal_handlers()


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal works only there; a later Store may do it
    for sig in (signal.SIGTERM, signal.SIGINT):
        with _lock:
            if sig in _signals:
                continue
            try:
                cur = signal.getsignal(sig)
            except (ValueError, OSError):
                continue
            if cur is not signal.SIG_DFL:
                # The application's handler, Python's KeyboardInterrupt
                # handler, SIG_IGN, or one installed outside Python (None):
                # not ours to replace.
                continue
            try:
                signal.signal(sig, _on_signal)
            except (ValueError, OSError):
                continue
            _signals[sig] = cur


def installed(sig: int) -> bool:
    """Whether our handler is installed for sig (tests, diagnostics)."""
    return signal.getsignal(sig) is _on_signal


def close_in_background(store, done=None) -> threading.Thread:
    """Starts store.close() on a thread and returns it; done(err) is called
    on that thread with None or the exception. Teardown at exit waits for
    it (bounded)."""
    def run():
        err = None
        try:
            store.close()
        except BaseException as e:  # noqa: BLE001 - reported to done
            err = e
        finally:
            with _lock:
                _closing.discard(threading.current_thread())
        if done is not None:
            done(err)

    t = threading.Thread(target=run, name="kvfabric-close", daemon=True)
    with _lock:
        _closing.add(t)
    t.start()
    return t


def close_all(timeout: float = EXIT_TIMEOUT) -> None:
    """Closes every live Store (in parallel) and waits up to timeout for
    them and for closes already running in the background."""
    with _lock:
        entries = [e for _, e in sorted(_live.items(), reverse=True)]
    for ref, lib, h in entries:
        s = ref()
        if s is None:
            s = _Handle(lib, h)
        if not s.closed:
            close_in_background(s, _log_failure)
    deadline = time.monotonic() + timeout
    while True:
        with _lock:
            pending = list(_closing)
        if not pending:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("kvfabric: %d store(s) still closing after %.0f s at exit; leaving them to the client TTL",
                        len(pending), timeout)
            return
        pending[0].join(left)


class _Handle:
    """The native handle of a Store object that is gone."""

    def __init__(self, lib, h: int):
        self._lib, self._h = lib, h

    @property
    def closed(self) -> bool:
        return self._lib.kvfabric_cleanup_pending(self._h) < 0  # invalid: closed

    def close(self) -> None:
        rc = self._lib.kvfabric_close(self._h)
        if rc not in (OK, INVALID_HANDLE):
            raise RuntimeError(f"kvfabric: close of handle {self._h} at exit: status {rc}")


def _log_failure(err) -> None:
    if err is not None:
        log.warning("kvfabric: close at exit: %s", err)


def _at_exit() -> None:
    close_all()


def _on_signal(signum, frame) -> None:  # noqa: ARG001
    close_all()
    with _lock:
        prev = _signals.pop(signum, signal.SIG_DFL)
    signal.signal(signum, prev)
    os.kill(os.getpid(), signum)
