"""The Mooncake facade's API beyond the engine sequences of test_mooncake.py:
every setup() form, ReplicateConfig and the enums, soft pins and upserts,
ranged reads, replica descriptors, removal by key list and regex, tenants,
store names (host:port) and preferred segments, health, setup_dummy and the
host allocator, and a close that does not wait out other clients' leases.

Tests with more than one store use a real `kvfabric master` process (an
embedded master belongs to one Store)."""

import ctypes
import json
import logging
import os
import signal
import socket
import time

import numpy as np
import pytest

import kvfabric.compat.mooncake as mcmod
from kvfabric.compat.mooncake import (
    Descriptor,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    parse_size,
)

from conftest import MIB, master_segments, start_master, stop_master

PAGE = 64 * 1024


def kv(tmp_path, **kw):
    """kvfabric keys for a store on the simulator."""
    d = {"driver": "sim", "socket_dir": str(tmp_path)}
    d.update(kw)
    return d


def embedded(tmp_path, host="t-host", gss=64 * MIB, lbs=16 * MIB, **kw):
    s = MooncakeDistributedStore()
    assert s.setup(host, "P2PHANDSHAKE", gss, lbs, "tcp", "", "embedded", **kv(tmp_path, **kw)) == 0
    return s


@pytest.fixture(scope="module")
def master():
    p, addr = start_master("--lease-ttl", "2s", "--client-ttl", "30s")
    yield addr
    stop_master(p)


def remote(tmp_path, addr, host="localhost", gss=32 * MIB, lbs=16 * MIB, **kw):
    s = MooncakeDistributedStore()
    assert s.setup(host, "P2PHANDSHAKE", gss, lbs, "tcp", "", addr, **kv(tmp_path, **kw)) == 0
    return s


@pytest.fixture
def ms(tmp_path):
    s = embedded(tmp_path)
    yield s
    assert s.close() == 0


# ---- ReplicateConfig and enums --------------------------------------------------------


def test_enums_have_upstream_values():
    assert [(m.name, int(m)) for m in ObjectDataType] == [
        ("UNKNOWN", 0), ("KVCACHE", 1), ("TENSOR", 2), ("WEIGHT", 3), ("SAMPLE", 4), ("ACTIVATION", 5),
        ("GRADIENT", 6), ("OPTIMIZER_STATE", 7), ("METADATA", 8), ("GENERAL", 9)]
    assert [(m.name, int(m)) for m in SoftPinAction] == [("PRESERVE", 0), ("ENABLE", 1), ("DISABLE", 2)]
    assert [m.name for m in ReplicaStatus] == ["UNDEFINED", "INITIALIZED", "PROCESSING", "COMPLETE", "REMOVED",
                                               "FAILED"]


def test_replicate_config_attributes():
    c = ReplicateConfig()
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (1, 0, 0)
    assert c.soft_pin_action == SoftPinAction.PRESERVE and c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False and c.prefer_alloc_in_same_node is False
    assert c.preferred_segments == [] and c.preferred_nof_segments == [] and c.preferred_segment == ""
    assert c.data_type == ObjectDataType.UNKNOWN and c.group_ids is None
    c.soft_pin_ttl_ms = 1000
    assert c.soft_pin_ttl_ms == 1000
    c.soft_pin_ttl_ms = None
    assert c.soft_pin_ttl_ms is None
    for bad in (-1, 1 << 64, "1"):
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    with pytest.raises(TypeError):
        c.replica_num = -1
    with pytest.raises(TypeError):
        c.preferred_segments = "not-a-list"
    with pytest.raises(TypeError):
        c.soft_pin_action = 7
    with pytest.raises(AttributeError):
        c.replicas = 2  # not an upstream attribute
    with pytest.raises(AttributeError):
        c.with_soft_pinn = True
    # with_soft_pin: the older name, kept as an alias.
    c.with_soft_pin = True
    assert c.soft_pin_action == SoftPinAction.ENABLE and c.with_soft_pin
    c.with_soft_pin = False
    assert c.soft_pin_action == SoftPinAction.PRESERVE
    c.replica_num, c.preferred_segment, c.group_ids, c.data_type = 3, "node1:12345", ["g"], ObjectDataType.KVCACHE
    assert "replica_num: 3" in str(c) and "node1:12345" in str(c)


# ---- setup ------------------------------------------------------------------------------------


