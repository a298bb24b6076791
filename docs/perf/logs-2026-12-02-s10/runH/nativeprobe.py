#!/usr/bin/env python3
"""kvfabric.Store.batch_put / batch_get (the native API) of 4096 keys per
batch on the GPU, by buffer kind: torch tensor views of one HBM tensor
(`tensor`) and (ptr, nbytes) tuples into it (`raw`). Every round verified
(torch.equal on the GPU, the destination poisoned before). argv[1]: label.
Prints min / median ms per batch and the ratio to the copy-engine-free
ceiling given in argv[2] (GB/s; 0: none)."""
import statistics, sys, tempfile, time
import torch
import kvfabric

label, ceil = sys.argv[1], float(sys.argv[2])
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
R = 256 << 20
src = torch.empty(R, dtype=torch.uint8, device=dev)
dst = torch.empty(R, dtype=torch.uint8, device=dev)
st = kvfabric.Store({"driver": "cuda", "protocol": "nvlink", "master_server_addr": "embedded",
                     "enable_egm_store_pool": True, "global_segment_size": "1GiB", "max_mr_size": "256MiB",
                     "local_buffer_size": 0, "socket_dir": tempfile.mkdtemp()})
res = {}
g = 0
for size in (4096, 65536):
    n = 4096
    for kind in ("tensor", "raw"):
        for rnd in range(7):
            g += 1
            src[: n * size].copy_(torch.randint(0, 256, (n * size,), dtype=torch.uint8, device=dev))
            dst[: n * size].fill_(g & 0xFF)
            torch.cuda.synchronize()
            keys = [f"native/{label}/{size}/{kind}/r{g}/{i}" for i in range(n)]
            if kind == "tensor":
                ins = [src[i * size:(i + 1) * size] for i in range(n)]
                outs = [dst[i * size:(i + 1) * size] for i in range(n)]
            else:
                sp, dp = src.data_ptr(), dst.data_ptr()
                ins = [(sp + i * size, size) for i in range(n)]
                outs = [(dp + i * size, size) for i in range(n)]
            t0 = time.perf_counter()
            r = st.batch_put(keys, ins)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            assert all(x is None for x in r), [x for x in r if x is not None][:2]
            t2 = time.perf_counter()
            got = st.batch_get(keys, outs)
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            assert got == [size] * n, [x for x in got if x != size][:2]
            assert torch.equal(src[: n * size], dst[: n * size]), f"verify {size} {kind} round {rnd}"
            if rnd > 0:  # round 0: warm-up
                res.setdefault((size, kind, "put"), []).append(t1 - t0)
                res.setdefault((size, kind, "get"), []).append(t3 - t2)
            st.remove_all(force=True)
for (size, kind, op), v in sorted(res.items()):
    med = statistics.median(v)
    r = f"  ratio {size * 4096 / med / 1e9 / ceil:.3f}" if ceil > 0 else ""
    print(f"{label} size={size} {kind:6s} {op} min {min(v) * 1e3:8.3f} med {med * 1e3:8.3f} ms/batch{r}")
st.close()
