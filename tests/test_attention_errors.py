"""Bad input to the attention functions: a ValueError that names the argument, never a crash or a wrong answer.

Each case breaks one thing in otherwise good inputs and checks the message names what is wrong.
Decode cases run against both the kernel (paged_attention) and the reference, which share the checks.
Every tensor is made on ``pagedlib.runtime.DEVICE`` (except where a case puts one elsewhere on purpose),
so each case fails for its own reason, not the device check, on a CUDA GPU as on the CPU.
"""
import pytest
import torch

import pagedlib
from pagedlib.attention.triton_backend import paged_attention, paged_prefill, write_kv
from pagedlib.attention.reference import paged_attention_ref, paged_prefill_ref
from pagedlib.attention.inputs import random_paged_inputs

DEVICE = pagedlib.runtime.DEVICE


def good():
    """Two sequences (5 and 12 tokens), 4 query heads over 2 KV heads, head_dim 16, pages of 4."""
    x = random_paged_inputs([5, 12], 4, 2, 16, 4, seed=0)
    return dict(query=x.query, key_cache=x.key_cache, value_cache=x.value_cache,
                block_tables=x.block_tables, seq_lens=x.seq_lens)


def i32(*values):
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


def tensor(values):
    return torch.tensor(values, device=DEVICE)


def randn(*shape):
    return torch.randn(*shape, device=DEVICE)


def zeros(*shape):
    return torch.zeros(*shape, device=DEVICE)


DECODE_CASES = {  # name -> (change to the good inputs, words the message must contain)
    "query_2d": (lambda a: a.update(query=a["query"][:, 0]), ["query", "[num_seqs, num_heads, head_dim]"]),
    "cache_3d": (lambda a: a.update(key_cache=a["key_cache"][0]), ["key_cache", "num_blocks"]),
    "value_shape": (lambda a: a.update(value_cache=a["value_cache"][:3]), ["value_cache", "shape"]),
    "heads_not_divisible": (lambda a: a.update(query=randn(2, 3, 16)), ["num_heads", "multiple"]),
    "head_dim_mismatch": (lambda a: a.update(query=randn(2, 4, 32)), ["head_dim", "32", "16"]),
    "seq_lens_length": (lambda a: a.update(seq_lens=i32(5, 12, 3)), ["seq_lens", "[num_seqs]"]),
    "table_rows": (lambda a: a.update(block_tables=a["block_tables"][:1]), ["block_tables", "num_seqs"]),
    "table_int64": (lambda a: a.update(block_tables=a["block_tables"].long()), ["block_tables", "int32", "int64"]),
    "table_float": (lambda a: a.update(block_tables=a["block_tables"].float()), ["block_tables", "int32"]),
    "seq_lens_float": (lambda a: a.update(seq_lens=a["seq_lens"].float()), ["seq_lens", "int32"]),
    "too_long_for_table": (lambda a: a.update(seq_lens=i32(5, 13)), ["seq_lens[1]", "13", "block table"]),
    "empty_sequence": (lambda a: a.update(seq_lens=i32(0, 12)), ["seq_lens", ">= 1"]),
    "block_id_outside_cache": (lambda a: a["block_tables"].__setitem__((1, 2), 999),
                               ["block_tables[1, 2]", "999", "num_blocks"]),
    "negative_block_id": (lambda a: a["block_tables"].__setitem__((0, 1), -1), ["block_tables[0, 1]"]),
    "dtype_mismatch": (lambda a: a.update(query=a["query"].half()), ["query", "dtype", "float32"]),
    "cache_dtypes_differ": (lambda a: a.update(value_cache=a["value_cache"].half()), ["value_cache", "dtype"]),
    "integer_cache": (lambda a: a.update(key_cache=a["key_cache"].int(), value_cache=a["value_cache"].int()),
                      ["key_cache", "float"]),
    "different_devices": (lambda a: a.update(seq_lens=a["seq_lens"].to("meta")), ["device", "seq_lens"]),
    "not_a_tensor": (lambda a: a.update(seq_lens=[5, 12]), ["seq_lens", "torch.Tensor"]),
    "head_dim_too_big": (lambda a: a.update(query=randn(2, 4, 512), key_cache=zeros(9, 4, 2, 512),
                                            value_cache=zeros(9, 4, 2, 512)), ["head_dim", "256"]),
}


