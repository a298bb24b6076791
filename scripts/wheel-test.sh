#!/usr/bin/env bash
# make wheel-test: installs the wheels of `make wheel` for this machine's arch
# into a fresh virtual environment and runs, with no Go on PATH, no checkout
# on sys.path and KVFABRIC_LIB/KVFABRIC_BIN unset:
#   - `kvfabric --help` and `kvfabric --version` (the console command that
#     runs the packaged binary), `kvfabric doctor --driver sim`;
#   - that `import kvfabric` is the installed package and that its version,
#     its library's kvfabric_version() and the binary's agree;
#   - python/tests (a copy outside the checkout) against the installed
#     package on the simulator — the remote-master tests start `kvfabric
#     master` through the console command.
# Needs python3 and PyPI (pytest, numpy) the first time; pip's cache after.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
V=$(cat VERSION)
arch=$(uname -m)
whl=dist/kvfabric-$V-py3-none-manylinux_2_28_$arch.whl
shim=dist/kvfabric_mooncake_shim-$V-py3-none-any.whl
for f in "$whl" "$shim"; do
    test -f "$f" || { echo "wheel-test: $f missing: run make wheel"; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kvf-wheel-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$whl" "$shim" pytest numpy
cp -r python/tests "$work/tests"
find "$work/tests" -name __pycache__ -prune -exec rm -rf {} +
echo "wheel-test: venv ready in $(($(date +%s) - t0)) s"

# A clean environment: the venv and the system's /usr/bin:/bin only (Go lives
# in /usr/local/go or GOROOT, never there; checked below).
env -i HOME="$HOME" TMPDIR="${TMPDIR:-/tmp}" LANG=C.UTF-8 \
    PATH="$work/venv/bin:/usr/bin:/bin" KVF_V="$V" KVF_WORK="$work" \
    bash -euo pipefail -c '
cd "$KVF_WORK"
if command -v go >/dev/null; then echo "wheel-test: go is on PATH ($(command -v go))"; exit 1; fi
echo "wheel-test: no go on PATH"
python - <<PY
import os, sys, sysconfig
import kvfabric
from kvfabric import _native
site = sysconfig.get_paths()["purelib"]
assert kvfabric.__file__.startswith(site), ("not the installed package", kvfabric.__file__)
assert _native.library_path().startswith(site), _native.library_path()
assert kvfabric.__version__ == os.environ["KVF_V"], kvfabric.__version__
assert _native.library_version() == kvfabric.__version__, _native.library_version()
import mooncake.store
assert mooncake.store.MooncakeDistributedStore.__module__ == "kvfabric.compat.mooncake"
print("wheel-test: import kvfabric:", kvfabric.__file__, "version", kvfabric.__version__, "library", _native.library_version())
PY
test "$(command -v kvfabric)" = "$KVF_WORK/venv/bin/kvfabric"
kvfabric --help | grep -q "^  master " || { kvfabric --help; echo "wheel-test: kvfabric --help lists no master"; exit 1; }
for c in master provider doctor; do kvfabric $c --help >/dev/null; done
got=$(kvfabric --version)
test "$got" = "kvfabric $KVF_V" || { echo "wheel-test: kvfabric --version: $got"; exit 1; }
echo "wheel-test: $got; kvfabric --help lists master, provider, doctor"
kvfabric doctor --driver sim >/dev/null && echo "wheel-test: kvfabric doctor --driver sim ok"
python -m pytest -q -p no:cacheprovider --durations=5 tests
'
echo "wheel-test: passed in $(($(date +%s) - t0)) s"
