"""Session 18 probe: the facade's batch_get_into of 4096 keys of 64 KiB (and
16 KiB) from torch HBM through the EGM pool, per call, R rounds after a
warm-up, each verified (destination poisoned first). Prints min / median /
max µs per call. Run with a chosen python package (PYTHONPATH) and
library (KVFABRIC_LIB) to tell their parts apart."""
import os, statistics, sys, tempfile, time
import torch
from kvfabric.compat.mooncake import MooncakeDistributedStore

tag, R = sys.argv[1], int(sys.argv[2])
N = 4096
torch.cuda.set_device(0)
ms = MooncakeDistributedStore()
assert ms.setup("localhost", "P2PHANDSHAKE", 2 * N * (64 << 10) + (1 << 30), 0, "nvlink", "", "embedded",
                enable_egm_store_pool=True, driver="cuda", device=0, socket_dir=tempfile.mkdtemp(),
                max_mr_size=128 << 20) == 0
for nb in (16 << 10, 64 << 10):
    src = torch.randint(0, 256, (N * nb,), dtype=torch.uint8, device="cuda")
    dst = torch.empty(N * nb, dtype=torch.uint8, device="cuda")
    for t in (src, dst):
        assert ms.register_buffer(t.data_ptr(), t.numel()) == 0
    keys = [f"gp/{nb}/{i:08d}" for i in range(N)]
    sp = [src.data_ptr() + i * nb for i in range(N)]
    dp = [dst.data_ptr() + i * nb for i in range(N)]
    torch.cuda.synchronize()
    assert ms.batch_put_from(keys, sp, [nb] * N) == [0] * N
    v = []
    for r in range(R + 1):
        dst.fill_(r & 0xFF)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        got = ms.batch_get_into(keys, dp, [nb] * N)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        assert got == [nb] * N and torch.equal(src, dst), (nb, r)
        if r:
            v.append(dt * 1e6)
    v.sort()
    print(f"{tag} {nb >> 10} KiB get: {v[0]:.0f} / {statistics.median(v):.0f} / {v[-1]:.0f} us per 4096-key call, "
          f"{N * nb / statistics.median(v) / 1e3:.2f} GB/s at the median, all {R} verified", flush=True)
    assert ms.batch_remove(keys, force=True) == [0] * N
    for t in (src, dst):
        assert ms.unregister_buffer(t.data_ptr()) == 0
    del src, dst
ms.close()