def assert_refused(fn, args: dict, case) -> None:
    """Apply a bad-input ``case`` (change, words) to ``args``: ``fn`` must raise a ValueError naming every word."""
    change, words = case
    change(args)
    with pytest.raises(ValueError) as err:
        fn(**args)
    for word in words:
        assert word in str(err.value), f"{word!r} missing from: {err.value}"


@pytest.mark.parametrize("fn", [paged_attention, paged_attention_ref], ids=["kernel", "reference"])
@pytest.mark.parametrize("name", DECODE_CASES)
def test_decode_bad_input_raises_a_value_error_naming_it(fn, name):
    assert_refused(fn, good(), DECODE_CASES[name])


@pytest.mark.parametrize("fn", [paged_attention, paged_attention_ref], ids=["kernel", "reference"])
def test_bfloat16_on_the_cpu_is_refused(fn):
    if pagedlib.runtime.supports_bf16():
        pytest.skip("this device runs bf16 (a GPU of compute capability >= 8.0)")
    args = {k: (v.bfloat16() if v.is_floating_point() else v) for k, v in good().items()}
    with pytest.raises(ValueError, match="bfloat16"):
        fn(**args)


@pytest.mark.parametrize("scale", [float("nan"), "big"])
def test_bad_scale(scale):
    with pytest.raises(ValueError, match="scale"):
        paged_attention(**good(), scale=scale)


@pytest.mark.parametrize("num_splits", [0, -2, 1.5, True])
def test_bad_num_splits(num_splits):
    with pytest.raises(ValueError, match="num_splits"):
        paged_attention(**good(), num_splits=num_splits)


@pytest.mark.parametrize("group,head_dim", [(1, 16), (2, 32)])
@pytest.mark.parametrize("fn", ["decode", "prefill"])
def test_a_launch_config_for_other_shapes_is_refused(fn, group, head_dim):
    """good() has group 2 (4 query heads over 2 KV heads) and head_dim 16: a config made for
    anything else would launch the kernel with the wrong padding or GQA mapping."""
    from pagedlib.attention.kernels.launch import launch_config
    config = launch_config(head_dim, torch.float32, group, None)
    args = good() if fn == "decode" else good_prefill()
    call = paged_attention if fn == "decode" else paged_prefill
    with pytest.raises(ValueError, match="config must be a LaunchConfig for head_dim 16 and group 2"):
        call(**args, config=config)
    with pytest.raises(ValueError, match="config must be a LaunchConfig"):
        call(**args, config=dict(tile=16))


@pytest.mark.parametrize("bad_lens", [
    (5, 0),                                                   # an empty sequence: the kernel reads nothing
    pytest.param((5, 13), marks=pytest.mark.skipif(          # too long: the kernel reads past the table
        torch.cuda.is_available(), reason="on a GPU, reading past the block table may be an illegal "
        "address that breaks the CUDA context for every later test")),
], ids=["empty_sequence", "too_long_for_table"])
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")   # 0/0 of an empty sequence
def test_validate_false_skips_only_the_value_checks(bad_lens):
    args = good()
    args["seq_lens"] = i32(*bad_lens)
    # The too-long sequence makes the kernel read one entry past the table's end: back the table with
    # one more zero (block 0), so that read stays in memory; past a bare tensor the interpreter
    # dereferenced whatever lay there and crashed now and then (a segfault, 2 runs in 21).
    table = args["block_tables"]                              # [num_seqs, max_blocks] int32
    backing = torch.zeros(table.numel() + 1, dtype=table.dtype, device=table.device)
    backing[:-1] = table.flatten()
    args["block_tables"] = backing[:-1].view(table.shape)
    with pytest.raises(ValueError, match="seq_lens"):
        paged_attention(**args)                               # a value check refuses it ...
    paged_attention(**args, validate=False)                   # ... validate=False skips it (the caller vouches) ...
    args["block_tables"] = args["block_tables"].long()        # ... but shapes and dtypes always are
    with pytest.raises(ValueError, match="int32"):
        paged_attention(**args, validate=False)


# ---- prefill -------------------------------------------------------------------------------------
def good_prefill():
    args = good()
    args["query"] = randn(7, 4, 16)                           # 3 new tokens of seq 0, 4 of seq 1
    args["query_start_loc"] = i32(0, 3, 7)
    return args


