"""The kernel-exercise checker: it launches a learner's kernel and says which case failed and how."""
import pagedlib  # noqa: F401, I001  (first: sets TRITON_INTERPRET before triton is imported)
import pytest
import torch
import triton
import triton.language as tl
from pagedlib.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED
from pagedlib.exercises import ch08
from pagedlib.exercises.kernel_checks import UNWRITTEN, compare_outputs, new_output, raises_not_implemented


def test_compare_outputs_names_the_first_wrong_element():
    want = torch.arange(6.0).reshape(2, 3)
    got = want.clone()
    got[1, 2] = 9.0
    msg = compare_outputs(got, want)
    assert "out[1, 2] = 9" in msg and "reference has 5" in msg and "1 of 6" in msg
    assert compare_outputs(want.clone(), want) is None


def test_compare_outputs_tells_a_nan_leak_from_an_unwritten_element():
    want = torch.ones(4)
    leak = want.clone()
    leak[2] = float("nan")
    assert "NaN leaked" in compare_outputs(leak, want) and "out[2]" in compare_outputs(leak, want)
    unwritten = new_output((4,), torch.float32, torch.device("cpu"))
    unwritten[:3] = 1.0
    assert "out[3] was never written" in compare_outputs(unwritten, want)


def test_compare_outputs_catches_a_store_outside_the_output():
    out = new_output((4,), torch.float32, torch.device("cpu"))
    out.copy_(torch.ones(4))
    out._base[-1] = 0.0                                  # one element past the end of `out`
    assert "outside `out`" in compare_outputs(out, torch.ones(4))


def test_messages_never_dump_a_tensor():
    want = torch.zeros(64, 64)
    msg = compare_outputs(torch.ones(64, 64), want)
    assert "tensor(" not in msg and len(msg) < 200


def test_not_attempted_marker_is_found_in_kernels_and_plain_functions():
    @triton.jit
    def starter(out, BLOCK_SIZE: tl.constexpr):
        raise NotImplementedError  # delete this line

    def plain(out):
        return out
    assert raises_not_implemented(starter.fn) and not raises_not_implemented(plain)
    assert ch08.load_page.check(starter).state == NOT_ATTEMPTED


def test_a_kernel_body_without_the_decorator_is_still_checked():
    fn = ch08.load_page_kernel.fn
    plain = fn.__wrapped__ if hasattr(fn, "__wrapped__") else fn
    assert ch08.load_page.check(plain).state == CORRECT


