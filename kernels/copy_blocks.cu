// copy_blocks.cu — kvfabric's SM gather/scatter copy kernel (DESIGN §4).
//
// One launch copies a batch of (dst, src, len) blocks between any memory the
// launching GPU can address: its HBM, mapped VMM ranges (HOST_NUMA DRAM,
// peer HBM) and registered host memory. The copy engine is slow for small
// blocks (H200: ~4 GB/s at 4 KiB with cuMemcpyBatchAsync); SMs issuing
// 16-byte loads/stores reach the PCIe/C2C ceiling at every block size.
//
// Parameter ABI (mirrored by kernels.EmulateCopyBlocks and the transfer
// engine; change all three together):
//   param 0: const kvf_copy_desc *descs  (8 bytes, device-readable)
//   param 1: unsigned int n              (4 bytes, number of descriptors)
// Launch shape: grid.x CTAs stride over descriptors; grid.y CTAs split each
// descriptor into grid.y slices (16-byte aligned) so that a few large
// blocks still occupy many SMs; any block.x (the engine uses 256).
//
// Blocks must not overlap each other's destinations (a batch is a set of
// independent copies); a block's src and dst must not overlap.
//
// Regenerate copy_blocks.ptx with `make ptx` (see README.md).

typedef unsigned long long u64;

struct kvf_copy_desc {
    u64 dst;
    u64 src;
    u64 len;
};

static_assert(sizeof(kvf_copy_desc) == 24, "descriptor ABI is 24 bytes");

// Bytes of one descriptor one CTA copies per iteration of the unrolled loop
// per thread: 4 x 16 B in flight before the stores.
#define KVF_UNROLL 4

extern "C" __global__ void __launch_bounds__(1024)
kvf_copy_blocks(const kvf_copy_desc *__restrict__ descs, unsigned int n)
{
    for (unsigned int i = blockIdx.x; i < n; i += gridDim.x) {
        const u64 dst = __ldg(&descs[i].dst);
        const u64 src = __ldg(&descs[i].src);
        const u64 len = __ldg(&descs[i].len);

        // This CTA's slice [lo, hi) of the block, 16-byte aligned.
        const u64 per = (((len + gridDim.y - 1) / gridDim.y) + 15) & ~15ull;
        const u64 lo = per * blockIdx.y;
        if (lo >= len)
            continue;
        const u64 hi = (lo + per < len) ? lo + per : len;

        u64 done = lo;
        if (((dst | src) & 15) == 0) {
            const uint4 *__restrict__ s = reinterpret_cast<const uint4 *>(src + lo);
            uint4 *__restrict__ d = reinterpret_cast<uint4 *>(dst + lo);
            const u64 nv = (hi - lo) >> 4;
            const u64 stride = blockDim.x;
            u64 j = threadIdx.x;
            // Main loop: KVF_UNROLL independent loads in flight per thread.
            for (; j + (KVF_UNROLL - 1) * stride < nv; j += KVF_UNROLL * stride) {
                uint4 v[KVF_UNROLL];
#pragma unroll
                for (int u = 0; u < KVF_UNROLL; u++)
                    v[u] = s[j + u * stride];
#pragma unroll
                for (int u = 0; u < KVF_UNROLL; u++)
                    d[j + u * stride] = v[u];
            }
            for (; j < nv; j += stride)
                d[j] = s[j];
            done = lo + (nv << 4);
        }
        // Byte tail (or the whole slice when dst/src are not 16-byte aligned).
        const unsigned char *sb = reinterpret_cast<const unsigned char *>(src);
        unsigned char *db = reinterpret_cast<unsigned char *>(dst);
        for (u64 j = done + threadIdx.x; j < hi; j += blockDim.x)
            db[j] = sb[j];
    }
}
