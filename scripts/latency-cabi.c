/* One small call at a time through the C ABI, from threads Go did not
 * create (as Python's are): a rung of the latency ladder
 * (docs/perf/latency.md, "dev VM ladder"; scripts/latency-ladder.sh builds
 * and runs it).
 *
 *   latency-cabi CONFIG_JSON [N]
 *
 * CONFIG_JSON is a Store configuration (a remote master_server_addr for the
 * ladder; driver "sim" on a machine without a GPU). The program registers a
 * 4 KiB host buffer, puts one 4 KiB object from it, then, on the main
 * thread and on a new pthread, times N calls of each after 200 warm-up
 * calls:
 *
 *   exists   kvfabric_exists of the key (one master round trip, nothing else)
 *   get      kvfabric_get of the object into the registered buffer
 *
 * and prints one line per kind and thread in Go's benchmark format
 * (BenchmarkCABI/<thread>/<call> N <mean> ns/op <p50> p50-us <p99> p99-us
 * <min> min-us), so that benchstat reads it beside the Go rungs. The bytes
 * read back are compared with those put. Exit status 0 when every call
 * succeeded. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kvfabric.h"

static int64_t h;
static int n = 5000;
static unsigned char *buf; /* registered: 4 KiB source/destination */
static const char key[] = "lat-4k";
enum { SIZE = 4096, WARM = 200 };

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int call(int get) {
    if (!get)
        return kvfabric_exists(h, key, sizeof key - 1) == 1 ? 0 : -1;
    uint64_t ptr = (uint64_t)(uintptr_t)buf, len = SIZE, nread = 0;
    int32_t st = kvfabric_get(h, key, sizeof key - 1, &ptr, &len, 1, 0, &nread);
    return st == 0 && nread == SIZE ? 0 : -1;
}

/* timed runs n calls of one kind and prints a line; nonzero on a failure. */
static int timed(const char *where, int get) {
    uint64_t *t = malloc(sizeof *t * (size_t)n);
    for (int i = 0; i < WARM; i++)
        if (call(get)) return 1;
    for (int i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        if (call(get)) { free(t); return 1; }
        t[i] = now_ns() - t0;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)t[i];
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("BenchmarkCABI/%s/%s \t%d\t%.0f ns/op\t%.2f p50-us\t%.2f p99-us\t%.2f min-us\n", where,
           get ? "get" : "exists", n, sum / n, t[n / 2] / 1e3, t[(n - 1) * 99 / 100] / 1e3, t[0] / 1e3);
    fflush(stdout);
    free(t);
    return 0;
}

static void *thread_main(void *arg) {
    int *rc = arg;
    *rc = timed("pthread", 0) || timed("pthread", 1);
    return NULL;
}

int main(int argc, char **argv) {
    char err[1024];
    if (argc < 2) { fprintf(stderr, "usage: %s CONFIG_JSON [N]\n", argv[0]); return 2; }
    if (argc > 2) n = atoi(argv[2]);
    if (n < 1) n = 1;
    if (kvfabric_open(argv[1], strlen(argv[1]), &h, err, sizeof err) != 0) { fprintf(stderr, "open: %s\n", err); return 1; }
    if (posix_memalign((void **)&buf, 4096, SIZE)) return 1;
    for (int i = 0; i < SIZE; i++) buf[i] = (unsigned char)(i * 7 + 3);
    uint64_t ptr = (uint64_t)(uintptr_t)buf, len = SIZE;
    int rc = 1;
    if (kvfabric_register_buffer(h, (uintptr_t)buf, SIZE) != 0) goto fail;
    if (kvfabric_put(h, key, sizeof key - 1, &ptr, &len, 1, 0, 0, 0, NULL, 0, 0) != 0) goto fail;
    memset(buf, 0, SIZE);
    if (timed("main", 0) || timed("main", 1)) goto fail;
    for (int i = 0; i < SIZE; i++)
        if (buf[i] != (unsigned char)(i * 7 + 3)) { fprintf(stderr, "byte %d differs\n", i); goto out; }
    pthread_t th;
    int trc = 1;
    if (pthread_create(&th, NULL, thread_main, &trc) || pthread_join(th, NULL) || trc) goto fail;
    puts("# cabi: bytes_ok=true");
    rc = 0;
    goto out;
fail:
    kvfabric_last_error(h, err, sizeof err);
    fprintf(stderr, "failed: %s\n", err);
out:
    kvfabric_remove(h, key, sizeof key - 1, 1);
    kvfabric_unregister_buffer(h, (uintptr_t)buf);
    if (kvfabric_close(h) != 0) rc = rc ? rc : 3;
    free(buf);
    return rc;
}