def test_parse_size():
    for s, n in [(16 * MIB, 16 * MIB), ("16MB", 16 * MIB), ("16 MB", 16 * MIB), (" 1.5 gb ", 3 << 29),
                 ("1048576", MIB), ("2k", 2048), ("7B", 7), ("0", 0)]:
        assert parse_size(s) == n, s
    for bad in ("50%", "-1", "MB", "16 XB", "", -5, True):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_setup_every_parameter_and_unused_options_logged_once(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(mcmod, "_logged_unused", set())
    caplog.set_level(logging.WARNING, logger="kvfabric.compat.mooncake")
    s = MooncakeDistributedStore()
    # Mooncake's full positional signature, then kvfabric keys.
    assert s.setup("h1", "http://meta:8080/metadata", 16 * MIB, 16 * MIB, "tcp", "mlx5_0", "embedded", object(),
                   True, "/ssd", "default", True, 9400, **kv(tmp_path)) == 0
    assert s.close() == 0
    warned = [r.getMessage() for r in caplog.records if "without effect" in r.getMessage()]
    assert len(warned) == 1, warned
    for name in ("metadata_server", "rdma_devices", "engine", "enable_ssd_offload", "ssd_offload_path",
                 "enable_client_http_server", "client_http_port"):
        assert name in warned[0], name
    # The same again, by keyword: nothing new to say.
    caplog.clear()
    assert s.setup(local_hostname="h1", metadata_server="P2PHANDSHAKE", global_segment_size=16 * MIB,
                   local_buffer_size=16 * MIB, protocol="tcp", rdma_devices="mlx5_0", master_server_addr="embedded",
                   engine=None, enable_ssd_offload=True, ssd_offload_path="/ssd", tenant_id="default",
                   enable_client_http_server=True, client_http_port=9400, **kv(tmp_path)) == 0
    assert s.close() == 0
    assert not [r for r in caplog.records if "without effect" in r.getMessage()]
    # Other keyword arguments are kvfabric keys: an unknown one is a
    # configuration error (pybind11 would raise TypeError).
    assert s.setup("h", "m", 16 * MIB, 0, "tcp", "", "embedded", local_buffer_sizee=0, **kv(tmp_path)) == -600
    # Mooncake's validation of sizes.
    assert s.setup("h", "m", 100, 0, "tcp", "", "embedded", **kv(tmp_path)) == -600  # < 1 KiB
    assert s.setup("h", "m", 16 * MIB, 1 << 41, "tcp", "", "embedded", **kv(tmp_path)) == -600
    assert s.setup("", "m", 16 * MIB, 0, "tcp", "", "embedded", **kv(tmp_path)) == -600


def test_setup_dict_form(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(mcmod, "_logged_unused", set())
    caplog.set_level(logging.WARNING, logger="kvfabric.compat.mooncake")
    base = {"local_hostname": "dict-host", "metadata_server": "http://127.0.0.1:8080/metadata",
            "protocol": "tcp", "rdma_devices": "ibp6s0", "master_server_addr": "embedded", **kv(tmp_path)}
    s = MooncakeDistributedStore()
    # Mooncake passes every value through str(): sizes may be human-readable.
    assert s.setup({**base, "global_segment_size": "16MB", "local_buffer_size": "16 MB",
                    "ipc_socket_path": "/tmp/x.sock", "enable_ssd_offload": "False", "tenant_id": "default",
                    "enable_client_http_server": "true", "client_http_port": "9400"}) == 0
    assert s.put("k", b"v" * 1000) == 0 and s.get("k") == b"v" * 1000
    assert s.close() == 0
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "ipc_socket_path" in warned and "enable_client_http_server" in warned
    assert s.setup({**base, "global_segment_size": str(16 * MIB), "local_buffer_size": 0}) == 0
    assert s.put("k", b"v") != 0  # local_buffer_size=0
    assert s.close() == 0
    assert s.setup({**base, "global_segment_size": "50%", "local_buffer_size": "16MB"}) != 0
    assert s.setup({**base, "global_segment_size": "16MB", "client_http_port": "http"}) != 0
    no_meta = dict(base)
    del no_meta["metadata_server"]
    assert s.setup(no_meta) == -600
    assert s.health_check() == 1


def test_zero_and_small_local_buffer(tmp_path):
    s = embedded(tmp_path, lbs=0)
    try:
        # Mooncake's test_zero_local_buffer_size: bytes puts fail, nothing stored.
        assert s.put("zero", b"test_zero_buffer_value") != 0
        assert s.is_exist("zero") == 0
        assert s.put_batch(["a"], [b"x"]) != 0 and s.upsert("a", b"x") != 0
        # Registered memory does not go through the local buffer.
        buf = np.arange(PAGE, dtype=np.uint8)
        assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        assert s.put_from("direct", buf.ctypes.data, PAGE) == 0
        assert s.get("direct") == b"" and s.get_buffer("direct") is None  # a bytes get: staged too
        out = np.zeros(PAGE, np.uint8)
        assert s.register_buffer(out.ctypes.data, out.nbytes) == 0
        assert s.get_into("direct", out.ctypes.data, PAGE) == PAGE and np.array_equal(out, buf)
    finally:
        assert s.close() == 0
    s = embedded(tmp_path, lbs=4096)
    try:
        assert s.put("small", b"x" * 4096) == 0 and s.get("small") == b"x" * 4096
        assert s.put("big", b"x" * 4097) == -600 and s.is_exist("big") == 0
        assert s.put_parts("parts", b"x" * 3000, b"y" * 2000) == -600
    finally:
        assert s.close() == 0


def test_tenant_id_maps_to_kvfabric_tenant(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(mcmod, "Store", lambda cfg: seen.append(cfg) or (_ for _ in ()).throw(ValueError("stop")))
    s = MooncakeDistributedStore()
    for tenant, want in (("default", None), ("", None), ("team-a", "team-a")):
        s.setup("h", "m", 16 * MIB, 0, "tcp", "", "embedded", tenant_id=tenant, **kv(tmp_path))
        assert seen[-1].get("tenant") == want
    s.setup({"local_hostname": "h", "metadata_server": "m", "tenant_id": "team-b"})
    assert seen[-1]["tenant"] == "team-b"
    # local_buffer_size is the facade's, never kvfabric's key of that name.
    assert all("local_buffer_size" not in c for c in seen)


# ---- names, ports, preferred segments --------------------------------------------------------


def _port_in_use(port):
    with socket.socket() as t:
        try:
            t.bind(("0.0.0.0", port))
            return False
        except OSError:
            return True


def test_hostname_port_held_for_the_store_lifetime(tmp_path):
    a, b = embedded(tmp_path, host="localhost"), embedded(tmp_path, host="localhost")
    ha, hb = a.get_hostname(), b.get_hostname()
    assert ha != hb
    for h in (ha, hb):
        host, port = h.split(":")
        assert host == "localhost" and 12300 <= int(port) <= 14300 and _port_in_use(int(port))
    assert a.close() == 0 and b.close() == 0
    assert a.get_hostname() == "" and not _port_in_use(int(ha.split(":")[1]))
    c = embedded(tmp_path, host="localhost:12999")
    assert c.get_hostname() == "localhost:12999"
    assert c.close() == 0


def test_two_named_stores_are_distinct_providers_and_preferred_by_name(tmp_path, master):
    # Upstream's replicated test: "localhost:<p>" and "localhost:<p+1>" in one process.
    stores = [remote(tmp_path, master, host=f"localhost:{p}") for p in (12345, 12346)]
    try:
        a, b = stores
        ids = {seg["Owner"] for seg in master_segments(master)}
        assert {"localhost:12345", "localhost:12346"} <= ids
        # preferred_segment = a store's name puts on that store's segments,
        # and the other store (same host) reads them through the fd exchange.
        for i, target in enumerate((a, b, a, b)):
            c = ReplicateConfig()
            c.preferred_segment = target.get_hostname()
            key = f"pref-{i}"
            assert a.put(key, bytes([i]) * 5000, c) == 0
            reps = a.get_replica_desc(key)
            assert len(reps) == 1 and isinstance(reps[0], ReplicaDescriptor)
            assert reps[0].get_memory_descriptor().buffer_descriptor.transport_endpoint == target.get_hostname()
            assert b.get(key) == bytes([i]) * 5000 and a.get(key) == bytes([i]) * 5000
        # Two replicas land on both providers.
        c = ReplicateConfig()
        c.replica_num = 2
        assert b.put("two", b"r" * 100, c) == 0
        ends = {r.get_memory_descriptor().buffer_descriptor.transport_endpoint for r in b.get_replica_desc("two")}
        assert ends == {"localhost:12345", "localhost:12346"}
    finally:
        for s in stores:
            assert s.remove_all(force=True) >= 0
            assert s.close() == 0


def test_replica_descriptors(ms):
    assert ms.put("rd", b"z" * 3000) == 0
    reps = ms.get_replica_desc("rd")
    assert len(reps) == 1
    r = reps[0]
    assert r.status == ReplicaStatus.COMPLETE and r.is_memory_replica() and not r.is_disk_replica()
    d = r.get_memory_descriptor().buffer_descriptor
    assert isinstance(d, Descriptor) and d.size >= 3000 and d.buffer_address >= 0
    assert d.transport_endpoint == ms.get_hostname() and d.tier in ("dram", "hbm") and d.segment
    with pytest.raises(RuntimeError):
        r.get_disk_descriptor()
    got = ms.batch_get_replica_desc(["rd", "missing"])
    assert list(got) == ["rd"] and len(got["rd"]) == 1
    assert ms.get_replica_desc("missing") == []


# ---- puts, upserts, soft pins -----------------------------------------------------------------


def test_upsert_family(ms):
    buf = np.zeros(4 * PAGE, np.uint8)
    assert ms.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    assert ms.put("u", b"old") == 0
    assert ms.put("u", b"new") == 0 and ms.get("u") == b"old"  # put-if-absent
    assert ms.upsert("u", b"new!") == 0 and ms.get("u") == b"new!"
    assert ms.upsert_parts("u", b"pa", b"rts") == 0 and ms.get("u") == b"parts"
    assert ms.upsert_batch(["u", "u2"], [b"b1", b"b2"]) == 0
    assert ms.get_batch(["u", "u2"]) == [b"b1", b"b2"]
    buf[:PAGE] = 7
    assert ms.upsert_from("u", buf.ctypes.data, PAGE) == 0 and ms.get("u") == b"\x07" * PAGE
    buf[PAGE:2 * PAGE] = 9
    p = buf.ctypes.data
    assert ms.batch_upsert_from(["u", "u3"], [p + PAGE, p], [PAGE, 10]) == [0, 0]
    assert ms.get("u") == b"\x09" * PAGE and ms.get("u3") == b"\x07" * 10
    assert ms.batch_upsert_from(["u"], [p, p], [1, 1]) == [-600]
    assert ms.unregister_buffer(buf.ctypes.data) == 0


def test_soft_pin_config_forwarding(ms):
    # Upstream's test_soft_pin_config_forwarding.
    enable = ReplicateConfig()
    enable.soft_pin_action, enable.soft_pin_ttl_ms = SoftPinAction.ENABLE, 1000
    assert ms.put("sp", b"soft-pin forwarding", enable) == 0
    preserve_ttl = ReplicateConfig()
    preserve_ttl.soft_pin_ttl_ms = 1000
    assert ms.upsert("sp", b"x", preserve_ttl) == -600
    assert ms.put("sp2", b"x", preserve_ttl) == -600
    disable_ttl = ReplicateConfig()
    disable_ttl.soft_pin_action, disable_ttl.soft_pin_ttl_ms = SoftPinAction.DISABLE, 1000
    assert ms.upsert("sp", b"x", disable_ttl) == -600
    assert ms.upsert("sp", b"y") == 0
    disable = ReplicateConfig()
    disable.soft_pin_action = SoftPinAction.DISABLE
    assert ms.upsert("sp", b"z", disable) == 0 and ms.get("sp") == b"z"
    too_long = ReplicateConfig()
    too_long.soft_pin_action, too_long.soft_pin_ttl_ms = SoftPinAction.ENABLE, 25 * 3600 * 1000
    assert ms.put("sp3", b"x", too_long) == -600


def _fill(s, buf, prefix, n):
    for i in range(n):
        assert s.put_from(f"{prefix}{i}", buf.ctypes.data, MIB) == 0


def _alive(s, keys):
    return [s.get_size(k) == MIB for k in keys]


def test_soft_pin_ttl_and_upsert_actions(tmp_path):
    s = embedded(tmp_path, gss=8 * MIB)
    try:
        buf = np.ones(MIB, np.uint8)
        assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        short = ReplicateConfig()
        short.soft_pin_action, short.soft_pin_ttl_ms = SoftPinAction.ENABLE, 700
        long_ = ReplicateConfig()
        long_.soft_pin_action = SoftPinAction.ENABLE  # Mooncake's default TTL, 30 min
        for k, c in (("short", short), ("long", long_), ("kept", long_), ("dropped", long_)):
            assert s.put_from(k, buf.ctypes.data, MIB, c) == 0
        # Upserts: PRESERVE keeps the old object's soft pin, DISABLE ends it.
        assert s.upsert_from("kept", buf.ctypes.data, MIB) == 0
        disable = ReplicateConfig()
        disable.soft_pin_action = SoftPinAction.DISABLE
        assert s.upsert_from("dropped", buf.ctypes.data, MIB, disable) == 0
        _fill(s, buf, "p", 8)  # pressure: unpinned objects are evicted first
        assert _alive(s, ["short", "long", "kept", "dropped"]) == [True, True, True, False]
        time.sleep(1.0)  # the short soft pin has expired
        _fill(s, buf, "q", 8)
        assert _alive(s, ["short", "long", "kept"]) == [False, True, True]
        assert s.unregister_buffer(buf.ctypes.data) == 0
    finally:
        assert s.close() == 0


def test_put_from_zero_size_and_replica_kinds(ms):
    buf = np.zeros(PAGE, np.uint8)
    assert ms.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    assert ms.put_from("empty", buf.ctypes.data, 0) == 0  # as Mooncake: stores nothing
    assert ms.is_exist("empty") == 0
    # put_from_with_metadata: the object is metadata ‖ data.
    buf[:8], buf[100:104] = 1, 2
    p = buf.ctypes.data
    assert ms.put_from_with_metadata("meta", p + 100, p, 4, 8) == 0
    assert ms.get("meta") == b"\x01" * 8 + b"\x02" * 4
    assert ms.put_from_with_metadata("meta0", p, p, 0, 8) == 0 and ms.is_exist("meta0") == 0
    assert ms.get_offload_rpc_read_count() == 0
    for attr in ("nof_replica_num", "dfs_replica_num"):
        c = ReplicateConfig()
        setattr(c, attr, 1)
        assert ms.put_from("nof", buf.ctypes.data, PAGE, c) == -600
    zero = ReplicateConfig()
    zero.replica_num = 0
    assert ms.put_from("rc0", buf.ctypes.data, PAGE, zero) == -600
    assert ms.batch_put_from(["a", "b"], [buf.ctypes.data] * 2, [PAGE] * 2, zero) == [-600, -600]
    assert ms.unregister_buffer(buf.ctypes.data) == 0


def test_prefer_alloc_in_same_node(ms):
    buf = np.arange(4 * PAGE, dtype=np.uint8)
    p = buf.ctypes.data
    assert ms.register_buffer(p, buf.nbytes) == 0
    same = ReplicateConfig()
    same.prefer_alloc_in_same_node = True
    # As Mooncake: refused by every put but batch_put_from_multi_buffers ...
    assert ms.put_from("s1", p, PAGE, same) == -600
    assert ms.put("s1", b"x", same) == -600
    assert ms.upsert_from("s1", p, PAGE, same) == -600
    assert ms.batch_put_from(["s1", "s2"], [p, p], [PAGE, PAGE], same) == [-600, -600]
    # ... which takes it with one replica (kvfabric places near the writer).
    assert ms.batch_put_from_multi_buffers(["m1"], [[p, p + PAGE]], [[PAGE, PAGE]], same) == [0]
    same.replica_num = 2
    assert ms.batch_put_from_multi_buffers(["m2"], [[p]], [[PAGE]], same) == [-600]
    assert ms.batch_get_into_multi_buffers(["m1"], [[p + 2 * PAGE, p + 3 * PAGE]], [[PAGE, PAGE]], True) == [2 * PAGE]
    assert np.array_equal(buf[2 * PAGE:], buf[:2 * PAGE])
    assert ms.unregister_buffer(p) == 0


# ---- ranged reads ------------------------------------------------------------------------------


def test_get_into_ranges(ms):
    # Upstream's test_get_into_ranges_operations, plus repeated keys.
    d1, d2 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz0123456789"
    assert ms.put("r1", d1) == 0 and ms.put("r2", d2) == 0
    b0, b1 = (ctypes.c_ubyte * 32)(), (ctypes.c_ubyte * 32)()
    p0, p1 = ctypes.addressof(b0), ctypes.addressof(b1)
    assert ms.register_buffer(p0, 32) == 0 and ms.register_buffer(p1, 32) == 0
    ctypes.memset(b0, ord("_"), 32)
    ctypes.memset(b1, ord("_"), 32)
    res = ms.get_into_ranges([p0, p1], [["r1", "r2"], ["r2", "r1"]], [[[0, 20], [8]], [[4], [16]]],
                             [[[1, 30], [2]], [[0], [10]]], [[[4, 3], [5]], [[6], [4]]])
    assert res == [[[4, 3], [5]], [[6], [4]]]
    assert bytes(b0[0:4]) == d1[1:5] and bytes(b0[8:13]) == d2[2:7] and bytes(b0[20:23]) == d1[30:33]
    assert bytes(b1[4:10]) == d2[0:6] and bytes(b1[16:20]) == d1[10:14]
    # Mismatched fragment lists: −600 for that key, shaped by dst offsets.
    r = ms.get_into_ranges([p0], [["r1", "r2"]], [[[0], []]], [[[0, 1], []]], [[[], []]])
    assert len(r) == 1 and len(r[0]) == 2 and r[0][0][0] < 0 and r[0][1] == []
    assert ms.get_into_ranges([p0], [["r1"]], [[[0]]], [[[len(d1) - 1]]], [[[4]]])[0][0][0] == -600  # source
    assert ms.get_into_ranges([p0], [["r1"]], [[[31]]], [[[0]]], [[[4]]])[0][0][0] == -600  # destination
    r = ms.get_into_ranges([p0], [["missing-key", "r1"]], [[[0], [8]]], [[[0], [0]]], [[[4], [4]]])
    assert r[0][0][0] == -704 and r[0][1][0] == 4
    # A key twice in one buffer, and a buffer inside a registration.
    r = ms.get_into_ranges([p1 + 8], [["r2", "r2"]], [[[0], [4]]], [[[0], [10]]], [[[4], [4]]])
    assert r == [[[4], [4]]] and bytes(b1[8:16]) == d2[0:4] + d2[10:14]
    # Unregistered buffers and top-level mismatches: all −600.
    loose = (ctypes.c_ubyte * 32)()
    assert ms.get_into_ranges([ctypes.addressof(loose)], [["r1"]], [[[0]]], [[[0]]], [[[4]]]) == [[[-600]]]
    assert ms.get_into_ranges([p0, p1], [["r1"]], [[[0]]], [[[0]]], [[[4]]]) == [[[-600]], [[-600]]]
    assert ms.unregister_buffer(p0) == 0 and ms.unregister_buffer(p1) == 0


# ---- existence, leases, removal --------------------------------------------------------------


def test_batch_remove_and_remove_by_regex(ms):
    for k in ("job1/a", "job1/b", "job2/a", "other"):
        assert ms.put(k, b"v") == 0
    assert ms.is_exist("other") == 1  # leases it, as Mooncake's is_exist does
    assert ms.batch_remove(["job1/a", "missing", "other"]) == [0, -704, -706]
    assert ms.batch_remove(["other"], force=True) == [0]
    assert ms.batch_remove([]) == []
    assert ms.remove_by_regex("^job[0-9]/") == 2
    assert ms.remove_by_regex("a$") == 0
    assert ms.remove_by_regex("(unclosed") == -600
    assert ms.batch_is_exist(["job1/b", "job2/a"]) == [0, 0]


def test_tenants_are_isolated(tmp_path, master):
    a1 = remote(tmp_path, master, tenant_id="team-a")
    a2 = remote(tmp_path, master, gss=0, tenant_id="team-a")
    b = remote(tmp_path, master, gss=0, tenant_id="team-b")
    d = remote(tmp_path, master, gss=0)  # "default": no namespace
    try:
        for s, v in ((a1, b"A"), (b, b"B"), (d, b"D")):
            assert s.put("shared-key", v) == 0
            assert s.put("only-" + v.decode(), v) == 0
        assert [s.get("shared-key") for s in (a1, a2, b, d)] == [b"A", b"A", b"B", b"D"]
        assert b.batch_is_exist(["only-A", "only-B", "only-D"]) == [0, 1, 0]
        assert a2.batch_is_exist(["only-A", "only-B", "only-D"]) == [1, 0, 0]
        assert d.remove_by_regex("^only-") == 1
        assert b.batch_remove(["only-A", "only-B"], force=True) == [-704, 0]
        assert a2.remove_all(force=True) == 2
        assert b.get("shared-key") == b"B" and d.get("shared-key") == b"D" and a1.get("shared-key") == b""
    finally:
        for s in (b, d):
            s.remove_all(force=True)
        for s in (a2, b, d, a1):
            assert s.close() == 0


# ---- health, close ---------------------------------------------------------------------------------


def _wait_stopped(pid):
    # kill() returns before the target stops: a call sent at once may still
    # be answered.
    deadline = time.monotonic() + 5
    while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_health_check(tmp_path):
    p, addr = start_master()
    s = remote(tmp_path, addr, gss=0, rpc_timeout="1s")
    try:
        assert s.health_check() == 0
        os.kill(p.pid, signal.SIGSTOP)
        try:
            _wait_stopped(p.pid)
            assert s.health_check() == 2
        finally:
            os.kill(p.pid, signal.SIGCONT)
        assert s.health_check() == 0
        assert s.close() == 0
        assert s.health_check() == 1
    finally:
        s.close()
        stop_master(p)
    assert MooncakeDistributedStore().health_check() == 1


def test_close_does_not_wait_out_read_leases(tmp_path):
    p, addr = start_master("--lease-ttl", "5s", "--client-ttl", "30s")
    try:
        prov = remote(tmp_path, addr, host="localhost")
        cons = remote(tmp_path, addr, gss=0, host="localhost")
        name = prov.get_hostname()
        keys = [f"leased-{i}" for i in range(8)]
        assert prov.put_batch(keys, [b"x" * 1000] * 8) == 0
        assert cons.batch_is_exist(keys) == [1] * 8  # cons holds read leases now
        assert cons.get(keys[0]) == b"x" * 1000
        t0 = time.monotonic()
        assert prov.close() == 0
        assert time.monotonic() - t0 < 1.0
        assert prov.get_hostname() == "" and prov.health_check() == 1
        # Exist leases do not hold up the unmount (a get's lease would, for
        # at most the lease TTL, in the background): the segments go long
        # before the client TTL (30 s).
        deadline = time.monotonic() + 8
        while any(s["Owner"] == name for s in master_segments(addr)):
            assert time.monotonic() < deadline, "the closed store's segments outlived the leases"
            time.sleep(0.2)
        assert cons.close() == 0
    finally:
        stop_master(p)


# ---- setup_dummy ----------------------------------------------------------------------------------


def test_setup_dummy_with_host_allocator(tmp_path, master, monkeypatch):
    # SGLang's standalone_storage: host KV pool from MooncakeHostMemAllocator,
    # setup_dummy(pool bytes, local buffer, server), register_buffer(pool).
    prov = remote(tmp_path, master, host="localhost")
    alloc = MooncakeHostMemAllocator()
    # The provider's node identity is "localhost" (its local_hostname): so
    # is the dummy's, for same-host (posix_fd) segments to be reachable.
    monkeypatch.setenv("KVFABRIC_CONFIG", json.dumps(kv(tmp_path, local_hostname="localhost")))
    dummy = MooncakeDistributedStore()
    ptr = alloc.alloc(4 * PAGE)
    try:
        assert ptr and ptr % 4096 == 0
        pool = np.ctypeslib.as_array((ctypes.c_ubyte * (4 * PAGE)).from_address(ptr))
        pool[: 2 * PAGE] = np.arange(2 * PAGE, dtype=np.uint8)
        assert dummy.setup_dummy(4 * PAGE, 16 * MIB, master) == 0
        assert dummy.health_check() == 0
        assert dummy.register_buffer(ptr, 4 * PAGE) == 0
        assert dummy.batch_put_from(["d0", "d1"], [ptr, ptr + PAGE], [PAGE, PAGE]) == [0, 0]
        assert dummy.batch_get_into(["d0", "d1"], [ptr + 2 * PAGE, ptr + 3 * PAGE], [PAGE, PAGE]) == [PAGE, PAGE]
        assert np.array_equal(pool[2 * PAGE:], pool[: 2 * PAGE])
        assert prov.get("d1") == pool[PAGE: 2 * PAGE].tobytes()  # stored on the provider's segments
        assert dummy.put("warmup", bytes(4096)) == 0 and dummy.get("warmup") == bytes(4096)
        assert dummy.unregister_buffer(ptr) == 0
        assert dummy.remove_all(force=True) >= 0
        assert dummy.close() == 0
    finally:
        assert alloc.free(ptr) == 0
        assert alloc.free(ptr) == -1
        assert prov.close() == 0
    assert alloc.alloc(0) == 0
