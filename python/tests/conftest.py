"""pytest on CPU: driver "sim" (device pointers are process addresses).

The library comes from KVFABRIC_LIB (the Makefile's python-test target builds
it) or from an installed package. scripts/wheel-test.sh runs a copy of these
tests outside the checkout against an installed wheel: then the header is the
packaged one and the binary is the `kvfabric` console command.
"""

import os
import sys

import pytest

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(PYDIR)
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

np = pytest.importorskip("numpy")

import kvfabric  # noqa: E402
from kvfabric import _native  # noqa: E402

MIB = 1 << 20


def sim_config(tmp_path, **kw):
    """An EGM-pool provider on the simulator with an embedded master."""
    cfg = {
        "driver": "sim",
        "protocol": "nvlink",
        "master_server_addr": "embedded",
        "enable_egm_store_pool": True,
        "global_segment_size": "64MiB",
        "local_buffer_size": 0,
        "local_hostname": "pytest-host",
        "socket_dir": str(tmp_path),
    }
    cfg.update(kw)
    return cfg


def pytest_configure(config):
    path = _native.library_path()
    if not os.path.exists(path):
        raise pytest.UsageError(
            f"libkvfabric.so not found at {path}: run `make python-test`, or set KVFABRIC_LIB"
        )


@pytest.fixture
def cfg(tmp_path):
    return sim_config(tmp_path)


@pytest.fixture(scope="session")
def shared_store(tmp_path_factory):
    # One store for the tests that do not test its lifecycle: a Store that
    # has served gets closes only after the read leases' TTL (seconds).
    s = kvfabric.Store(sim_config(tmp_path_factory.mktemp("shared")))
    yield s
    s.close()


@pytest.fixture
def store(shared_store):
    shared_store.remove_all(force=True)
    return shared_store


@pytest.fixture
def host(store):
    """A registered host pool: fn(nbytes) -> a uint8 numpy array inside it."""
    pool = np.zeros(16 * MIB, dtype=np.uint8)
    store.register_buffer(pool)
    off = [0]

    def take(n):
        a = pool[off[0]: off[0] + n]
        off[0] += (n + 4095) // 4096 * 4096
        return a

    yield take
    if not store.closed:
        store.unregister_buffer(pool)


def kvfabric_binary():
    """The kvfabric CLI: KVFABRIC_BIN (the Makefile's python-test target
    builds it), build/kvfabric of the checkout, or the `kvfabric` command on
    PATH (an installed wheel's entry point); None when there is none."""
    import shutil

    p = os.environ.get("KVFABRIC_BIN") or os.path.join(REPO, "build", "kvfabric")
    if os.path.exists(p):
        return p
    return shutil.which("kvfabric")


def header_dir():
    """The folder of the kvfabric.h that goes with the loaded library: the
    installed package's (beside libkvfabric.so) or the checkout's capi/."""
    d = os.path.dirname(os.path.abspath(_native.library_path()))
    return d if os.path.exists(os.path.join(d, "kvfabric.h")) else os.path.join(REPO, "capi")


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_master(*flags):
    """Starts `kvfabric master` on a free loopback port with flags, waits
    until it accepts connections, and returns (process, address). Skips the
    test when the binary is missing."""
    import socket
    import subprocess
    import time

    exe = kvfabric_binary()
    if exe is None:
        pytest.skip("needs the kvfabric binary: `make python-test` builds it, or set KVFABRIC_BIN")
    addr = f"127.0.0.1:{free_port()}"
    p = subprocess.Popen([exe, "master", "--listen", addr, "--metrics-listen", "", *flags],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(addr.split(":"), timeout=1).close()
            return p, addr
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                raise RuntimeError("kvfabric master did not start: " + p.stderr.read().decode())
            time.sleep(0.05)


def stop_master(p):
    """Ends a master from start_master (resumed first if stopped)."""
    import signal
    import subprocess

    os.kill(p.pid, signal.SIGCONT)
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def master_segments(addr):
    """The segments a `kvfabric master` at addr has mounted, as dicts with
    the segment.Descriptor fields (ID, Owner, Node, Size, …), from
    `kvfabric stat --json`."""
    import json
    import subprocess

    exe = kvfabric_binary()
    if exe is None:
        pytest.skip("needs the kvfabric binary: `make python-test` builds it, or set KVFABRIC_BIN")
    r = subprocess.run([exe, "stat", "--json", "--master-server-addr", addr], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"kvfabric stat: {r.stderr}")
    return json.loads(r.stdout)["segments"] or []


def stop_process(pid, timeout=5.0):
    """SIGSTOPs pid and returns once it is stopped: kill() returns before
    the signal takes effect, and a call made in between could still be
    answered by the process."""
    import signal
    import time

    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            # The state follows the parenthesised command name.
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} did not stop within {timeout} s")


class LibSpy:
    """Stands in for a Store's CDLL: records the batch and put stream
    functions (and the single put and get) called, and can hide the
    packed-keys or the put stream ones, as a library older than them lacks
    them."""

    def __init__(self, lib, hide_packed=False, hide_stream=False):
        self._lib, self._hide, self._hide_stream, self.called = lib, hide_packed, hide_stream, []

    def __getattr__(self, name):
        if self._hide and name.endswith("_packed") or self._hide_stream and name.startswith("kvfabric_put_stream_"):
            raise AttributeError(name)
        fn = getattr(self._lib, name)
        if name.startswith(("kvfabric_batch_", "kvfabric_put_stream_")) or name in ("kvfabric_put", "kvfabric_get"):
            def rec(*args):
                self.called.append(name)
                return fn(*args)
            return rec
        return fn
