#!/usr/bin/env python3
"""The python path of `kvfabric bench --store` (issue #13 item 6).

Started by the kvfabric binary, one process per GPU, with one argument: a
JSON object (device, driver, mode, sizes, round_bytes, iters, max_keys,
capacity, max_mr, socket_dir, lockstep, tensors). It opens kvfabric.compat.mooncake's
MooncakeDistributedStore with an embedded master and an EGM pool of
`capacity` bytes, registers a source and a destination buffer of
`round_bytes` (torch CUDA tensors with driver "cuda"; numpy host arrays on
the simulator), and for every object size runs one warm-up and `iters`
timed rounds: fresh random source bytes, batch_put_from of
round_bytes/size keys in batches of at most max_keys, the destination
poisoned with the round's byte, batch_get_into, a byte-for-byte comparison,
remove_all.

With tensors > 0 (the python-multi path) every object is scattered as
vLLM's Mooncake connector scatters a KV block: the round's buffer is cut
into T "layer tensors" (T = min(tensors, size / 4 KiB), a power of two
for the usual sizes), key i's buffers are block i of every tensor (size/T
bytes each), and the calls are batch_put_from_multi_buffers /
batch_get_into_multi_buffers. The tensors are slices of the one
registered source and destination buffer (vLLM registers each tensor on
its own).

Protocol (stdout lines starting with "KVFBENCH ", then JSON):
  {"t":"ready"}   with lockstep (more than one process), before each timed
                  phase; the phase starts when "go\\n" arrives on stdin (all
                  GPUs' processes start together). A process alone starts
                  each phase at once, as the Go paths' goroutine does.
  {"t":"round", "size", "round", "timed", "keys", "batches", "put_s",
   "get_s", "put_ph", "get_ph", "ok", "error"}
                  (put_ph, get_ph: the Store's phase split of the round's
                  puts and gets, Store.phases() as [calls, keys, check,
                  meta, resolve, copy, master, wait, end] with times in
                  seconds; omitted when the library has no kvfabric_phases)
  {"t":"done"} | {"t":"skip","reason"} | {"t":"error","error"}
Anything else it prints is kept for error messages.
"""

import json
import os
import sys
import time
import traceback


def send(**msg):
    sys.stdout.write("KVFBENCH " + json.dumps(msg) + "\n")
    sys.stdout.flush()


LOCKSTEP = True  # set from the config in main


def wait_go():
    if not LOCKSTEP:
        return
    send(t="ready")
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(f"bench-store: expected 'go' on stdin, got {line!r}")


def poison_byte(g):
    return (0xA5 + 0x3B * g) & 0xFF  # as the Go paths: a different byte every round


