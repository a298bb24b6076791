// copy-kernel-probe.cu — what bounds the SM gather/scatter copy below the
// copy engine's ceiling? Times variants of kernels/copy_blocks.cu against
// one large cudaMemcpyAsync (the ceiling, measured before and after every
// sweep) on the transfer engine's layout: 256 MiB of blocks, contiguous in
// HBM, at random aligned slots of a 1 GiB HOST_NUMA VMM range (the EGM
// pool's memory). Every timed launch is verified on the GPU against its
// source, with the destination poisoned before each launch.
//
// Build and run on the GPU machine (nvcc 13.0 there):
//   nvcc -O3 -arch=sm_90 -I kernels -o probe scripts/copy-kernel-probe.cu -lcuda
//   ./probe [sweeps=3] [iters=5]
//
// Variants (names in the output):
//   cur          kernels/copy_blocks.cu as checked in (unroll 4, 256 threads)
//   uU-tT        the same loop with U loads in flight per thread, T threads
//   ...-ldL2     loads with ld.global.nc.L2::256B (L2 fetches 256 B a miss)
//   ...-stcs     stores st.global.cs (streaming)
//   ...-ysK      each block split over CTAs in K KiB slices
//   tma-SxC      one thread per CTA moves the block through S shared-memory
//                stages of C KiB with cp.async.bulk (TMA) loads and stores
//   ce           every block through cudaMemcpyBatchAsync (the copy engine)
//   hyb-P        the last P % of the blocks through cudaMemcpyBatchAsync on a
//                second stream while `cur` copies the rest (both at once)
//
// Usage: probe [sweeps] [iters] [set], set "all" (default), "hybrid" or
// "launch". "launch" times one launch of `cur` over 64-512 blocks (the put
// pipeline's chunk sizes) with each block split over CTAs in slices of
// 64 KiB (launchShape's now), 32, 16, 8 or 4 KiB.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "copy_blocks.cu"

#define CK(x)                                                                      \
    do {                                                                           \
        cudaError_t e_ = (x);                                                      \
        if (e_ != cudaSuccess) {                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,              \
                    cudaGetErrorString(e_));                                       \
            exit(2);                                                               \
        }                                                                          \
    } while (0)
#define CU(x)                                                                      \
    do {                                                                           \
        CUresult r_ = (x);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                  \
            const char *s_ = "";                                                   \
            cuGetErrorName(r_, &s_);                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);         \
            exit(2);                                                               \
        }                                                                          \
    } while (0)

// ---- the SIMT variants -----------------------------------------------------

template <int LD>
__device__ __forceinline__ uint4 ld16(const uint4 *p)
{
    uint4 v;
    if (LD == 1) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
    } else {
        v = *p;
    }
    return v;
}

template <int ST>
__device__ __forceinline__ void st16(uint4 *p, uint4 v)
{
    if (ST == 1)
        __stcs(p, v);
    else
        *p = v;
}

// this_slice sets [lo, hi) to this CTA's slice of a block of len bytes, as
// kvf_copy_blocks cuts it (grid.y slices, 16-byte aligned); false when the
// slice is empty.
__device__ __forceinline__ bool this_slice(u64 len, u64 *lo, u64 *hi)
{
    const u64 per = (((len + gridDim.y - 1) / gridDim.y) + 15) & ~15ull;
    *lo = per * blockIdx.y;
    *hi = (*lo + per < len) ? *lo + per : len;
    return *lo < len;
}

template <int U, int LD, int ST>
__global__ void __launch_bounds__(1024) copy_simt(const kvf_copy_desc *__restrict__ descs, unsigned n)
{
    for (unsigned i = blockIdx.x; i < n; i += gridDim.x) {
        const u64 dst = descs[i].dst, src = descs[i].src;
        u64 lo, hi;
        if (!this_slice(descs[i].len, &lo, &hi))
            continue;
        const uint4 *s = reinterpret_cast<const uint4 *>(src + lo);
        uint4 *d = reinterpret_cast<uint4 *>(dst + lo);
        const u64 nv = (hi - lo) >> 4, stride = blockDim.x;
        u64 j = threadIdx.x;
        for (; j + (U - 1) * stride < nv; j += U * stride) {
            uint4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                v[u] = ld16<LD>(s + j + u * stride);
#pragma unroll
            for (int u = 0; u < U; u++)
                st16<ST>(d + j + u * stride, v[u]);
        }
        for (; j < nv; j += stride)
            st16<ST>(d + j, ld16<LD>(s + j));
    }
}

