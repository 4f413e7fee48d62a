#!/usr/bin/env bash
# Chapter 10's record of pagedlib against transformers' continuous batching on the random models
# (pagedlib/data/peer_cpu.json): ShareGPT-like mixes of 16 to 64 requests, then n equal requests
# decoding together, n = 1 to 64; three alternating runs each, one torch thread. About 25 minutes on
# the course's 2-core CPU; run it on a quiet machine (the CPU-time ratios resist other load, not fully).
# The real-model figures (--model smollm2) are kept. Usage: bash scripts/peer_record.sh [RECORD]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 PYTHONHASHSEED=0
PY=${PY:-.venv/bin/python}
RECORD=${1:-pagedlib/data/peer_cpu.json}
for n in 16 32 48 64; do
  $PY -m pagedlib.bench engine --against transformers --requests "$n" --runs 3 --save "$RECORD"
done
for n in 1 2 4 8 16 32 64; do
  $PY -m pagedlib.bench engine --against transformers --workload equal --prompt-len 256 --new-tokens 128 \
      --requests "$n" --runs 3 --save "$RECORD"
done