class TorchBuffers:
    def __init__(self, torch, dev, n):
        self.torch = torch
        self.dev = torch.device("cuda", dev)
        torch.cuda.set_device(self.dev)
        self.src = torch.empty(n, dtype=torch.uint8, device=self.dev)
        self.dst = torch.empty(n, dtype=torch.uint8, device=self.dev)

    def ptrs(self):
        return self.src.data_ptr(), self.dst.data_ptr()

    def fresh(self, n, poison):
        self.src[:n].copy_(self.torch.randint(0, 256, (n,), dtype=self.torch.uint8, device=self.dev))
        self.dst[:n].fill_(poison)
        self.torch.cuda.synchronize(self.dev)

    def corrupt(self, n, size):
        self.dst[n - size // 2] ^= 0xFF

    def first_diff(self, n):
        self.torch.cuda.synchronize(self.dev)
        a, b = self.src[:n], self.dst[:n]
        if self.torch.equal(a, b):
            return None
        i = int((a != b).nonzero()[0].item())
        return i, int(b[i].item()), int(a[i].item())


class NumpyBuffers:
    def __init__(self, np, seed, n):
        self.np = np
        self.rng = np.random.default_rng(seed)
        self.src = np.empty(n, dtype=np.uint8)
        self.dst = np.empty(n, dtype=np.uint8)

    def ptrs(self):
        return self.src.ctypes.data, self.dst.ctypes.data

    def fresh(self, n, poison):
        self.src[:n] = self.rng.integers(0, 256, n, dtype=self.np.uint8)
        self.dst[:n] = poison

    def corrupt(self, n, size):
        self.dst[n - size // 2] ^= 0xFF

    def first_diff(self, n):
        a, b = self.src[:n], self.dst[:n]
        if self.np.array_equal(a, b):
            return None
        i = int(self.np.flatnonzero(a != b)[0])
        return i, int(b[i]), int(a[i])


def main():
    global LOCKSTEP
    cfg = json.loads(sys.argv[1])
    LOCKSTEP = cfg.get("lockstep", True)
    dev, n_round = cfg["device"], cfg["round_bytes"]
    try:
        from kvfabric.compat.mooncake import MooncakeDistributedStore
    except Exception as e:  # noqa: BLE001
        send(t="skip", reason=f"cannot import kvfabric.compat.mooncake: {type(e).__name__}: {e}")
        return 0
    if cfg["driver"] == "cuda":
        try:
            import torch
        except ImportError:
            send(t="skip", reason="torch is not installed (the python path puts and gets torch CUDA tensors)")
            return 0
        if not torch.cuda.is_available():
            send(t="skip", reason=f"torch {torch.__version__} sees no CUDA device")
            return 0
        bufs = TorchBuffers(torch, dev, n_round)
        kind = f"torch {torch.__version__} CUDA tensors"
    else:
        try:
            import numpy as np
        except ImportError:
            send(t="skip", reason="numpy is not installed (the simulator's python path uses numpy host buffers)")
            return 0
        bufs = NumpyBuffers(np, dev, n_round)
        kind = "numpy host arrays"

    ms = MooncakeDistributedStore()
    rc = ms.setup("localhost", "P2PHANDSHAKE", cfg["capacity"], 0, "nvlink", "", "embedded",
                  enable_egm_store_pool=True, driver=cfg["driver"], device=dev,
                  socket_dir=cfg["socket_dir"], max_mr_size=cfg["max_mr"])
    if rc != 0:
        send(t="error", error=f"MooncakeDistributedStore.setup returned {rc}")
        return 1
    src, dst = bufs.ptrs()
    for p in (src, dst):
        rc = ms.register_buffer(p, n_round)
        if rc != 0:
            send(t="error", error=f"register_buffer({p:#x}, {n_round}) returned {rc}")
            return 1
    print(f"bench-store: gpu {dev}: {kind}, {n_round} bytes per round", file=sys.stderr)

    native = ms._s()

    def phases():
        try:
            return native.phases()
        except NotImplementedError:  # a library without kvfabric_phases
            return None

    def delta(a, b, kind):
        if a is None or b is None:
            return None
        return [b[kind][n] - a[kind][n] for n in native._PHASES]

    mk = cfg["max_keys"]
    want_tensors = cfg.get("tensors", 0)

    def tensors_for(size):
        """The number of buffers an object of size bytes is scattered over
        (python-multi), 0 for one buffer per key."""
        if not want_tensors:
            return 0
        t = max(1, min(want_tensors, size // 4096))
        while size % t:
            t -= 1
        return t
    # Test hook: damage the gotten bytes of this round (0-based, counted
    # over all sizes), so that a test sees a failed verification reported.
    corrupt = int(os.environ.get("KVFABRIC_BENCH_STORE_CORRUPT", "-1"))
    g = 0
    for size in cfg["sizes"]:
        nkeys = n_round // size
        n = nkeys * size
        batches = (nkeys + mk - 1) // mk
        for rnd in range(cfg["iters"] + 1):  # round 0: the warm-up
            pb = poison_byte(g)
            bufs.fresh(n, pb)
            keys = [f"bench/python/{cfg['mode']}/gpu{dev}/{size}/r{g}/{i}" for i in range(nkeys)]
            g += 1
            # Argument lists are built before the timing, as an engine's
            # would be (its page tables already hold the addresses).
            plan = []
            T = tensors_for(size)
            for b in range(0, nkeys, mk):
                ks = keys[b:b + mk]
                if T:  # key i: block i of each of T tensors of nkeys blocks of size/T bytes
                    R = size // T
                    plan.append((ks, [[src + t * nkeys * R + (b + i) * R for t in range(T)] for i in range(len(ks))],
                                 [[dst + t * nkeys * R + (b + i) * R for t in range(T)] for i in range(len(ks))],
                                 [[R] * T for _ in ks]))
                else:
                    plan.append((ks, [src + (b + i) * size for i in range(len(ks))],
                                 [dst + (b + i) * size for i in range(len(ks))], [size] * len(ks)))
            put = ms.batch_put_from_multi_buffers if T else ms.batch_put_from
            get = ms.batch_get_into_multi_buffers if T else ms.batch_get_into
            wait_go()
            ph0 = phases()
            t0 = time.perf_counter()
            for ks, sp, _, sz in plan:
                codes = put(ks, sp, sz)
                if any(codes):  # one C-level pass; the failing keys only when there are some
                    bad = [(k, c) for k, c in zip(ks, codes) if c != 0]
                    send(t="error", error=f"size {size} round {rnd + 1}: {put.__name__}: {bad[0][0]} -> {bad[0][1]} ({len(bad)} keys failed)")
                    return 1
            put_s = time.perf_counter() - t0
            ph1 = phases()
            wait_go()
            ph2 = phases()
            t0 = time.perf_counter()
            for ks, _, dp, sz in plan:
                got = get(ks, dp, sz)
                if got.count(size) != len(ks):
                    bad = [(k, c) for k, c in zip(ks, got) if c != size]
                    send(t="error", error=f"size {size} round {rnd + 1}: {get.__name__}: {bad[0][0]} -> {bad[0][1]} ({len(bad)} keys failed)")
                    return 1
            get_s = time.perf_counter() - t0
            ph3 = phases()
            if corrupt == g - 1:
                bufs.corrupt(n, size)
            diff = bufs.first_diff(n)
            err = ""
            if diff is not None:
                i, got_b, want_b = diff
                err = (f"verify round {rnd + 1} of {cfg['iters'] + 1}: key {keys[i // size]} (block {i // size}): "
                       f"first difference at byte {i % size} of the block: got {got_b:#04x} want {want_b:#04x}")
                if got_b == pb:
                    err += " (the poison the destination held before the get: was the block copied at all?)"
            ms.remove_all(True)
            send(t="round", size=size, round=rnd, timed=rnd > 0, keys=nkeys, batches=batches, tensors=T,
                 put_s=put_s, get_s=get_s, put_ph=delta(ph0, ph1, "put"), get_ph=delta(ph2, ph3, "get"),
                 ok=diff is None, error=err)
    send(t="done")
    for p in (src, dst):
        ms.unregister_buffer(p)
    rc = ms.close()
    if rc != 0:
        print(f"bench-store: close returned {rc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001
        send(t="error", error=f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        sys.exit(1)
