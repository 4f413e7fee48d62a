"""Capacity math: pages, the seed lesson's two plans (exact numbers), model sizes, blocks per GPU."""
import numpy as np
import pytest

import pagedlib
from pagedlib.memory.capacity import (GPU_MEMORY_UTILIZATION, GiB, KiB, MODELS, GPUS, ModelSpec, blocks_for_gpu,
                               blocks_for, gpu_spec, kv_budget, requests_per_group, usable_memory)

SEED = [512, 37, 1900, 128, 4]


@pytest.mark.parametrize("n, block, blocks", [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2),
                                              (37, 16, 3), (1900, 16, 119), (5, 1, 5)])
def test_blocks_for(n, block, blocks):
    assert blocks_for(n, block) == blocks


@pytest.mark.parametrize("n, block", [(5, 0), (5, -1), (-1, 16), (5, 1.5), (2.0, 4)])
def test_blocks_for_rejects_bad_input(n, block):
    with pytest.raises(ValueError):
        blocks_for(n, block)


def test_blocks_for_names_the_argument_it_refuses():
    with pytest.raises(ValueError, match=r"num_tokens must be a non-negative integer; got -1"):
        blocks_for(-1, 16)
    with pytest.raises(ValueError, match=r"block_size must be a positive integer number of tokens; got 0"):
        blocks_for(5, 0)


def test_seed_lesson_reserve_max():
    plan = pagedlib.reserve_max_plan(SEED, max_len=2048)
    assert plan.used == 2581 and plan.allocated == 10_240
    assert round(plan.waste * 100, 1) == 74.8
    assert plan.capacity(40_960) == 20
    assert [r["padding"] for r in plan.table()] == [1536, 2011, 148, 1920, 2044]


def test_seed_lesson_paged():
    plan = pagedlib.paged_plan(SEED, block_size=16)
    assert plan.used == 2581 and plan.allocated == 2608
    assert round(plan.waste * 100, 1) == 1.0
    assert plan.capacity(40_960) == 78
    rows = plan.table()
    assert [r["blocks"] for r in rows] == [32, 3, 119, 8, 1]
    assert [r["allocated"] for r in rows] == [512, 48, 1904, 128, 16]
    assert [r["tail"] for r in rows] == [0, 11, 4, 0, 12]
    assert [r["request"] for r in rows] == ["r1", "r2", "r3", "r4", "r5"]
    ratio = plan.capacity(40_960) / pagedlib.reserve_max_plan(SEED, 2048).capacity(40_960)
    assert round(ratio, 1) == 3.9


def test_reserve_max_is_one_rule_in_every_place_that_reserves_max_len():
    """The plans, chapter 2's allocator, the engine's baseline and the simulator's Orca (Max) all
    reserve what reserve_max_slots says, and refuse what it refuses."""
    from pagedlib.engine.baseline import ReserveMaxScheduler
    from pagedlib.engine.sampling import SamplingParams
    from pagedlib.engine.scheduler import SeqState
    from pagedlib.memory.allocators import ReserveMaxAllocator
    from pagedlib.memory.block_manager import BlockManager
    from pagedlib.memory.capacity import reserve_max_slots
    from pagedlib.sim import reservation_size

    max_len, block_size = 100, 16
    for prompt, output in [(1, 1), (30, 7), (60, 40)]:
        slots = reserve_max_slots(prompt + output, max_len)
        assert slots == max_len
        assert pagedlib.reserve_max_plan([prompt + output], max_len).allocated == slots
        assert ReserveMaxAllocator(1000, max_len).reservation(prompt + output) == slots
        assert reservation_size("max", prompt, output, max_len) == slots
        seq = SeqState(0, 0, [1] * prompt, SamplingParams(max_new_tokens=output))
        scheduler = ReserveMaxScheduler(BlockManager(64, block_size), 4, max_len)
        assert scheduler._blocks_at_most(seq) == blocks_for(slots, block_size)
    for refuse in (lambda: reserve_max_slots(101, max_len),
                   lambda: ReserveMaxAllocator(1000, max_len).reservation(101),
                   lambda: reservation_size("max", 60, 41, max_len)):
        with pytest.raises(ValueError, match="length=101 tokens is longer than max_len=100"):
            refuse()


def test_plan_text_shows_rows_and_totals():
    text = pagedlib.paged_plan(SEED, 16).text()
    assert "1,904" in text and "2,608" in text and "waste 1.0%" in text
    assert "74.8%" in str(pagedlib.reserve_max_plan(SEED, 2048))


