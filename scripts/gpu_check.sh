#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run: the kernel grid and the engine compiled natively, the
# attention benchmark (time, bandwidth, fraction of peak, vs SDPA), the one kernel for every step
# (paged_attention_varlen) against the separate kernels and the price of paging with it, the decode
# bandwidth of the chosen launch configuration next to its neighbours (and the resource table it was
# chosen from), the GPU record chapters 8 and 9 show without a GPU (pagedlib/data/gpu_record.json), and
# the GPU chapters executed.
# Uses the python on PATH, which must already have CUDA torch and triton (Colab does):
#   pip install -e . --no-deps && bash scripts/gpu_check.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_check}
mkdir -p "$out"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU: nothing to check'"
python -c "import pagedlib; pagedlib.print_env()" | tee "$out/env.txt"
python -m pytest -q -p no:cacheprovider tests/test_attention.py tests/test_varlen_attention.py tests/test_torch_backend.py \
    tests/test_attention_errors.py tests/test_kernel_resources.py tests/test_model.py tests/test_engine.py \
    2>&1 | tee "$out/tests.txt"
python -m pagedlib.bench attention --out "$out/bench_attention" 2>&1 | tee "$out/bench_attention.txt"
python -m pagedlib.bench attention --varlen --out "$out/bench_attention" 2>&1 | tee "$out/bench_varlen.txt"
# launch configuration: chosen vs neighbours (tile / 2, tile * 2, other warps, stages -1/+1), per head_dim
for head_dim in 64 128 256; do
    python -m pagedlib.bench kernels --head-dim "$head_dim" 2>&1 | tee -a "$out/bench_kernels.txt"
done
python -m pagedlib.bench kernels --resources 2>&1 | tee "$out/kernel_resources.txt"
# the record chapters 8 and 9 show when run without a GPU (commit it: pagedlib/data/gpu_record.json)
python -m pagedlib.bench gpu_record 2>&1 | tee "$out/gpu_record.txt"
cp pagedlib/data/gpu_record.json "$out/"
for nb in notebooks/08_triton_kernel.ipynb notebooks/09_faster_kernels.ipynb notebooks/10_serving_engine.ipynb; do
    cp "$nb" "$out/"
    python scripts/execute_notebooks.py "$out/$(basename "$nb")" 2>&1 | tee -a "$out/notebooks.txt"
done
