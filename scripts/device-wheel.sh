#!/usr/bin/env bash
# On-device check of the wheel (issue #17), from the repository root on the
# GPU machine (python3 with torch, no Go needed):
#
#   make device-wheel                  # on the dev machine: .device/wheels/*.whl
#   scripts/device-wheel.sh            # on the device (.device carried)
#
# Creates a venv that sees the system's torch (--system-site-packages),
# installs the kvfabric and mooncake-shim wheels from .device/wheels with
# --no-deps --no-index, checks the console command (kvfabric --version,
# kvfabric doctor on the real driver) and runs scripts/device-python.sh
# against the installed package (KVFABRIC_LIB unset, no checkout on
# PYTHONPATH). Exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
V=$(cat VERSION)
arch=$(uname -m)
whl=.device/wheels/kvfabric-$V-py3-none-manylinux_2_28_$arch.whl
shim=.device/wheels/kvfabric_mooncake_shim-$V-py3-none-any.whl
for f in "$whl" "$shim"; do
    test -f "$f" || { echo "device-wheel: $f missing: run make device-wheel and carry .device"; exit 1; }
done
# Where the system python3 finds torch (a user or extra site directory is
# not seen by a venv, even with --system-site-packages): added to the
# venv's path below, after checking that no kvfabric lives there.
torch_dir=$(cd / && python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null || true)
if [ -n "$torch_dir" ] && [ -e "$torch_dir/kvfabric" ]; then
    echo "device-wheel: $torch_dir (torch's) holds a kvfabric package too; refusing to mix it in"; exit 1
fi
unset KVFABRIC_LIB KVFABRIC_BIN PYTHONPATH
work=$(mktemp -d "${TMPDIR:-/tmp}/kvf-device-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
if python3 -m venv --system-site-packages "$work/venv" 2>"$work/venv.err"; then
    "$work/venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-index "$whl" "$shim"
else
    # A python3 without ensurepip (Debian's without python3-venv): a venv
    # without pip, filled by the system's pip (pip >= 22.3 has --python).
    echo "device-wheel: venv with pip failed ($(tail -1 "$work/venv.err")); using the system pip"
    python3 -m venv --system-site-packages --without-pip "$work/venv"
    python3 -m pip --python "$work/venv/bin/python" install -q --disable-pip-version-check --no-deps --no-index "$whl" "$shim"
fi
export PATH="$work/venv/bin:$PATH"
if [ -n "$torch_dir" ]; then
    # A .pth file appends torch's directory after the venv's site-packages,
    # so kvfabric still comes from the installed wheel.
    site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$torch_dir" > "$site/zz-system-torch.pth"
fi
echo "device-wheel: $(command -v kvfabric): $(kvfabric --version); glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"
(cd "$work" && python3 -c 'import kvfabric, sys; from kvfabric import _native
assert kvfabric.__file__.startswith(sys.prefix), kvfabric.__file__
print("device-wheel: import kvfabric", kvfabric.__version__, kvfabric.__file__, "lib", _native.library_version())')
kvfabric doctor || echo "device-wheel: kvfabric doctor exited $? (reported above)"
KVFABRIC_INSTALLED=1 scripts/device-python.sh "$@"
