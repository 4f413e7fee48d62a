#!/usr/bin/env bash
# The GPU record in one prepared run: every measurement of `python -m pagedlib.bench gpu_record`
# (kernel grid in fp16/bf16 against the reference, decode bandwidth against HBM peak, split-K counts
# against the single pass, block sizes, the price of paging, the one varlen kernel against the
# separate ones, the engine against transformers' continuous batching), each section within its own
# time budget (about 8 minutes in all on an H200), the record rewritten after every section.
#
# Uses $PYTHON (default python3) as it is (its torch, triton and transformers; nothing is installed):
#   bash scripts/gpu_check.sh [OUT_DIR]            # on a CUDA GPU: writes OUT_DIR/gpu_record.json
#   bash scripts/gpu_check.sh --dry-run [OUT_DIR]  # rehearsal on a CPU: interpreter, tiny sizes
# Then copy OUT_DIR/gpu_record.json to pagedlib/data/gpu_record.json and commit it.
# Writes two files: gpu_record.json and gpu_check.log. GROUPS_OF_SECTIONS='--sections engine;...' measures
# only some sections, each group in a process of its own.
set -euo pipefail
PYTHON=${PYTHON:-python3}   # the python that has torch and triton (on the GPU machine: python3)
cd "$(dirname "$0")/.."
dry=()
if [[ "${1:-}" == "--dry-run" ]]; then dry=(--dry-run); shift; fi
# GROUPS (optional): groups of options, separated by ';', each run as one process
IFS=';' read -r -a groups <<< "${GROUPS_OF_SECTIONS:---sections chapters correctness bandwidth;--sections splits --split-contexts 1024 4096 16384;--sections splits --split-contexts 32768;--sections block_size paging varlen;--sections engine}"
out=${1:-gpu_check}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ ${#dry[@]} -eq 0 ]]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: use --dry-run')"
fi
{
    "$PYTHON" -c "import pagedlib; pagedlib.print_env()" || true
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv || true
    # each group of sections in a process of its own: a GPU fault (an illegal address leaves the
    # process's CUDA context unusable) costs that group only; the parts are combined at the end
    parts="$out/parts"; mkdir -p "$parts"
    i=0
    for group in "${groups[@]}"; do
        i=$((i + 1))
        # shellcheck disable=SC2086
        "$PYTHON" -m pagedlib.bench gpu_record "${dry[@]}" $group --out "$parts/part$i.json" \
            || echo "gpu_check: the group '$group' failed (its part keeps what it measured)"
    done
    "$PYTHON" -m pagedlib.bench gpu_record --combine "$parts"/part*.json --out "$out/gpu_record.json"
} 2>&1 | tee "$out/gpu_check.log"
