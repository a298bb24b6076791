"""A model of the Store's put loop (internal/client/ops.go putPart) for one
BatchPut, used in runF's README: chunks from the chunker, the next chunk's
PutStart prefetched while this one resolves and submits, pipeDepth chunks
on the GPU, PutEnd of the oldest after its copies, PutStart and PutEnd
sharing the master's lock. Times in µs per key, H200 numbers from runE/runF
(PutStart 0.64, PutEnd 0.30, resolve 0.10, submit 0.03, GPU 1.315 at 64 KiB);
`pre` is work done for the whole batch before the first master call.
Prints the ratio to the link (1.189 µs per 64 KiB key at 55.1 GB/s)."""


def sim(chunks, p=0.64, e=0.30, r=0.10, sb=0.03, c=1.315, pre=0.0, depth=3):
    t = pre
    lock_free = t + p * chunks[0]
    t = lock_free
    gpu_free, queue, next_ps_end = 0.0, [], None
    for k in range(len(chunks)):
        if k > 0:
            t = max(t, next_ps_end)
        if k + 1 < len(chunks):
            next_ps_end = max(t, lock_free) + p * chunks[k + 1]
            lock_free = next_ps_end
        t += (r + sb) * chunks[k]
        gpu_free = max(t, gpu_free) + c * chunks[k]
        queue.append((k, gpu_free))
        while len(queue) >= depth:
            kk, done = queue.pop(0)
            t = max(t, done)
            t = max(t, lock_free) + e * chunks[kk]
            lock_free = max(lock_free, t)
    while queue:
        kk, done = queue.pop(0)
        t = max(max(t, done), lock_free) + e * chunks[kk]
    return t


def chunks_for(n, first=64, mx=512, grow=2):
    out, lo, size = [], 0, first
    while lo < n:
        hi = min(lo + size, n)
        out.append(hi - lo)
        lo, size = hi, min(int(size * grow), mx)
    return out


for pre in (0.0, 0.1):
    print(f"work before the first master call: {pre} us/key")
    for n in (1024, 4096, 16384):
        t = sim(chunks_for(n), pre=pre * n)
        print(f"  {n:5d} keys: {t / n:.3f} us/key, ratio {1.189 / (t / n):.3f}")