// ---- the TMA variant ---------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// S stages of C bytes; stores lag loads by L chunks. Lane 0 of the CTA's one
// warp drives the pipeline; the chunks are the CTA's descriptors' slices.
template <int S, int L>
__global__ void copy_tma(const kvf_copy_desc *__restrict__ descs, unsigned n, unsigned C)
{
    extern __shared__ __align__(128) unsigned char buf[];
    __shared__ __align__(8) unsigned long long bar[S];
    if (threadIdx.x != 0)
        return;
    for (int s = 0; s < S; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");

    // Chunks in flight: their destinations and lengths, by stage.
    u64 qdst[S] = {};
    uint32_t qlen[S] = {};
    unsigned k = 0, stored = 0;
    auto store_one = [&]() {
        const unsigned c = stored % S;
        const uint32_t parity = (stored / S) & 1;
        uint32_t done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done)
                         : "r"(smem_addr(&bar[c])), "r"(parity)
                         : "memory");
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(qdst[c]),
                     "r"(smem_addr(buf + (size_t)c * C)), "r"(qlen[c])
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        stored++;
    };
    for (unsigned i = blockIdx.x; i < n; i += gridDim.x) {
        const u64 dst = descs[i].dst, src = descs[i].src;
        u64 lo, hi;
        if (!this_slice(descs[i].len, &lo, &hi))
            continue;
        for (u64 off = lo; off < hi; off += C) {
            const uint32_t m = (uint32_t)((hi - off < C) ? hi - off : C);
            const unsigned c = k % S;
            if (k >= S) {
                // Stage c was last read by the store of chunk k-S; stores up
                // to k-1-L are issued, so S-1-L of them may stay pending.
                asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(S - 1 - L) : "memory");
            }
            qdst[c] = dst + off;
            qlen[c] = m;
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[c])), "r"(m)
                         : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                             smem_addr(buf + (size_t)c * C)),
                         "l"(src + off), "r"(m), "r"(smem_addr(&bar[c]))
                         : "memory");
            k++;
            if (k > L)
                store_one();
        }
    }
    while (stored < k)
        store_one();
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// spin holds the stream until everything of a timed launch is enqueued, so
// that the host's enqueue time (cudaMemcpyBatchAsync of thousands of copies)
// is not timed.
__global__ void spin(long long cycles)
{
    const long long t0 = clock64();
    while (clock64() - t0 < cycles)
        ;
}

// ---- verification --------------------------------------------------------------

__global__ void fill(unsigned char *p, u64 n, uint32_t seed)
{
    for (u64 i = (blockIdx.x * (u64)blockDim.x + threadIdx.x) * 4; i < n; i += (u64)gridDim.x * blockDim.x * 4) {
        uint32_t x = (uint32_t)(i >> 2) * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        *reinterpret_cast<uint32_t *>(p + i) = x;
    }
}

__global__ void compare(const kvf_copy_desc *d, unsigned n, unsigned long long *bad)
{
    for (unsigned i = blockIdx.x; i < n; i += gridDim.x) {
        const uint32_t *a = reinterpret_cast<const uint32_t *>(d[i].dst);
        const uint32_t *b = reinterpret_cast<const uint32_t *>(d[i].src);
        unsigned long long m = 0;
        for (u64 j = threadIdx.x; j < d[i].len / 4; j += blockDim.x)
            m += a[j] != b[j];
        if (m)
            atomicAdd(bad, m);
    }
}

__global__ void poison(const kvf_copy_desc *d, unsigned n)
{
    for (unsigned i = blockIdx.x; i < n; i += gridDim.x)
        for (u64 j = threadIdx.x; j < d[i].len / 4; j += blockDim.x)
            reinterpret_cast<uint32_t *>(d[i].dst)[j] = 0xA5A5A5A5u;
}

// ---- host ------------------------------------------------------------------------

struct Variant {
    std::string name;
    int kind;     // 0 cur, 1 simt, 2 tma
    void *fn;     // simt/tma kernel
    int threads;  // simt threads per CTA
    u64 slice;    // y split slice (0: as launchShape)
    int stages;   // tma
    unsigned chunk;
    int cePercent; // hybrid: share of the blocks (by count) on the copy engine
};

static void shape(unsigned n, u64 maxLen, u64 slice, dim3 &grid)
{
    const unsigned wantCTAs = 2048;
    grid = dim3(std::min(n, 1u << 20), 1, 1);
    if (slice) {
        grid.y = (unsigned)std::max<u64>(1, std::min<u64>((maxLen + slice - 1) / slice, 65535));
    } else if (n < wantCTAs) {
        // kernels' launchShape (internal/transfer): ~64 KiB slices.
        const u64 s = 64 << 10;
        grid.y = (unsigned)std::max<u64>(1, std::min<u64>({(maxLen + s - 1) / s, (u64)(wantCTAs / n), 65535}));
    }
}

