"""The Python Store against a `kvfabric master` that requires mutual TLS:
the tls_* configuration keys reach it, a client without a certificate is
refused with PermissionDeniedError, and a client (not admin) may not wipe the
cache. Certificates come from `kvfabric certs`."""

import subprocess

import pytest

import kvfabric

from conftest import kvfabric_binary, sim_config, start_master, stop_master


@pytest.fixture
def tls_master(tmp_path):
    exe = kvfabric_binary()
    if exe is None:
        pytest.skip("needs the kvfabric binary: `make python-test` builds it, or set KVFABRIC_BIN")
    pki = tmp_path / "pki"
    subprocess.run([exe, "certs", "--dir", str(pki), "--hosts", "127.0.0.1", "--clients", "engine"],
                   check=True, stdout=subprocess.DEVNULL)
    p, addr = start_master("--tls-cert-file", str(pki / "server.pem"), "--tls-key-file", str(pki / "server-key.pem"),
                           "--tls-client-ca-file", str(pki / "ca.pem"))
    yield pki, addr
    stop_master(p)


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