def test_a_kernel_that_raises_reports_the_case_and_the_error_in_one_line():
    @triton.jit
    def bad_shape(out, key_cache, block_table, seq_len, page, kv_head,
                  stride_block, stride_token, stride_head,
                  BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
        offsets = tl.arange(0, BLOCK_SIZE + 1)          # not a power of two
        tl.store(out + offsets, offsets)

    result = ch08.load_page.check(bad_shape)
    assert result.state == INCORRECT and result.message.startswith("case 1 of 5")
    assert "the kernel raised" in result.message and "\n" not in result.message


def test_a_kernel_that_writes_nothing_is_told_so():
    @triton.jit
    def writes_nothing(out, key_cache, block_table, seq_len, page, kv_head,
                       stride_block, stride_token, stride_head,
                       BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
        pass

    result = ch08.load_page.check(writes_nothing)
    assert result.state == INCORRECT and "was never written" in result.message
    assert UNWRITTEN not in (0.0, 1.0)


def test_the_bug_prediction_matches_what_the_buggy_kernel_does():
    case = ch08.fix_bug.kernel_cases[0]
    got = ch08._launch_decode(ch08.buggy_decode, **case.inputs)          # [seqs, heads, dim]
    wrong = [n for n, row in zip(ch08.BUG_LENGTHS, got) if torch.isnan(row).any()]
    assert wrong == ch08.bug_lengths.reference == [9, 17]


def test_a_kernel_exercise_needs_a_kernel_as_its_reference():
    import pytest
    from pagedlib.exercises.kernel_checks import KernelExercise
    with pytest.raises(ValueError, match="@triton.jit"):
        KernelExercise("test.not_a_kernel", "q", lambda: None, launch=lambda k: None, cases=[],
                       wrong=[1])


@pytest.mark.timeout(120)    # a check that never returned would hang the session: fail it instead
def test_a_kernel_that_never_ends_times_out_as_incorrect():
    from pagedlib.exercises.kernel_checks import KernelExercise

    @triton.jit
    def forever(out, key_cache, block_table, seq_len, page, kv_head,
                stride_block, stride_token, stride_head,
                BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
        i = 0
        while i >= 0:
            i += 1

    ex = KernelExercise("test.forever", "q", ch08.load_page_kernel, launch=ch08.load_page.launch,
                        cases=ch08.load_page.kernel_cases[:1], wrong=[forever], timeout=0.5)
    result = ex.check(forever)
    assert result.state == INCORRECT and "more than 0.5 s" in result.message


# ---- diagnoses: each compares against a kernel with exactly that one mistake -----------------------
from pagedlib.exercises.kernel_checks import masked_loads_without_other, variant  # noqa: E402


def _message(exercise, old: str, new: str) -> str:
    result = exercise.check(variant(exercise.kernel, old, new))
    assert result.state == INCORRECT
    return result.message


def test_forgetting_to_rescale_l_or_acc_is_named():
    assert "`l` was not rescaled" in _message(ch08.decode, "l = l * alpha +", "l = l + 0.0 * alpha +")
    assert "`acc` was not rescaled" in _message(ch08.decode, "acc = acc * alpha +", "acc = (acc) +")
    assert "`l` was not moved onto the new max" in _message(
        ch08.online_lse, "l = l * tl.exp(m - m_new) +", "l = l * 1.0 +")


def test_forgetting_plus_m_or_divide_by_l_is_named():
    assert "add m back" in _message(ch08.online_lse, "m + tl.log(l))", "0.0 + tl.log(l))")
    assert "not acc / l" in _message(ch08.decode, "dims, acc / l)", "dims, acc * 1.0)")


def test_a_wrong_kv_head_is_named_and_never_blamed_on_the_mask():
    message = _message(ch08.decode, "kv_head = head // GROUP", "kv_head = head + 0")
    assert "read K/V head h" in message and "mask" not in message.lower()


def test_the_mask_is_blamed_only_when_it_is_wrong():
    message = _message(ch08.decode, "valid = page * BLOCK_SIZE + offsets < seq_len",
                       "valid = 0 * page + offsets < seq_len")
    assert "mask is wrong" in message
    assert "BLOCK_SIZE + offsets < seq_len" not in message        # the fix of ch08.fix_bug stays hidden


def test_the_fix_bug_exercise_never_prints_its_fix():
    message = ch08.fix_bug.check(ch08.buggy_decode).message
    assert "buggy_decode" in message and "page * BLOCK_SIZE" not in message


def test_summing_on_the_wrong_axis_names_the_kernel_line_where_it_raised():
    message = _message(ch08.page_scores, "axis=1) * scale", "axis=0) * scale")
    assert "the kernel raised" in message and "at line" in message
    assert "tl.where(valid, s" in message and "wrong axis" in message


def test_a_masked_load_without_other_fails_as_it_would_on_a_gpu():
    kernel = variant(ch08.load_page_kernel, "mask=valid[:, None], other=0.0)", "mask=valid[:, None])")
    assert masked_loads_without_other(kernel.fn)
    message = ch08.load_page.check(kernel).message
    assert "without `other=`" in message and "keys = tl.load" in message
    v_line = "v = tl.load(value_cache + ptrs, mask=valid[:, None], other=0.0)"
    assert "other=" in _message(ch08.decode, v_line, "v = tl.load(value_cache + ptrs, mask=valid[:, None])")


def test_a_masked_load_whose_masked_lanes_never_reach_the_output_needs_no_other():
    # K's masked rows only make scores that tl.where replaces by -inf: poisoned or not, no effect
    k_line = "k = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)"
    kernel = variant(ch08.decode_kernel, k_line, "k = tl.load(key_cache + ptrs, mask=valid[:, None])")
    assert ch08.decode.check(kernel).state == CORRECT


def test_an_online_softmax_starting_m_at_zero_fails_on_very_negative_scores():
    message = _message(ch08.online_lse, 'm = float("-inf")', "m = 0.0 + 0.0")
    assert "started at 0.0" in message and "-250" in message
    assert "started at 0.0" in _message(ch08.decode, 'm = float("-inf")', "m = 0.0 + 0.0")


def test_a_variant_needs_its_text_exactly_once():
    import pytest
    with pytest.raises(ValueError, match="exactly once"):
        variant(ch08.decode_kernel, "tl.load", "tl.loud")


def test_a_kernel_exercise_message_is_never_cut():
    message = _message(ch08.decode, "kv_head = head // GROUP", "kv_head = head + 0")
    assert not message.endswith("...")


def test_a_kv_head_from_the_remainder_is_named():
    """`kv_head = head % GROUP` is the remainder (a place inside a group), not the group: issue 37
    found it answered with a generic message."""
    message = _message(ch08.decode, "kv_head = head // GROUP", "kv_head = head % GROUP")
    assert "h % GROUP" in message and "not the group" in message and "mask" not in message.lower()


def test_a_two_value_tl_max_is_named():
    """`tl.max(m, x)` raises "axis [2.03] out of bounds": the checker says tl.max reduces one
    tensor and tl.maximum takes two (issue 37)."""
    message = _message(ch08.online_lse, "m_new = tl.maximum(m, tl.max(s, axis=0))",
                       "m_new = tl.max(m, tl.max(s, axis=0))")
    assert "out of bounds" in message and "`tl.maximum(a, b)`" in message


def test_python_math_inside_a_kernel_is_named():
    """`math.exp` inside a kernel raises "cannot convert float infinity to integer": the checker
    points to Triton's own functions (issue 37)."""
    import math
    kernel = variant(ch08.online_lse.kernel, "l = l * tl.exp(m - m_new) +", "l = l * math.exp(m - m_new) +")
    kernel.fn.__globals__["math"] = math
    result = ch08.online_lse.check(kernel)
    assert result.state == INCORRECT and "math.exp" in result.message and "`tl.exp`" in result.message


def test_every_kernel_exercise_checks_a_body_written_without_the_decorator():
    """A kernel submitted without @triton.jit is made into one and checked (issue 37 met "out[0,0]
    was never written" for one): each kernel exercise's reference body, undecorated, is Correct."""
    import inspect
    import linecache
    import textwrap

    from pagedlib.exercises import registry
    from pagedlib.exercises.kernel_checks import KernelExercise
    kernels = {name: ex for name, ex in registry().items()        # the course's, not other tests' own
               if isinstance(ex, KernelExercise) and not name.startswith("test.")}
    assert len(kernels) >= 7
    for name, ex in kernels.items():
        fn = ex.kernel.fn
        plain = f"{fn.__name__}_plain"
        source = textwrap.dedent(inspect.getsource(fn)).replace("@triton.jit\n", "", 1)
        source = source.replace(f"def {fn.__name__}(", f"def {plain}(", 1)
        filename = f"<undecorated {plain}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        namespace = dict(fn.__globals__)
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the course's own kernels
        assert not hasattr(namespace[plain], "fn"), name          # a plain function, no decorator
        result = ex.check(namespace[plain])
        assert result.state == CORRECT, (name, result.message)


def test_kernel_mistake_messages_start_a_sentence():
    """A kernel verdict reads "... are wrong). `l` was not rescaled ...": a mistake's message never
    starts with a lower-case word after the full stop (issue 37)."""
    from pagedlib.exercises import registry
    from pagedlib.exercises.kernel_checks import KernelExercise
    for name, ex in registry().items():
        if isinstance(ex, KernelExercise):
            for _, message in ex.mistakes:
                assert not message[:1].islower(), (name, message)

# ---- loads of rows no sequence owns -----------------------------------------------------------------
@triton.jit
def _load_page_unmasked_then_where(out, key_cache, block_table, seq_len, page, kv_head,
                                   stride_block, stride_token, stride_head,
                                   BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    valid = page * BLOCK_SIZE + offsets < seq_len
    block = tl.load(block_table + page)
    rows = block * stride_block + offsets * stride_token + kv_head * stride_head
    keys = tl.load(key_cache + rows[:, None] + dims[None, :])          # every row, owned or not
    keys = tl.where(valid[:, None], keys, 0.0)                          # ... the NaN thrown away
    tl.store(out + offsets[:, None] * HEAD_DIM + dims[None, :], keys)


@triton.jit
def _load_page_mask_forgets_the_page(out, key_cache, block_table, seq_len, page, kv_head,
                                     stride_block, stride_token, stride_head,
                                     BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    valid = offsets < seq_len                                           # the page's start forgotten
    block = tl.load(block_table + page)
    rows = block * stride_block + offsets * stride_token + kv_head * stride_head
    keys = tl.load(key_cache + rows[:, None] + dims[None, :], mask=valid[:, None], other=0.0)
    tl.store(out + offsets[:, None] * HEAD_DIM + dims[None, :], keys)


def test_an_unmasked_load_hidden_by_a_later_where_fails():
    # the output is right (tl.where drops the NaN), but the rows past seq_len were read
    result = ch08.load_page.check(_load_page_unmasked_then_where)
    assert result.state == INCORRECT
    assert "the output is right" in result.message and "loads without a mask" in result.message
    assert "tl.load(key_cache + rows[:, None] + dims[None, :])" in result.message     # its line


def test_a_mask_that_lets_rows_past_seq_len_through_says_so():
    result = ch08.load_page.check(_load_page_mask_forgets_the_page)
    assert result.state == INCORRECT
    assert "its mask lets rows past the end of the sequence through" in result.message
    assert "Give tl.load a mask" not in result.message


def test_the_buggy_kernel_listing_fits_a_phone():
    """Chapter 8 shows buggy_decode's source for the reader to read: at most 48 characters a line, the
    width a phone shows at full size."""
    import inspect
    long = [line for line in inspect.getsource(ch08.buggy_decode.fn).splitlines() if len(line) > 48]
    assert long == []
