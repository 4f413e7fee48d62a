"""pagedlib.engine.llm as vLLM's users drive it: abort a request, stream new tokens step by step, stop
on tokens; the request-state object. Text, stop strings and chat with a real tokenizer are in
``test_smollm2.py``.

The model and the reference (``transformers``' greedy ``generate`` on each request alone) are
``test_engine_schedule``'s.
"""
import collections

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pagedlib import LLM, SamplingParams
from test_engine_schedule import (BASE, VOCAB, assert_ref_counts_match_the_tables, checked_every_step,
                                  greedy_reference, paged_model, reference, tokens)


# ---- abort ---------------------------------------------------------------------------------------
def test_abort_gives_the_blocks_back_at_once_and_keeps_the_partial_output():
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4)
    a, b = tokens(10, seed=1), tokens(7, seed=2)
    ra = llm.add_request(a, SamplingParams(max_new_tokens=8))
    rb = llm.add_request(b, SamplingParams(max_new_tokens=8))
    for _ in range(3):
        llm.step()
    bm = llm.block_manager
    used, held = bm.num_used_blocks, len(bm.block_table(llm._requests[ra].samples[0].seq_id))
    assert held == 3                                                 # 10 + 2 computed tokens
    llm.abort_request(ra)
    assert bm.num_used_blocks == used - held                         # back at once
    with pytest.raises(ValueError, match="has not finished yet"):
        llm.pop_result(rb)
    assert llm.pop_result(ra) == reference(tuple(a), 8)[:3]         # what it had generated
    while llm.scheduler.has_unfinished():
        llm.step()
    assert llm.pop_result(rb) == reference(tuple(b), 8)
    assert llm.block_manager.num_used_blocks == 0
    with pytest.raises(KeyError, match="no such request"):
        llm.abort_request(ra)


def test_abort_of_a_waiting_request_and_of_a_finished_one():
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=1)
    r0 = llm.add_request(tokens(5, seed=3), SamplingParams(max_new_tokens=1))
    r1 = llm.add_request(tokens(5, seed=4), SamplingParams(max_new_tokens=4, n=1))
    assert llm.step() == [r0]
    llm.abort_request(r0)                                            # finished: nothing changes
    assert llm.pop_result(r0) == reference(tuple(tokens(5, seed=3)), 1)
    r2 = llm.add_request(tokens(6, seed=5), SamplingParams(max_new_tokens=3))
    llm.abort_request(r2)                                            # still waiting: leaves the line
    assert llm.pop_result(r2) == [] and [s.request_id for s in llm.scheduler.waiting] == [r1]
    while llm.scheduler.has_unfinished():
        llm.step()
    assert llm.pop_result(r1) == reference(tuple(tokens(5, seed=4)), 4)


abort_strategy = st.tuples(st.integers(1, 24), st.integers(1, 8), st.sampled_from([1, 1, 2]),
                           st.integers(0, 4), st.one_of(st.none(), st.integers(0, 10)))
# (prompt length, max_new_tokens, n, arrival step, abort at step or never)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(abort_strategy, min_size=1, max_size=6), budget=st.sampled_from([2, 5, None]),
       num_blocks=st.integers(8, 24), block_size=st.sampled_from([1, 2, 4]), prefix=st.booleans(),
       scheduling=st.sampled_from(["vllm", "decode_first"]))
def test_aborts_at_random_steps_leak_nothing_and_change_no_other_output(requests, budget, num_blocks, block_size,
                                                                       prefix, scheduling):
    """Requests (sharing prefixes) arrive and some are aborted at random steps, under preemption and
    prefix caching: every step keeps each ref count equal to the live tables holding the block; an
    aborted request holds no block from the moment it is aborted; every other output is
    transformers' (as without the aborted ones); an aborted output is a prefix of its reference; at
    the end no block is used."""
    llm = LLM(paged_model(), num_blocks, block_size, 4, enable_prefix_caching=prefix,
              max_num_batched_tokens=budget, scheduling=scheduling)
    bm, check = llm.block_manager, checked_every_step(budget, 4)
    arrivals = []
    for length, max_new, n, arrive, abort_at in requests:
        prompt, params = BASE[:length], SamplingParams(max_new_tokens=max_new, n=n)
        try:
            llm.check_request(0, prompt, params)
        except ValueError:
            continue
        arrivals.append((arrive, prompt, params, None if abort_at is None else arrive + abort_at))
    if not arrivals:
        return
    ids, aborted = {}, set()
    for step in range(2000):
        for i, (arrive, prompt, params, abort_at) in enumerate(arrivals):
            if arrive == step:
                ids[i] = llm.add_request(prompt, params)
            if abort_at == step and i in ids:
                llm.abort_request(ids[i])
                aborted.add(i)
                live = collections.Counter(b for s in bm.seq_ids for b in bm.block_table(s))
                assert all(seq.seq_id not in bm for seq in llm._requests[ids[i]].samples)
                assert bm.num_used_blocks == len(live)
        if step > max(a for a, *_ in arrivals) and not llm.scheduler.has_unfinished():
            break
        llm.step()
        check(llm)
        assert_ref_counts_match_the_tables(bm)
    for i, (_, prompt, params, _) in enumerate(arrivals):
        out = llm.pop_result(ids[i])
        ref = greedy_reference(tuple(prompt))[:params.max_new_tokens]
        samples = out if params.n > 1 else [out]
        if i in aborted:
            assert all(s == ref[:len(s)] for s in samples)
        else:
            assert samples == [ref] * params.n
    assert bm.num_used_blocks == 0 and not llm.scheduler.has_unfinished()
    assert_ref_counts_match_the_tables(bm)


