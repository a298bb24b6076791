"""A provider process that ends — normally, by SIGTERM or by SIGINT — takes
its segments out of the master at once, not at its client TTL: another
process's puts land elsewhere and it reads back everything it stored. An
engine's own SIGTERM handler is left alone (teardown then happens at exit).

Real processes: a `kvfabric master` (client TTL 30 s, so that anything left
to the TTL shows), a provider subprocess, and this process as the other
client."""

import os
import signal
import subprocess
import sys
import time

import pytest

from kvfabric.compat.mooncake import MooncakeDistributedStore

from conftest import MIB, PYDIR, master_segments, start_master, stop_master

PROVIDER = r"""
import signal, sys, threading, time
from kvfabric import _exit
mode, addr, sock = sys.argv[1:4]
if mode == "engine-handler":
    def handler(sig, frame):
        print("engine handler ran", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, handler)
if mode == "sigint-default":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
cfg = dict(driver="sim", socket_dir=sock)
if mode == "store-exit":
    import kvfabric
    s = kvfabric.Store(dict(cfg, master_server_addr=addr, global_segment_size="64MiB", local_hostname="localhost",
                            client_id="plain-store"))
    name = "plain-store"
else:
    from kvfabric.compat.mooncake import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    args = ("localhost", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", addr)
    if mode == "thread":
        rc = []
        t = threading.Thread(target=lambda: rc.append(s.setup(*args, **cfg)))
        t.start(); t.join()
        assert rc == [0]
    else:
        assert s.setup(*args, **cfg) == 0
    name = s.get_hostname()
print("sigterm", "ours" if _exit.installed(signal.SIGTERM) else "not-ours",
      "sigint", "ours" if _exit.installed(signal.SIGINT) else "not-ours", flush=True)
print("ready", name, flush=True)
if mode in ("exit", "store-exit", "dropped"):
    sys.stdin.readline()
    if mode == "dropped":  # never closed, no reference left: its handle is closed at exit
        import gc
        del s
        gc.collect()
    sys.exit(0)
while True:
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def master():
    p, addr = start_master("--client-ttl", "30s", "--lease-ttl", "1s")
    yield addr
    stop_master(p)


def owners(addr):
    return {s["Owner"] for s in master_segments(addr)}


def start_provider(mode, addr, tmp_path):
    env = dict(os.environ, PYTHONPATH=PYDIR)
    p = subprocess.Popen([sys.executable, "-c", PROVIDER, mode, addr, str(tmp_path)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    handlers = p.stdout.readline().split()
    ready = p.stdout.readline().split()
    if len(ready) != 2 or ready[0] != "ready":
        p.kill()
        raise AssertionError(f"provider did not start: {handlers} {ready} {p.stderr.read()}")
    return p, dict(zip(handlers[::2], handlers[1::2])), ready[1]


@pytest.mark.parametrize("mode,end,handlers,rc", [
    ("exit", "stdin", {"sigterm": "ours", "sigint": "not-ours"}, 0),
    ("store-exit", "stdin", {"sigterm": "ours", "sigint": "not-ours"}, 0),
    ("dropped", "stdin", {"sigterm": "ours", "sigint": "not-ours"}, 0),
    ("sigterm", signal.SIGTERM, {"sigterm": "ours", "sigint": "not-ours"}, -signal.SIGTERM),
    # Python's SIGINT handler raises KeyboardInterrupt; atexit tears down.
    ("sigint", signal.SIGINT, {"sigterm": "ours", "sigint": "not-ours"}, None),
    # SIGINT at SIG_DFL (no KeyboardInterrupt): ours, then killed by it.
    ("sigint-default", signal.SIGINT, {"sigterm": "ours", "sigint": "ours"}, -signal.SIGINT),
    # The engine's own handler is left alone; its sys.exit runs atexit.
    ("engine-handler", signal.SIGTERM, {"sigterm": "not-ours", "sigint": "not-ours"}, 0),
])
def test_provider_exit_removes_its_segments_at_once(tmp_path, master, mode, end, handlers, rc):
    cons = MooncakeDistributedStore()
    # A smaller provider in this process: with the dead provider's segments
    # still mounted, puts would go there (more free bytes).
    assert cons.setup("localhost", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "tcp", "", master, driver="sim",
                      socket_dir=str(tmp_path)) == 0
    p, got, name = start_provider(mode, master, tmp_path)
    try:
        assert got == handlers
        assert name in owners(master)
        for i in range(8):
            assert cons.put(f"{mode}-before-{i}", os.urandom(4096)) == 0
        t0 = time.monotonic()
        if end == "stdin":
            p.stdin.write("go\n")
            p.stdin.flush()
        else:
            p.send_signal(end)
        code = p.wait(20)
        took = time.monotonic() - t0
        out = p.stdout.read()
        if rc is not None:
            assert code == rc, p.stderr.read()
        else:
            assert code != 0 and "KeyboardInterrupt" in p.stderr.read()
        if mode == "engine-handler":
            assert "engine handler ran" in out
        assert took < 10
        # At once: the process ended its registration before exiting.
        assert name not in owners(master)
        values = {f"{mode}-after-{i}": os.urandom(64 * 1024) for i in range(64)}
        stored = [k for k, v in values.items() if cons.put(k, v) == 0]
        assert len(stored) == len(values)
        assert all(cons.get(k) == values[k] for k in stored)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        cons.remove_all(force=True)
        assert cons.close() == 0


def test_setup_from_a_thread_installs_no_handler(tmp_path, master):
    p, got, name = start_provider("thread", master, tmp_path)
    try:
        assert got == {"sigterm": "not-ours", "sigint": "not-ours"}
    finally:
        p.terminate()  # SIG_DFL: killed without teardown; the master's TTL ends it
        p.wait(20)
