"""Capacity math: pages, the seed lesson's two plans (exact numbers), model sizes, blocks per GPU."""
import pytest

import pagedlib
from pagedlib.memory.capacity import (GPU_MEMORY_UTILIZATION, GiB, KiB, MODELS, GPUS, ModelSpec, blocks_for_gpu,
                               pages_for, usable_memory)

SEED = [512, 37, 1900, 128, 4]


@pytest.mark.parametrize("n, page, pages", [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2),
                                            (37, 16, 3), (1900, 16, 119), (5, 1, 5)])
def test_pages_for(n, page, pages):
    assert pages_for(n, page) == pages


@pytest.mark.parametrize("n, page", [(5, 0), (5, -1), (-1, 16), (5, 1.5), (2.0, 4)])
def test_pages_for_rejects_bad_input(n, page):
    with pytest.raises(ValueError):
        pages_for(n, page)


def test_seed_lesson_reserve_max():
    plan = pagedlib.reserve_max_plan(SEED, max_len=2048)
    assert plan.used == 2581 and plan.allocated == 10_240
    assert round(plan.waste * 100, 1) == 74.8
    assert plan.capacity(40_960) == 20
    assert [r["padding"] for r in plan.table()] == [1536, 2011, 148, 1920, 2044]


def test_seed_lesson_paged():
    plan = pagedlib.paged_plan(SEED, page_size=16)
    assert plan.used == 2581 and plan.allocated == 2608
    assert round(plan.waste * 100, 1) == 1.0
    assert plan.capacity(40_960) == 78
    rows = plan.table()
    assert [r["pages"] for r in rows] == [32, 3, 119, 8, 1]
    assert [r["allocated"] for r in rows] == [512, 48, 1904, 128, 16]
    assert [r["tail"] for r in rows] == [0, 11, 4, 0, 12]
    assert [r["request"] for r in rows] == ["r1", "r2", "r3", "r4", "r5"]
    ratio = plan.capacity(40_960) / pagedlib.reserve_max_plan(SEED, 2048).capacity(40_960)
    assert round(ratio, 1) == 3.9


def test_plan_text_shows_rows_and_totals():
    text = pagedlib.paged_plan(SEED, 16).text()
    assert "1,904" in text and "2,608" in text and "waste 1.0%" in text
    assert "74.8%" in str(pagedlib.reserve_max_plan(SEED, 2048))


def test_waste_grows_with_page_size():
    wastes = [pagedlib.paged_plan(SEED, p).waste for p in (1, 16, 64, 256)]
    assert wastes[0] == 0 and wastes == sorted(wastes) and wastes[-1] > 0.1


def test_plan_errors():
    with pytest.raises(ValueError, match=r"lengths holds requests of \[3000\] tokens.*raise max_len"):
        pagedlib.reserve_max_plan([3000], max_len=2048)
    with pytest.raises(ValueError, match="lengths"):
        pagedlib.paged_plan([], 16)
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        pagedlib.paged_plan([3, -2], 16)
    with pytest.raises(ValueError, match="at least one request"):
        pagedlib.paged_plan([0], 16).capacity(100)
    with pytest.raises(ValueError, match="pool_slots"):
        pagedlib.paged_plan([3], 16).capacity(-1)


def test_kv_bytes_per_token():
    assert MODELS["opt-13b"].kv_bytes_per_token == 819_200 == 800 * KiB
    assert MODELS["llama-3-8b"].kv_bytes_per_token == 131_072 == 128 * KiB
    assert MODELS["llama-2-7b"].kv_bytes_per_token == 512 * KiB
    assert MODELS["mistral-7b"].kv_bytes_per_token == 128 * KiB
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
    assert GPU_MEMORY_UTILIZATION == 0.9                      # vLLM's gpu_memory_utilization default
    assert usable_memory("T4") == int(GPUS["T4"].memory_bytes * 0.9)
    assert usable_memory(10**9, 1.0) == 10**9
    spec = MODELS["gpt2"]
    budget = usable_memory("A100-40GB") - spec.weights_bytes
    assert blocks_for_gpu("gpt2", "A100-40GB") == budget // spec.block_bytes(16)
    with pytest.raises(ValueError, match="utilization"):
        usable_memory("T4", 0)
    with pytest.raises(KeyError, match="unknown GPU"):
        usable_memory("B300")


def test_blocks_for_gpu_follows_the_engine_formula():
    spec = MODELS["opt-13b"]
    mem, act = 40 * GiB, 2 * GiB
    expected = (int(mem * 0.9) - spec.weights_bytes - act) // (16 * spec.kv_bytes_per_token)
    assert blocks_for_gpu("opt-13b", mem, 16, activation_bytes=act) == expected
    usable = int(GPUS["A100-40GB"].memory_bytes * 0.9)
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
        blocks_for_gpu("gpt2", "B300")
    with pytest.raises(ValueError, match="utilization"):
        blocks_for_gpu("gpt2", "T4", utilization=1.5)
    with pytest.raises(ValueError, match="block_size must be an integer"):
        blocks_for_gpu("gpt2", "T4", block_size=0)
    with pytest.raises(ValueError, match="weights_bytes"):
        blocks_for_gpu("gpt2", "T4", weights_bytes=-1)


def test_numpy_integers_are_accepted():
    import numpy as np
    plan = pagedlib.paged_plan(np.array(SEED), np.int64(16))
    assert plan.allocated == 2608 and plan.capacity(np.int64(40_960)) == 78
    assert pages_for(np.int32(37), 16) == 3
    assert type(plan.rows[0].length) is int
