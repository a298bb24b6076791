// gather_rows.cu — kvfabric's sparse row-gather kernel.
//
// One launch copies selected fixed-size rows (token indices) of many objects
// into one contiguous destination: output row r in [0, nobj*k) is row
// idx[r] of object o = r / k, where object o is objs[o].nrows rows of
// row_bytes bytes from objs[o].base. Sources may be anywhere the launching
// GPU can address (mapped HOST_NUMA DRAM segments, HBM, peer HBM,
// registered host memory). Sparse attention (DeepSeek DSA) selects ~2K of
// 128K tokens per step: per row a few hundred bytes to a few KiB, far below
// what the copy engine moves efficiently one copy at a time.
//
// Parameter ABI (mirrored by kernels.EmulateGatherRows and the transfer
// engine; change all three together):
//   param 0: const kvf_gather_obj *objs  (8 bytes, device-readable, nobj entries)
//   param 1: unsigned int nobj           (4 bytes)
//   param 2: unsigned int per_obj        (4 bytes, k = output rows per object)
//   param 3: const void *idx             (8 bytes, device pointer to nobj*k
//                                         indices, row-major [nobj][k])
//   param 4: unsigned int idx_bytes      (4 bytes: 8 = 64-bit indices, else 32-bit;
//                                         callers pass 4 or 8)
//   param 5: u64 row_bytes               (8 bytes)
//   param 6: u64 dst                     (8 bytes, nobj*k*row_bytes contiguous bytes)
//   param 7: unsigned int *bad           (8 bytes, device u32 counter, or null)
//
// An index is read as unsigned (an int64 -1 is then 2^64-1, an int32 -1 is
// 0xffffffff). An index i < objs[o].nrows copies row i; any other
// zero-fills the destination row and, when bad is not null, adds 1 to *bad.
//
// Launch shape: blockDim.x a multiple of 32 (the engine uses 256, eight
// rows per CTA); one warp per output row, grid.x CTAs stride over the rows;
// grid.y CTAs split each row into grid.y slices (16-byte aligned) so that a
// few large rows still spread over many SMs.
//
// Destination rows must not overlap the sources.
//
// Regenerate gather_rows.ptx with `make ptx` (see README.md).

typedef unsigned long long u64;

struct kvf_gather_obj {
    u64 base;
    u64 nrows;
};

static_assert(sizeof(kvf_gather_obj) == 16, "object ABI is 16 bytes");

// Loads in flight per lane before the stores: a 1,152-byte row is 72
// 16-byte vectors, at most 3 per lane of a warp.
#define KVF_GATHER_UNROLL 4

// copy_span copies [lo, hi) of one row from s to d with one warp, in units
// of T; lo, hi, s and d are T-aligned. Each lane issues up to
// KVF_GATHER_UNROLL independent loads before its stores.
template <typename T>
__device__ __forceinline__ void copy_span(unsigned char *__restrict__ d, const unsigned char *__restrict__ s,
                                          u64 lo, u64 hi, unsigned int lane)
{
    const T *__restrict__ sv = reinterpret_cast<const T *>(s + lo);
    T *__restrict__ dv = reinterpret_cast<T *>(d + lo);
    const u64 n = (hi - lo) / sizeof(T);
    for (u64 j = lane; j < n; j += 32 * KVF_GATHER_UNROLL) {
        T v[KVF_GATHER_UNROLL];
#pragma unroll
        for (int u = 0; u < KVF_GATHER_UNROLL; u++)
            if (j + u * 32 < n)
                v[u] = sv[j + u * 32];
#pragma unroll
        for (int u = 0; u < KVF_GATHER_UNROLL; u++)
            if (j + u * 32 < n)
                dv[j + u * 32] = v[u];
    }
}

template <typename T>
__device__ __forceinline__ void zero_span(unsigned char *__restrict__ d, u64 lo, u64 hi, unsigned int lane)
{
    T *__restrict__ dv = reinterpret_cast<T *>(d + lo);
    const u64 n = (hi - lo) / sizeof(T);
    const T z = {};
    for (u64 j = lane; j < n; j += 32)
        dv[j] = z;
}

extern "C" __global__ void __launch_bounds__(1024)
kvf_gather_rows(const kvf_gather_obj *__restrict__ objs, unsigned int nobj, unsigned int per_obj,
                const void *__restrict__ idx, unsigned int idx_bytes, u64 row_bytes, u64 dst,
                unsigned int *bad)
{
    const unsigned int warps = blockDim.x >> 5;
    if (warps == 0 || per_obj == 0 || row_bytes == 0)
        return;
    const unsigned int lane = threadIdx.x & 31;
    const u64 rows = (u64)nobj * per_obj;
    const u64 stride = (u64)gridDim.x * warps;

    // This CTA's slice [lo, hi) of every row, 16-byte aligned.
    const u64 per = (((row_bytes + gridDim.y - 1) / gridDim.y) + 15) & ~15ull;
    const u64 lo = per * blockIdx.y;
    if (lo >= row_bytes)
        return;
    const u64 hi = (lo + per < row_bytes) ? lo + per : row_bytes;

    for (u64 r = (u64)blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += stride) {
        const unsigned int o = (unsigned int)(r / per_obj);
        // Same address in every lane: one broadcast load per warp.
        const u64 i = idx_bytes == 8 ? __ldg(static_cast<const u64 *>(idx) + r)
                                     : (u64)__ldg(static_cast<const unsigned int *>(idx) + r);
        const u64 base = __ldg(&objs[o].base);
        const u64 nrows = __ldg(&objs[o].nrows);
        unsigned char *d = reinterpret_cast<unsigned char *>(dst + r * row_bytes);
        if (i < nrows) {
            const unsigned char *s = reinterpret_cast<const unsigned char *>(base + i * row_bytes);
            // Warp-uniform: the same unit for every lane of the row.
            const u64 a = base | dst | row_bytes;
            if ((a & 15) == 0)
                copy_span<uint4>(d, s, lo, hi, lane);
            else if ((a & 7) == 0)
                copy_span<unsigned long long>(d, s, lo, hi, lane);
            else if ((a & 3) == 0)
                copy_span<unsigned int>(d, s, lo, hi, lane);
            else
                copy_span<unsigned char>(d, s, lo, hi, lane);
        } else {
            const u64 a = dst | row_bytes;
            if ((a & 15) == 0)
                zero_span<uint4>(d, lo, hi, lane);
            else if ((a & 7) == 0)
                zero_span<unsigned long long>(d, lo, hi, lane);
            else if ((a & 3) == 0)
                zero_span<unsigned int>(d, lo, hi, lane);
            else
                zero_span<unsigned char>(d, lo, hi, lane);
            if (bad != nullptr && lane == 0 && blockIdx.y == 0)
                atomicAdd(bad, 1u);
        }
    }
}