def test_waste_grows_with_block_size():
    wastes = [pagedlib.paged_plan(SEED, p).waste for p in (1, 16, 64, 256)]
    assert wastes[0] == 0 and wastes == sorted(wastes) and wastes[-1] > 0.1


def test_plan_errors():
    with pytest.raises(ValueError, match=r"lengths holds requests of \[3000\] tokens.*raise max_len"):
        pagedlib.reserve_max_plan([3000], max_len=2048)
    with pytest.raises(ValueError, match="lengths"):
        pagedlib.paged_plan([], 16)
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        pagedlib.paged_plan([3, -2], 16)
    with pytest.raises(ValueError, match=r"block_size must be a positive integer number of tokens; got True"):
        pagedlib.paged_plan([3], True)
    assert type(pagedlib.paged_plan([3], np.int64(4)).unit) is int
    with pytest.raises(ValueError, match="at least one request"):
        pagedlib.paged_plan([0], 16).capacity(100)
    with pytest.raises(ValueError, match="pool_slots"):
        pagedlib.paged_plan([3], 16).capacity(-1)


def test_kv_bytes_per_token():
    assert MODELS["opt-13b"].kv_bytes_per_token == 819_200 == 800 * KiB
    assert MODELS["llama-3-8b"].kv_bytes_per_token == 131_072 == 128 * KiB
    assert MODELS["llama-2-7b"].kv_bytes_per_token == 512 * KiB
    assert MODELS["mistral-7b-v0.1"].kv_bytes_per_token == 128 * KiB   # per token inside its window
    assert MODELS["gpt2"].kv_bytes_per_token == 2 * 12 * 12 * 64 * 2
    spec = ModelSpec("toy", num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, num_params=10, max_len=64,
                     dtype_bytes=4)
    assert spec.kv_bytes_per_token == 2 * 2 * 2 * 8 * 4 and spec.weights_bytes == 40
    assert spec.kv_bytes(10, batch_size=3) == 30 * spec.kv_bytes_per_token
    assert spec.block_bytes(16) == 16 * spec.kv_bytes_per_token


def test_gpus_table_holds_usable_not_marketed_capacities():
    # a T4 is sold as 16 GB, nvidia-smi shows 15,360 MiB, torch reports about 14.6 GiB
    t4 = GPUS["T4"]
    assert t4.nvidia_smi_mib == 15_360 and t4.sold_as == "16 GB"
    assert 14.5 < t4.memory_gib < 14.8
    assert {"L4", "A10G", "A100-40GB", "A100-80GB", "H100-80GB", "H200"} <= set(GPUS)
    for gpu in GPUS.values():
        smi_bytes = gpu.nvidia_smi_mib * 2**20
        # usable is below what nvidia-smi shows, by the driver's few hundred MiB (never more than 1 GiB)
        assert smi_bytes - GiB < gpu.memory_bytes < smi_bytes, gpu.name
    assert GPUS["A100-80GB"].memory_gib < 80 and GPUS["H200"].memory_gib < 141


def test_llama_3_8b_does_not_fit_a_t4():
    weights = MODELS["llama-3-8b"].weights_bytes
    assert weights > GPUS["T4"].memory_bytes                  # not even at 100% of the memory
    assert blocks_for_gpu("llama-3-8b", "T4") == 0
    assert blocks_for_gpu("llama-3-8b", "L4") > 0


def test_one_memory_utilisation_rule():
    assert GPU_MEMORY_UTILIZATION == 0.92                     # vLLM's gpu_memory_utilization default (v0.21+)
    assert usable_memory("T4") == int(GPUS["T4"].memory_bytes * 0.92)
    assert usable_memory(10**9, 1.0) == 10**9
    spec = MODELS["gpt2"]
    budget = usable_memory("A100-40GB") - spec.weights_bytes
    assert blocks_for_gpu("gpt2", "A100-40GB") == budget // spec.block_bytes(16)
    with pytest.raises(ValueError, match="utilization"):
        usable_memory("T4", 0)
    with pytest.raises(KeyError, match="unknown GPU"):
        usable_memory("Z9000")