int main(int argc, char **argv)
{
    const int sweeps = argc > 1 ? atoi(argv[1]) : 3;
    const int iters = argc > 2 ? atoi(argv[2]) : 5;
    const std::string set = argc > 3 ? argv[3] : "all";
    const u64 total = 256ull << 20, pool = 1ull << 30;

    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    int numa = 0;
    CU(cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs, host NUMA %d\n", prop.name, prop.multiProcessorCount, numa);

    // The pool: one HOST_NUMA VMM allocation, mapped for the GPU.
    CUmemAllocationProp ap = {};
    ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    ap.location.id = numa < 0 ? 0 : numa;
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, pool, &ap, 0));
    CUdeviceptr host;
    CU(cuMemAddressReserve(&host, pool, 2 << 20, 0, 0));
    CU(cuMemMap(host, pool, 0, h, 0));
    CUmemAccessDesc acc = {};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 0;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(host, pool, &acc, 1));

    unsigned char *hbmA, *hbmB;
    CK(cudaMalloc(&hbmA, total));
    CK(cudaMalloc(&hbmB, total));
    unsigned long long *bad;
    CK(cudaMalloc(&bad, sizeof *bad));
    kvf_copy_desc *ddesc;
    const unsigned maxN = (unsigned)(total / 4096);
    CK(cudaMalloc(&ddesc, maxN * sizeof(kvf_copy_desc)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaStream_t st2;
    CK(cudaStreamCreateWithFlags(&st2, cudaStreamNonBlocking));
    cudaEvent_t e0, e1, fork, join;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    std::vector<void *> ceDst;
    std::vector<const void *> ceSrc;
    std::vector<size_t> ceLen;

    std::vector<Variant> vs;
    vs.push_back({"cur", 0, (void *)kvf_copy_blocks, 256, 0, 0, 0, 0});
    if (set == "all") {
        vs.push_back({"u4-t256", 1, (void *)copy_simt<4, 0, 0>, 256, 0, 0, 0, 0});
        vs.push_back({"u8-t256", 1, (void *)copy_simt<8, 0, 0>, 256, 0, 0, 0, 0});
        vs.push_back({"u4-t512", 1, (void *)copy_simt<4, 0, 0>, 512, 0, 0, 0, 0});
        vs.push_back({"u4-t128", 1, (void *)copy_simt<4, 0, 0>, 128, 0, 0, 0, 0});
        vs.push_back({"u4-t256-ldL2", 1, (void *)copy_simt<4, 1, 0>, 256, 0, 0, 0, 0});
        vs.push_back({"u8-t256-ldL2", 1, (void *)copy_simt<8, 1, 0>, 256, 0, 0, 0, 0});
        vs.push_back({"u4-t256-stcs", 1, (void *)copy_simt<4, 0, 1>, 256, 0, 0, 0, 0});
        vs.push_back({"u4-t256-ys16", 1, (void *)copy_simt<4, 0, 0>, 256, 16 << 10, 0, 0, 0});
        vs.push_back({"u4-t256-ys4", 1, (void *)copy_simt<4, 0, 0>, 256, 4 << 10, 0, 0, 0});
        vs.push_back({"tma-4x8", 2, (void *)copy_tma<4, 2>, 32, 0, 4, 8 << 10, 0});
        vs.push_back({"tma-4x16", 2, (void *)copy_tma<4, 2>, 32, 0, 4, 16 << 10, 0});
        vs.push_back({"tma-8x8", 2, (void *)copy_tma<8, 4>, 32, 0, 8, 8 << 10, 0});
        vs.push_back({"tma-2x32", 2, (void *)copy_tma<2, 1>, 32, 0, 2, 32 << 10, 0});
    }
    vs.push_back({"ce", 3, (void *)kvf_copy_blocks, 256, 0, 0, 0, 100});
    for (int p : {3, 6, 10, 15, 25, 40})
        vs.push_back({"hyb-" + std::to_string(p), 3, (void *)kvf_copy_blocks, 256, 0, 0, 0, p});
    for (auto &v : vs)
        if (v.kind == 2)
            CK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, v.stages * v.chunk));

    const u64 sizes[] = {4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10};
    std::mt19937_64 rng(42);
    uint32_t seed = 1;
    int failures = 0;

    auto ceiling = [&](bool put) {
        std::vector<float> t;
        for (int it = 0; it < iters + 1; it++) {
            CK(cudaEventRecord(e0, st));
            if (put)
                CK(cudaMemcpyAsync((void *)host, hbmA, total, cudaMemcpyDefault, st));
            else
                CK(cudaMemcpyAsync(hbmB, (void *)host, total, cudaMemcpyDefault, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it)
                t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        return total / (t[t.size() / 2] * 1e-3) / 1e9;
    };

    // The descriptors of n blocks of bs bytes, block i of HBM at slot[i] of
    // the pool, HBM -> pool (put) or back (get), uploaded to ddesc.
    auto layout = [&](u64 bs, unsigned n, bool put, const std::vector<u64> &slot) {
        std::vector<kvf_copy_desc> d(n);
        for (unsigned i = 0; i < n; i++) {
            const u64 h = host + slot[i] * bs, g = (u64)(put ? hbmA : hbmB) + (u64)i * bs;
            d[i] = put ? kvf_copy_desc{h, g, bs} : kvf_copy_desc{g, h, bs};
        }
        CK(cudaMemcpy(ddesc, d.data(), n * sizeof d[0], cudaMemcpyHostToDevice));
        return d;
    };
    auto shuffled = [&](u64 bs) {
        std::vector<u64> slot(pool / bs);
        for (u64 i = 0; i < slot.size(); i++)
            slot[i] = i;
        std::shuffle(slot.begin(), slot.end(), rng);
        return slot;
    };
    // One warm-up and iters timed launches of the n blocks in ddesc: each
    // after prep (fresh sources, poisoned destinations) and a spin of
    // spinCycles (so that enqueueing is not timed), between two events,
    // verified after. Returns the times, sorted, and adds the words found
    // wrong to *wrong.
    auto timed = [&](unsigned n, long long spinCycles, unsigned long long *wrong, auto prep, auto launch) {
        std::vector<float> t;
        for (int it = 0; it < iters + 1; it++) {
            prep();
            spin<<<1, 1, 0, st>>>(spinCycles);
            CK(cudaEventRecord(e0, st));
            launch();
            CK(cudaEventRecord(e1, st));
            CK(cudaMemsetAsync(bad, 0, sizeof *bad, st));
            compare<<<1024, 256, 0, st>>>(ddesc, n, bad);
            unsigned long long b = 0;
            CK(cudaMemcpyAsync(&b, bad, sizeof b, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            *wrong += b;
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it)
                t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        return t;
    };
    struct Row {
        std::string line;
        double gbps;
        bool put;
    };
    // Prints a sweep's rows with their ratio to the higher of the ceilings
    // measured before (ceil0) and after it.
    auto report = [&](int sw, const double *ceil0, const std::vector<Row> &rows) {
        const double ceil1[2] = {ceiling(true), ceiling(false)};
        const double cp = std::max(ceil0[0], ceil1[0]), cg = std::max(ceil0[1], ceil1[1]);
        printf("sweep=%d ceiling put %.2f %.2f get %.2f %.2f GB/s (before, after)\n", sw, ceil0[0], ceil1[0], ceil0[1], ceil1[1]);
        for (auto &r : rows)
            printf("%s ratio=%.3f\n", r.line.c_str(), r.gbps / (r.put ? cp : cg));
        fflush(stdout);
    };

    for (int sw = 0; sw < sweeps; sw++) {
        const double ceil0[2] = {ceiling(true), ceiling(false)};
        std::vector<Row> rows;
        if (set == "launch") {
            // One launch of the put pipeline's chunk sizes, per slice.
            for (u64 bs : {16ull << 10, 32ull << 10, 64ull << 10}) {
                const std::vector<u64> slot = shuffled(bs);
                for (unsigned n : {64u, 128u, 256u, 512u}) {
                    for (bool put : {true, false}) {
                        layout(bs, n, put, slot);
                        if (!put)
                            fill<<<1024, 256, 0, st>>>((unsigned char *)host, pool, ++seed);
                        for (u64 slice : {0ull, 32ull << 10, 16ull << 10, 8ull << 10, 4ull << 10}) {
                            if (slice && slice >= bs)
                                continue;
                            unsigned long long wrong = 0;
                            dim3 grid, block(256);
                            shape(n, bs, slice, grid);
                            const std::vector<float> t = timed(
                                n, 400000 /* ~0.2 ms */, &wrong,
                                [&] {
                                    if (put)
                                        fill<<<1024, 256, 0, st>>>(hbmA, (u64)n * bs, ++seed);
                                    poison<<<1024, 256, 0, st>>>(ddesc, n);
                                },
                                [&] {
                                    void *args[] = {&ddesc, (void *)&n};
                                    CK(cudaLaunchKernel((void *)kvf_copy_blocks, grid, block, args, 0, st));
                                });
                            const double med = (double)n * bs / (t[t.size() / 2] * 1e-3) / 1e9;
                            char line[256];
                            snprintf(line, sizeof line, "sweep=%d dir=%s size=%lluKiB blocks=%u slice=%lluKiB grid=%ux%u us=%.1f gbps=%.2f wrong_words=%llu",
                                     sw, put ? "put" : "get", (unsigned long long)(bs >> 10), n,
                                     (unsigned long long)((slice ? slice : 65536) >> 10), grid.x, grid.y,
                                     t[t.size() / 2] * 1e3, med, wrong);
                            rows.push_back({line, med, put});
                            failures += wrong != 0;
                        }
                    }
                }
            }
            report(sw, ceil0, rows);
            continue;
        }
        for (u64 bs : sizes) {
            const unsigned n = (unsigned)(total / bs);
            const std::vector<u64> slot = shuffled(bs);
            for (bool put : {true, false}) {
                const std::vector<kvf_copy_desc> d = layout(bs, n, put, slot);
                for (auto &v : vs) {
                    unsigned long long wrong = 0;
                    // Hybrid: blocks [nk, n) go to the copy engine.
                    const unsigned nce = v.kind == 3 ? (unsigned)(((u64)n * v.cePercent + 99) / 100) : 0;
                    const unsigned nk = n - nce;
                    dim3 grid, block(v.threads);
                    shape(nk ? nk : 1, bs, v.slice, grid);
                    ceDst.resize(nce);
                    ceSrc.resize(nce);
                    ceLen.resize(nce);
                    for (unsigned i = 0; i < nce; i++) {
                        ceDst[i] = (void *)d[nk + i].dst;
                        ceSrc[i] = (const void *)d[nk + i].src;
                        ceLen[i] = d[nk + i].len;
                    }
                    const std::vector<float> t = timed(
                        n, 4000000 /* ~2 ms */, &wrong,
                        [&] {
                            // Fresh source bytes and a poisoned destination.
                            seed++;
                            if (put) {
                                fill<<<1024, 256, 0, st>>>(hbmA, total, seed);
                                CU(cuMemsetD8Async(host, 0xA5, pool, st));
                            } else {
                                // The sources are slots of the pool: fill it whole.
                                fill<<<1024, 256, 0, st>>>((unsigned char *)host, pool, seed);
                                CK(cudaMemsetAsync(hbmB, 0xA5, total, st));
                            }
                        },
                        [&] {
                            if (nce) {
                                CK(cudaEventRecord(fork, st));
                                CK(cudaStreamWaitEvent(st2, fork, 0));
                                cudaMemcpyAttributes at = {};
                                at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
                                size_t ai = 0;
                                const cudaError_t be = cudaMemcpyBatchAsync(ceDst.data(), ceSrc.data(), ceLen.data(), nce, &at, &ai, 1, st2);
                                if (be != cudaSuccess) {
                                    printf("cudaMemcpyBatchAsync of %u copies: %s; the check below fails this variant\n", nce, cudaGetErrorString(be));
                                    wrong++;
                                }
                                CK(cudaEventRecord(join, st2));
                            }
                            if (nk) {
                                if (v.kind == 2) {
                                    void *args[] = {&ddesc, (void *)&nk, &v.chunk};
                                    CK(cudaLaunchKernel(v.fn, grid, block, args, v.stages * v.chunk, st));
                                } else {
                                    void *args[] = {&ddesc, (void *)&nk};
                                    CK(cudaLaunchKernel(v.fn, grid, block, args, 0, st));
                                }
                            }
                            if (nce)
                                CK(cudaStreamWaitEvent(st, join, 0));
                        });
                    const double med = total / (t[t.size() / 2] * 1e-3) / 1e9;
                    const double lo = total / (t.back() * 1e-3) / 1e9, hi = total / (t[0] * 1e-3) / 1e9;
                    char line[256];
                    snprintf(line, sizeof line, "sweep=%d dir=%s size=%lluKiB variant=%-14s gbps=%.2f min=%.2f max=%.2f wrong_words=%llu",
                             sw, put ? "put" : "get", (unsigned long long)(bs >> 10), v.name.c_str(), med, lo, hi, wrong);
                    rows.push_back({line, med, put});
                    failures += wrong != 0;
                }
            }
        }
        report(sw, ceil0, rows);
    }
    printf("%s: %d variant runs with wrong bytes\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
