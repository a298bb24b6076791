"""A master that stops answering: every call fails within rpc_timeout.

The master is a real `kvfabric master` process, stopped with SIGSTOP: its
socket still accepts connections (the kernel does that), and nothing
answers. The binary comes from KVFABRIC_BIN (the Makefile's python-test
target builds it) or build/kvfabric.
"""

import os
import signal
import time

import pytest

import kvfabric

from conftest import sim_config, start_master, stop_master, stop_process


@pytest.fixture
def remote_master():
    p, addr = start_master()
    yield p, addr
    stop_master(p)


def test_stalled_master_fails_calls_within_rpc_timeout(tmp_path, remote_master):
    proc, addr = remote_master
    with kvfabric.Store(sim_config(tmp_path, master_server_addr=addr, rpc_timeout="1s", client_ttl="30s")) as s:
        s.put("k", b"v")
        stop_process(proc.pid)
        try:
            for name, call in [
                ("exists", lambda: s.exists("k")),
                ("get_bytes", lambda: s.get_bytes("k")),
                ("put", lambda: s.put("k2", b"v")),
                ("remove", lambda: s.remove("k")),
            ]:
                t0 = time.monotonic()
                with pytest.raises(kvfabric.RPCError) as ei:
                    call()
                took = time.monotonic() - t0
                assert "rpc_timeout=1s" in str(ei.value), (name, str(ei.value))
                assert 0.9 <= took < 4, (name, took)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        # The master answers again: so does the store. (A call that timed
        # out here may still take effect there: the master reads its
        # request after SIGCONT, and gRPC deadlines are relative to when the
        # server reads them — so "k" may or may not have been removed.)
        s.put("after", b"back")
        assert s.get_bytes("after") == b"back"


def test_rpc_timeout_config_errors(tmp_path):
    for bad in ("forever", -1, "25h"):
        with pytest.raises(kvfabric.ConfigError) as ei:
            kvfabric.Store(sim_config(tmp_path, rpc_timeout=bad))
        assert "rpc_timeout" in str(ei.value)