def test_blocks_for_gpu_follows_the_engine_formula():
    spec = MODELS["opt-13b"]
    mem, act = 40 * GiB, 2 * GiB
    expected = (int(mem * 0.92) - spec.weights_bytes - act) // (16 * spec.kv_bytes_per_token)
    assert blocks_for_gpu("opt-13b", mem, 16, activation_bytes=act) == expected
    usable = int(GPUS["A100-40GB"].memory_bytes * 0.92)
    expected = (usable - spec.weights_bytes - act) // (16 * spec.kv_bytes_per_token)
    assert blocks_for_gpu(spec, "A100-40GB", 16, activation_bytes=act) == expected
    # the paper's setup: about 12 GB of cache on an A100-40GB, i.e. about 15.7K token slots
    slots = 16 * blocks_for_gpu("opt-13b", "A100-40GB", 16, utilization=1.0, weights_bytes=26 * 10**9,
                                activation_bytes=int(3.7 * GiB))
    assert 15_000 < slots < 16_500
    assert blocks_for_gpu("llama-3-70b", "T4") == 0       # the weights do not fit
    assert blocks_for_gpu("gpt2", 10**9, 16, weights_bytes=0, utilization=1.0) == 10**9 // (16 * 36_864)


def test_blocks_for_gpu_errors():
    with pytest.raises(KeyError, match="unknown model"):
        blocks_for_gpu("gpt-5", "T4")
    with pytest.raises(KeyError, match="unknown GPU"):
        blocks_for_gpu("gpt2", "Z9000")
    with pytest.raises(ValueError, match="utilization"):
        blocks_for_gpu("gpt2", "T4", utilization=1.5)
    with pytest.raises(ValueError, match="block_size must be a positive integer number of tokens"):
        blocks_for_gpu("gpt2", "T4", block_size=0)
    with pytest.raises(ValueError, match="weights_bytes"):
        blocks_for_gpu("gpt2", "T4", weights_bytes=-1)


def test_numpy_integers_are_accepted():
    import numpy as np
    plan = pagedlib.paged_plan(np.array(SEED), np.int64(16))
    assert plan.allocated == 2608 and plan.capacity(np.int64(40_960)) == 78
    assert blocks_for(np.int32(37), 16) == 3
    assert type(plan.rows[0].length) is int


# ---- shapes beyond 2 x layers x kv_heads x head_dim x bytes ---------------------------------------
from hypothesis import given, strategies as st

from pagedlib.memory.capacity import requests_that_fit


def _plain(**kw):
    base = dict(name="toy", num_layers=4, num_heads=8, num_kv_heads=4, head_dim=16, num_params=1000,
                max_len=1 << 20)
    base.update(kw)
    return ModelSpec(**base)


def test_a_plain_model_keeps_one_figure_per_token():
    spec = MODELS["llama-3.1-8b"]
    assert spec.is_uniform and spec.kv_bytes_per_token == 128 * KiB
    assert spec.kv_bytes(32_768) == 32_768 * 128 * KiB == 4 * GiB
    assert spec.kv_bytes_per_token_at(100_000) == 128 * KiB


@given(seq=st.integers(0, 200_000), window=st.integers(1, 8192), sliding=st.integers(0, 4))
def test_sliding_layers_hold_at_most_their_window(seq, window, sliding):
    spec = _plain(sliding_window=window, num_sliding_layers=sliding)
    per_layer = 2 * 4 * 16 * 2
    held = (4 - sliding) * seq + sliding * min(seq, window)
    assert spec.kv_bytes(seq) == held * per_layer
    full = _plain()
    assert spec.kv_bytes(seq) <= full.kv_bytes(seq)
    assert (spec.kv_bytes(seq) == full.kv_bytes(seq)) == (seq <= window or sliding == 0)


def test_mistral_v01_keeps_only_its_4096_token_window():
    spec = MODELS["mistral-7b-v0.1"]
    assert spec.sliding_window == 4096 and spec.num_windowed_layers == 32
    assert spec.kv_bytes(32_768) == spec.kv_bytes(4096) == 4096 * 128 * KiB   # 8x less than 32,768 tokens
    assert spec.kv_bytes(2048) == 2048 * 128 * KiB


def test_gemma3_local_global_mix():
    spec = MODELS["gemma-3-27b"]
    # 62 layers, every sixth global: 10 global, 52 local layers of 1,024 tokens
    assert (spec.num_global_layers, spec.num_windowed_layers, spec.sliding_window) == (10, 52, 1024)
    per_layer = 2 * 16 * 128 * 2
    assert spec.kv_bytes(131_072) == per_layer * (10 * 131_072 + 52 * 1024)
    assert spec.kv_bytes(1000) == 62 * per_layer * 1000


def test_gpt_oss_alternates_full_and_banded_layers():
    spec = MODELS["gpt-oss-120b"]
    assert (spec.num_global_layers, spec.num_windowed_layers, spec.sliding_window) == (18, 18, 128)
    per_layer = 2 * 8 * 64 * 2
    assert spec.kv_bytes(65_536) == per_layer * (18 * 65_536 + 18 * 128)


