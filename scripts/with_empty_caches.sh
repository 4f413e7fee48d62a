#!/usr/bin/env bash
# Run a command (`make test`) as on a machine that has never run the course: every per-user cache the
# course, its tests and its tools read points at a fresh, empty folder, removed afterwards. A cache
# left on a machine (the converted SmolLM2, compiled Triton kernels, matplotlib's font list, Jupyter's
# and IPython's settings) can then never make a test pass that would fail on a new learner's machine.
#   bash scripts/with_empty_caches.sh make test        (what `make test-clean` and .ci/run do)
# CI_TRITON_CACHE_DIR, when set, keeps Triton's compiled kernels there instead (the CI workflow's keyed
# cache; the Makefile says why reusing it is safe). It does not depend on HOME.
set -euo pipefail
if [ "$#" -eq 0 ]; then
    echo "usage: bash scripts/with_empty_caches.sh COMMAND [ARGS...]  (e.g. make test)" >&2
    exit 2
fi
# pip's download cache stays where it was: it only saves downloads when .venv is built (pip checks
# every wheel against the pins), and the course never reads it.
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}"
root=$(mktemp -d "${TMPDIR:-/tmp}/pagedlib-empty-caches.XXXXXX")
trap 'rm -rf "$root"' EXIT
export XDG_CACHE_HOME="$root/xdg-cache"          # pagedlib's converted model ($XDG_CACHE_HOME/pagedlib)
export XDG_CONFIG_HOME="$root/xdg-config"
export XDG_DATA_HOME="$root/xdg-data"
export HF_HOME="$root/huggingface"                # Hugging Face hub and datasets caches
export TORCH_HOME="$root/torch"
export TORCHINDUCTOR_CACHE_DIR="$root/torchinductor"
export TRITON_HOME="$root/triton-home"            # Triton's ~/.triton (cache, dumps, overrides)
export TRITON_CACHE_DIR="${CI_TRITON_CACHE_DIR:-$root/triton-cache}"
export MPLCONFIGDIR="$root/matplotlib"            # matplotlib's settings and font cache
export IPYTHONDIR="$root/ipython"
export JUPYTER_CONFIG_DIR="$root/jupyter-config"
export JUPYTER_DATA_DIR="$root/jupyter-data"
export JUPYTER_RUNTIME_DIR="$root/jupyter-runtime"
for var in XDG_CACHE_HOME XDG_CONFIG_HOME XDG_DATA_HOME HF_HOME TORCH_HOME TORCHINDUCTOR_CACHE_DIR \
           TRITON_HOME TRITON_CACHE_DIR MPLCONFIGDIR IPYTHONDIR JUPYTER_CONFIG_DIR JUPYTER_DATA_DIR \
           JUPYTER_RUNTIME_DIR; do
    mkdir -p "${!var}"
done
echo "with_empty_caches: every per-user cache under $root"
"$@"
