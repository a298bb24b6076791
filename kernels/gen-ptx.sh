#!/usr/bin/env bash
# Regenerates kernels/*.ptx from kernels/*.cu (run through `make ptx`).
#
# Uses $NVCC when set (e.g. /usr/local/cuda/bin/nvcc on the device), else
# nvcc 13.0 from PyPI wheels cached under ${KVF_NVCC_CACHE:-~/.cache/kvfabric-nvcc}.
# The toolkit version must not be newer than the oldest driver we run on:
# lab driver 580 = CUDA 13.0 accepts PTX ISA <= 9.0, which nvcc 13.0 emits.
set -euo pipefail
cd "$(dirname "$0")"

NVCC_VERSION=13.0
CACHE=${KVF_NVCC_CACHE:-$HOME/.cache/kvfabric-nvcc}
if [[ -z "${NVCC:-}" ]]; then
  root=$CACHE/$NVCC_VERSION
  if [[ ! -x $root/nvidia/cu13/bin/nvcc || ! -x $root/nvidia/cu13/nvvm/bin/cicc ]]; then
    mkdir -p "$root/wheels"
    # nvcc driver + ptxas, cicc (nvvm), crt and runtime headers.
    pip download --quiet --no-deps -d "$root/wheels" \
      "nvidia-cuda-nvcc==$NVCC_VERSION.*" "nvidia-nvvm==$NVCC_VERSION.*" \
      "nvidia-cuda-crt==$NVCC_VERSION.*" "nvidia-cuda-runtime==$NVCC_VERSION.*"
    for w in "$root"/wheels/*.whl; do python3 -m zipfile -e "$w" "$root"; done
    chmod +x "$root"/nvidia/cu13/bin/* "$root"/nvidia/cu13/nvvm/bin/*
  fi
  NVCC=$root/nvidia/cu13/bin/nvcc
fi
# nvcc 13.0 supports gcc <= 14; prefer gcc-12 where both exist.
CCBIN=${CCBIN:-$(command -v gcc-12 || command -v gcc)}
PTXAS=$(dirname "$NVCC")/ptxas

"$NVCC" --version | tail -2
for cu in *.cu; do
  ptx=${cu%.cu}.ptx
  # compute_90: sm_90 (H200) and, by PTX JIT, newer GPUs. No -lineinfo, so
  # the output does not depend on the checkout path.
  "$NVCC" -ccbin "$CCBIN" -ptx -arch=compute_90 -O3 "$cu" -o "$ptx"
  "$PTXAS" -arch=sm_90 "$ptx" -o /dev/null   # assemble check
  echo "wrote kernels/$ptx"
done