def test_mla_caches_one_latent_per_token_and_layer():
    spec = MODELS["deepseek-v3"]
    assert spec.kv_latent_dim == 512 + 64 and spec.num_layers == 61
    assert spec.kv_bytes_per_token == 61 * 576 * 2 == 70_272
    # what the same 128 heads of 128-dim K and 128-dim V would cost without the latent
    assert 61 * 128 * (192 + 128) * 2 // spec.kv_bytes_per_token == 71
    # the latent has no heads to shard: every tensor-parallel rank keeps all of it
    assert spec.replace(tensor_parallel_size=8).kv_bytes_per_token == spec.kv_bytes_per_token


def test_hybrid_layers_keep_a_fixed_state_per_sequence():
    spec = MODELS["qwen3-coder-next"]
    assert (spec.num_layers, spec.num_state_layers, spec.num_attention_layers) == (48, 36, 12)
    state = 36 * (32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3) * 2
    assert spec.state_bytes_per_seq == state
    assert spec.kv_bytes(0) == state                          # a sequence costs its state before any token
    assert spec.kv_bytes(10_000) - spec.kv_bytes(5_000) == 5_000 * 12 * 2 * 2 * 256 * 2
    assert spec.kv_bytes(100, batch_size=3) == 3 * spec.kv_bytes(100)


@given(bytes_=st.sampled_from([2, 1, 0.5]), seq=st.integers(0, 50_000))
def test_kv_dtype_scales_the_cache_not_the_weights(bytes_, seq):
    spec = _plain(kv_dtype_bytes=bytes_)
    assert spec.kv_bytes(seq) * 2 == _plain().kv_bytes(seq) * bytes_
    assert spec.weights_bytes == _plain().weights_bytes


def test_fp8_and_4bit_kv_halve_and_quarter_the_cache():
    llama = MODELS["llama-3.1-8b"]
    assert llama.replace(kv_dtype_bytes=1).kv_bytes_per_token == 64 * KiB
    assert llama.replace(kv_dtype_bytes=0.5).kv_bytes_per_token == 32 * KiB


