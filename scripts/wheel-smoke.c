/* A smoke test of a cross-built libkvfabric.so (scripts/wheel.sh runs it
 * under qemu-user when the wheel's arch is not this machine's): the version
 * calls, then a simulator Store with an embedded master, one put and get of
 * 4 KiB through the staged bytes path, and close. argv[1]: config JSON. */
#include <stdio.h>
#include <string.h>
#include "kvfabric.h"
int main(int argc, char **argv) {
    int64_t h = 0; char err[512];
    printf("abi %d version %s\n", kvfabric_abi_version(), kvfabric_version());
    const char *cfg = argv[1];
    if (kvfabric_open(cfg, strlen(cfg), &h, err, sizeof err) != 0) { printf("open: %s\n", err); return 1; }
    static char src[4096], dst[4096];
    for (int i = 0; i < 4096; i++) src[i] = (char)(i * 7);
    uint64_t n = 0;
    if (kvfabric_put_bytes(h, "k", 1, src, sizeof src, 0, 0, NULL, 0, 0) != 0) return 2;
    if (kvfabric_get_bytes(h, "k", 1, dst, sizeof dst, &n) != 0 || n != 4096 || memcmp(src, dst, 4096)) return 3;
    if (kvfabric_close(h) != 0) return 4;
    puts("smoke: put/get through a simulator store ok");
    return 0;
}