PREFILL_CASES = {
    "starts_length": (lambda a: a.update(query_start_loc=i32(0, 7)), ["query_start_loc", "num_seqs + 1"]),
    "starts_int64": (lambda a: a.update(query_start_loc=a["query_start_loc"].long()),
                     ["query_start_loc", "int32"]),
    "starts_not_at_zero": (lambda a: a.update(query_start_loc=i32(1, 3, 7)), ["query_start_loc", "start at 0"]),
    "starts_not_num_tokens": (lambda a: a.update(query_start_loc=i32(0, 3, 6)), ["num_tokens = 7"]),
    "starts_decrease": (lambda a: a.update(query_start_loc=i32(0, 8, 7)), ["never decrease"]),
    "chunk_longer_than_sequence": (lambda a: a.update(query_start_loc=i32(0, 6, 7)), ["sequence 0", "6 query tokens"]),
    "query_2d": (lambda a: a.update(query=a["query"][:, 0]), ["query", "[num_tokens, num_heads, head_dim]"]),
    "seq_lens_length": (lambda a: a.update(seq_lens=i32(5)), ["seq_lens"]),
    "table_int64": (lambda a: a.update(block_tables=a["block_tables"].long()), ["block_tables", "int32"]),
    "too_long_for_table": (lambda a: a.update(seq_lens=i32(5, 17)), ["seq_lens[1]", "block table"]),
    "dtype_mismatch": (lambda a: a.update(query=a["query"].half()), ["query", "dtype"]),
}


@pytest.mark.parametrize("fn", [paged_prefill, paged_prefill_ref], ids=["kernel", "reference"])
@pytest.mark.parametrize("name", PREFILL_CASES)
def test_prefill_bad_input_raises_a_value_error_naming_it(fn, name):
    assert_refused(fn, good_prefill(), PREFILL_CASES[name])


# ---- write_kv ------------------------------------------------------------------------------------
def good_write():
    key_cache = zeros(3, 4, 2, 16)                            # 12 slots
    return dict(key=randn(3, 2, 16), value=randn(3, 2, 16), key_cache=key_cache,
                value_cache=torch.zeros_like(key_cache), slot_mapping=tensor([0, 5, -1]))


WRITE_CASES = {
    "key_2d": (lambda a: a.update(key=a["key"][:, 0]), ["key", "[num_tokens, num_kv_heads, head_dim]"]),
    "wrong_kv_heads": (lambda a: a.update(key=randn(3, 4, 16), value=randn(3, 4, 16)), ["key", "2, 16"]),
    "value_tokens": (lambda a: a.update(value=a["value"][:2]), ["value", "shape of key"]),
    "dtype_mismatch": (lambda a: a.update(key=a["key"].half()), ["key", "dtype"]),
    "slots_length": (lambda a: a.update(slot_mapping=tensor([0, 5])), ["slot_mapping", "[num_tokens]"]),
    "slots_float": (lambda a: a.update(slot_mapping=tensor([0.0, 5.0, 1.0])), ["slot_mapping", "int64"]),
    "slot_past_cache": (lambda a: a.update(slot_mapping=tensor([0, 12, -1])), ["slot_mapping[1]", "12"]),
    "slot_below_minus_one": (lambda a: a.update(slot_mapping=tensor([0, -2, 1])), ["slot_mapping[1]"]),
    "duplicate_slot": (lambda a: a.update(slot_mapping=tensor([4, 4, -1])), ["slot 4", "more than once"]),
    "different_devices": (lambda a: a.update(slot_mapping=a["slot_mapping"].to("meta")), ["device"]),
}


@pytest.mark.parametrize("name", WRITE_CASES)
def test_write_kv_bad_input_raises_and_leaves_the_cache_untouched(name):
    args = good_write()
    assert_refused(write_kv, args, WRITE_CASES[name])
    assert args["key_cache"].eq(0).all() and args["value_cache"].eq(0).all()


def test_write_kv_into_a_transposed_cache_is_refused():
    args = good_write()
    args["key_cache"] = zeros(3, 4, 16, 2).transpose(2, 3)         # head_dim not contiguous
    with pytest.raises(ValueError, match="key_cache must be contiguous in its last dimension"):
        write_kv(**args)


def test_good_inputs_pass():
    """The fixtures above are good: every failure in this file comes from the one change made."""
    paged_attention(**good())
    paged_prefill(**good_prefill())
    write_kv(**good_write())
