"""The Python Store against a `kvfabric master` that requires mutual TLS:
the tls_* configuration keys reach it, a client without a certificate is
refused with PermissionDeniedError, and a client (not admin) may not wipe the
cache. Certificates come from `kvfabric certs`."""

import os
import signal
import socket
import subprocess
import time

import pytest

import kvfabric

from conftest import sim_config
from test_rpc_timeout import _binary, _free_port


@pytest.fixture
def tls_master(tmp_path):
    exe = _binary()
    if exe is None:
        pytest.skip("needs the kvfabric binary: `make python-test` builds it, or set KVFABRIC_BIN")
    pki = tmp_path / "pki"
    subprocess.run([exe, "certs", "--dir", str(pki), "--hosts", "127.0.0.1", "--clients", "engine"],
                   check=True, stdout=subprocess.DEVNULL)
    addr = f"127.0.0.1:{_free_port()}"
    p = subprocess.Popen([exe, "master", "--listen", addr, "--metrics-listen", "",
                          "--tls-cert-file", str(pki / "server.pem"), "--tls-key-file", str(pki / "server-key.pem"),
                          "--tls-client-ca-file", str(pki / "ca.pem")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(addr.split(":"), timeout=1).close()
            break
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                raise RuntimeError("kvfabric master did not start: " + p.stderr.read().decode())
            time.sleep(0.05)
    yield pki, addr
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def test_store_over_mutual_tls(tmp_path, tls_master):
    pki, addr = tls_master
    ca = str(pki / "ca.pem")
    with pytest.raises(kvfabric.PermissionDeniedError) as ei:
        kvfabric.Store(sim_config(tmp_path, master_server_addr=addr, tls_ca_file=ca))
    assert "certificate" in str(ei.value)
    cfg = sim_config(tmp_path, master_server_addr=addr, tls_ca_file=ca,
                     tls_cert_file=str(pki / "engine.pem"), tls_key_file=str(pki / "engine-key.pem"))
    with kvfabric.Store(cfg) as s:
        s.put("k", b"over tls")
        assert s.get_bytes("k") == b"over tls"
        with pytest.raises(kvfabric.PermissionDeniedError):
            s.remove_all(force=True)
        s.remove("k")


def test_tls_keys_need_a_ca(tmp_path):
    with pytest.raises(kvfabric.ConfigError) as ei:
        kvfabric.Store(sim_config(tmp_path, master_server_addr="127.0.0.1:1", tls_cert_file="x.pem", tls_key_file="x-key.pem"))
    assert "tls_ca_file" in str(ei.value)