# ---- streaming -----------------------------------------------------------------------------------
def test_stream_reports_each_requests_new_tokens_every_step():
    prompts = [tokens(9, seed=6), tokens(4, seed=7)]
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4, max_num_batched_tokens=6)
    got, steps, finished = {0: [], 1: []}, [], []
    for out in llm.stream(prompts, max_new_tokens=5):
        assert len(out.outputs) == 1 and len(out.outputs[0].token_ids) == 1   # one new token a step
        got[out.prompt_index] += out.outputs[0].token_ids
        steps.append(llm.metrics["steps"])
        if out.finished:
            finished.append(out.prompt_index)
            assert out.outputs[0].finish_reason == "length"
    assert got == {0: reference(tuple(prompts[0]), 5), 1: reference(tuple(prompts[1]), 5)}
    assert sorted(finished) == [0, 1] and not llm._requests                   # popped as they finished
    assert steps[0] == 2 and steps == sorted(steps)       # budget 6: the 9-token prompt takes two steps


def test_a_stream_closed_early_aborts_its_requests():
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4)
    stream = llm.stream([tokens(9, seed=6), tokens(4, seed=7)], max_new_tokens=8)
    next(stream)
    stream.close()
    assert llm.block_manager.num_used_blocks == 0 and not llm.scheduler.has_unfinished() and not llm._requests


def test_stream_with_n_samples_reports_each_sample():
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4)
    got = collections.defaultdict(list)
    for out in llm.stream([tokens(6, seed=8)], max_new_tokens=3, n=2, temperature=1.0, seed=1):
        for c in out.outputs:
            got[c.index] += c.token_ids
    llm2 = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4)
    assert [got[0], got[1]] == llm2.generate([tokens(6, seed=8)], max_new_tokens=3, n=2, temperature=1.0,
                                             seed=1, use_tqdm=False)[0]


# ---- stop tokens ---------------------------------------------------------------------------------
def test_stop_token_ids_end_a_reply_and_stay_in_it():
    prompt = tokens(8, seed=9)
    ref = reference(tuple(prompt), 10)
    stop = ref[3]
    cut = ref.index(stop) + 1
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4)
    assert llm.generate([prompt], max_new_tokens=10, stop_token_ids=[stop], use_tqdm=False) == [ref[:cut]]
    out = list(llm.stream([prompt], max_new_tokens=10, stop_token_ids=[stop]))
    assert out[-1].finished and out[-1].outputs[0].finish_reason == "stop"


def test_stop_strings_and_text_prompts_need_a_tokenizer():
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        llm.generate([[1, 2, 3]], stop=["\n"], use_tqdm=False)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        llm.generate(["hello"], use_tqdm=False)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate([[1, 2, 3]], stop_token_ids=[VOCAB], use_tqdm=False)
    with pytest.raises(ValueError, match="stop must be a list of non-empty strings"):
        SamplingParams(stop=[""])
    assert SamplingParams(stop="x").stop == ("x",) and SamplingParams(stop_token_ids=[3]).stop_token_ids == (3,)


def test_a_request_is_one_object_until_popped():
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=4)
    r = llm.add_request(tokens(5, seed=1), SamplingParams(max_new_tokens=2, n=2, temperature=1.0, seed=3))
    while llm.scheduler.has_unfinished():
        llm.step()
    request = llm._requests[r]
    assert len(request.samples) == 2 and set(request.generators) == {s.seq_id for s in request.samples}
    assert request.finished and set(request.finish_reasons.values()) == {"length"}
    llm.pop_result(r)
    assert not llm._requests