@given(tp=st.sampled_from([1, 2, 4, 8, 16, 32]))
def test_tensor_parallel_shards_kv_heads_then_replicates(tp):
    spec = MODELS["llama-3-70b"]                                # 8 KV heads
    sharded = spec.replace(tensor_parallel_size=tp)
    assert sharded.kv_heads_per_gpu == max(1, 8 // tp)
    assert sharded.kv_bytes_per_token == 80 * 2 * max(1, 8 // tp) * 128 * 2
    # all GPUs together: the full cache while TP <= 8, then copies of heads
    assert sharded.kv_bytes_per_token * tp == spec.kv_bytes_per_token * max(1, tp // 8)
    assert sharded.weights_bytes == -(-spec.weights_bytes // tp)


def test_tensor_parallel_errors_name_the_fix():
    with pytest.raises(ValueError, match="tensor_parallel_size=3.*num_kv_heads=8"):
        MODELS["llama-3-70b"].replace(tensor_parallel_size=3)
    with pytest.raises(ValueError, match="num_sliding_layers"):
        _plain(sliding_window=16, num_sliding_layers=5)
    with pytest.raises(ValueError, match="kv_dtype_bytes"):
        _plain(kv_dtype_bytes=0)
    with pytest.raises(ValueError, match="num_state_layers"):
        _plain(num_state_layers=4)


def test_requests_that_fit_follows_the_shape():
    # one formula for every shape: the budget over one request's cache at its length
    for name in ["llama-3.1-8b", "gemma-3-27b", "mistral-7b-v0.1", "qwen3-8b"]:
        spec = MODELS[name]
        budget = usable_memory("H200") - spec.weights_bytes
        assert requests_that_fit(spec, "H200", 32_768) == budget // spec.kv_bytes(32_768), name
    assert requests_that_fit("llama-3-8b", "T4", 2048) == 0
    gemma, llama = MODELS["gemma-3-27b"], MODELS["llama-3.1-8b"]
    # at 128K, Gemma 3's local layers keep its cache below Llama's although it has twice the layers
    assert gemma.kv_bytes(131_072) < llama.kv_bytes(131_072) < gemma.replace(sliding_window=None).kv_bytes(131_072)
    with pytest.raises(ValueError, match="seq_len"):
        requests_that_fit(llama, "H200", 0)
    with pytest.raises(ValueError, match="past qwen3-8b's max_len=40,960"):
        requests_that_fit("qwen3-8b", "H200", 131_072)


def test_modern_configs_are_the_published_ones():
    # config.json values (sourced constants): layers, heads, KV heads, head dim
    shapes = {"llama-3.1-8b": (32, 32, 8, 128, 131_072), "qwen3-8b": (36, 32, 8, 128, 40_960),
              "gemma-3-27b": (62, 32, 16, 128, 131_072), "gpt-oss-120b": (36, 64, 8, 64, 131_072)}
    for name, shape in shapes.items():
        s = MODELS[name]
        assert (s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim, s.max_len) == shape, name
    # gpt-oss ships MXFP4 experts: its weights are its checkpoint's size, far below 2 bytes a parameter
    assert MODELS["gpt-oss-120b"].weights_bytes < MODELS["gpt-oss-120b"].num_params


# ---- Blackwell GPUs and data-parallel attention (chapter 12) -------------------------------------
def test_unknown_gpu_names_in_the_tests_are_really_unknown():
    # a test that expects "unknown GPU" must use a name no table holds (B300 is a real row now)
    with pytest.raises(KeyError, match="unknown GPU 'Z9000'"):
        gpu_spec("Z9000")
    assert gpu_spec("B300").sold_as == "288 GB"


def test_blackwell_rows_follow_the_datasheets_and_the_b200_measurement():
    from pagedlib.memory.capacity import BLACKWELL_GPUS, PEAK_BANDWIDTH_GBS
    assert set(BLACKWELL_GPUS) == {"B200", "GB200", "B300"} and not set(BLACKWELL_GPUS) & set(GPUS)
    assert round(BLACKWELL_GPUS["B200"].memory_gib, 2) == 178.35          # CUDA's total, pytorch/ao#4002
    for gpu in BLACKWELL_GPUS.values():
        sold = float(gpu.sold_as.split()[0])
        assert gpu.nvidia_smi_mib is None
        # NVIDIA's HBM "GB" is about a GiB, of which the driver keeps about 1%
        assert 0.98 * sold < gpu.memory_gib < sold, gpu.name
        assert PEAK_BANDWIDTH_GBS[gpu.name] == 8000
    assert usable_memory("B300") == int(BLACKWELL_GPUS["B300"].memory_bytes * 0.92)


def test_dp_attention_keeps_each_requests_whole_cache_on_one_gpu():
    ds = MODELS["deepseek-v3"]
    tp = ds.replace(tensor_parallel_size=8)
    dp = tp.replace(dp_attention=True)
    # MLA: one latent per token and layer, the same bytes on a GPU either way
    assert tp.kv_bytes_per_token == dp.kv_bytes_per_token == ds.kv_bytes_per_token == 61 * 576 * 2
    # the attention weights are whole on every GPU under DP attention, the rest still split
    assert dp.weights_bytes == -(-(ds.total_weights_bytes - ds.attention_weights_size) // 8) \
        + ds.attention_weights_size
    assert dp.weights_bytes > tp.weights_bytes
    # per GPU fewer tokens fit (more weights), but the group holds 8 different caches, not 8 copies
    assert requests_that_fit(dp, "H200", 131_072) < requests_that_fit(tp, "H200", 131_072)
    assert requests_per_group(tp, "H200", 131_072) == requests_that_fit(tp, "H200", 131_072) == 5
    assert requests_per_group(dp, "H200", 131_072) == 8 * requests_that_fit(dp, "H200", 131_072) == 32
    assert kv_budget(tp, "H200") == usable_memory("H200") - tp.weights_bytes


def test_dp_attention_keeps_all_kv_heads_and_state_of_its_requests():
    llama = MODELS["llama-3-70b"].replace(tensor_parallel_size=8)
    assert llama.kv_heads_per_gpu == 1
    with pytest.raises(ValueError, match="dp_attention needs attention_weights_size"):
        llama.replace(dp_attention=True)
    dp = llama.replace(dp_attention=True, attention_weights_size=10 * GiB)
    assert dp.kv_heads_per_gpu == 8 and dp.kv_bytes_per_token == MODELS["llama-3-70b"].kv_bytes_per_token
    hybrid = MODELS["qwen3-coder-next"]
    two = hybrid.replace(tensor_parallel_size=2)
    assert two.replace(dp_attention=True, attention_weights_size=GiB).state_bytes_per_seq \
        == hybrid.state_bytes_per_seq == 2 * two.state_bytes_per_seq
