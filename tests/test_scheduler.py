"""pagedlib.engine.scheduler: continuous batching, on-demand admission, preemption of the newest, FCFS,
the token budget (decodes first, then prefill chunks), seats counted from admission.

The scheduler is driven here without a model: a test "samples" a token for every scheduled sequence
whose prompt is fully computed.
"""
import pytest
from hypothesis import given, settings, strategies as st

from pagedlib.memory.block_manager import BlockManager
from pagedlib.engine.scheduler import Scheduler, SeqState, Status


def seqs(*prompt_lens, first_id=0):
    return [SeqState(seq_id=first_id + i, request_id=first_id + i, prompt=list(range(1, n + 1)), params=None)
            for i, n in enumerate(prompt_lens)]


def run_step(sched, token=7):
    """Schedule and pretend the model produced ``token`` for every scheduled sequence that samples
    (a decode, or the chunk that completes a prompt)."""
    step = sched.schedule()
    for seq in step.seqs:
        if seq.all_computed:
            seq.output.append(token)
    return step


def test_admits_on_demand_not_by_maximum_length():
    bm = BlockManager(num_blocks=10, block_size=4)
    sched = Scheduler(bm, max_num_seqs=100)
    for s in seqs(5, 5, 5, 5, 5, 5):     # 2 blocks each now; a 2048-token reservation would fit none
        sched.add(s)
    step = run_step(sched)
    assert [s.seq_id for s in step.prefills] == [0, 1, 2, 3, 4]
    assert len(sched.waiting) == 1 and bm.num_free_blocks == 0


def test_max_num_seqs_caps_the_batch():
    sched = Scheduler(BlockManager(num_blocks=100, block_size=4), max_num_seqs=3)
    for s in seqs(1, 1, 1, 1, 1):
        sched.add(s)
    assert len(run_step(sched).prefills) == 3
    assert len(sched.running) == 3 and len(sched.waiting) == 2


def test_grows_a_block_at_a_time():
    bm = BlockManager(num_blocks=10, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4)
    (seq,) = seqs(3)
    sched.add(seq)
    run_step(sched)                       # prompt of 3 + 1 sampled: still one block
    assert len(bm.block_table(0)) == 1
    run_step(sched)                       # feeds token 4: fills the block
    assert len(bm.block_table(0)) == 1
    step = run_step(sched)                # feeds token 5: a second block
    assert step.decodes == [seq] and len(bm.block_table(0)) == 2


def test_preempts_the_newest_and_puts_it_first_in_line():
    bm = BlockManager(num_blocks=4, block_size=2)
    sched = Scheduler(bm, max_num_seqs=8)
    a, b, c = seqs(2, 2, 3)
    for s in (a, b):
        sched.add(s)
    run_step(sched)                       # a, b: one full block each, 2 blocks free
    sched.add(c)                          # c waits: its 3 tokens need 2 blocks
    step = run_step(sched)                # a and b take a block each; none left for c
    assert step.decodes == [a, b] and step.prefills == [] and bm.num_free_blocks == 0
    step = run_step(sched)                # no growth needed (each block has a free slot)
    assert step.preempted == []
    step = run_step(sched)                # a needs a block: the newest (b) is preempted
    assert step.preempted == [b] and step.decodes == [a]
    assert b.status is Status.WAITING and list(sched.waiting) == [b, c]   # b before c, who came earlier
    assert b.seq_id not in bm and sched.num_preemptions == 1
    assert step.prefills == []            # nobody is admitted in a step that preempted
    assert b.output == [7, 7, 7]          # what it generated is kept and will be recomputed


def test_preempts_itself_when_it_is_the_newest():
    bm = BlockManager(num_blocks=2, block_size=2)
    sched = Scheduler(bm, max_num_seqs=8)
    a, b = seqs(2, 2)
    sched.add(a)
    sched.add(b)
    run_step(sched)
    step = run_step(sched)                # a needs a block: preempt b; then b would need one too
    assert step.preempted == [b] and step.decodes == [a]
    assert sched.running == [a]


def test_first_come_first_served():
    sched = Scheduler(BlockManager(num_blocks=4, block_size=4), max_num_seqs=8)
    big, small = seqs(12, 1)
    run = seqs(8, first_id=10)[0]
    sched.add(run)
    run_step(sched)                       # 2 blocks taken; 2 free
    sched.add(big)                        # needs 3 blocks: must wait
    sched.add(small)                      # would fit, but must not overtake big
    step = run_step(sched)
    assert step.prefills == [] and list(sched.waiting) == [big, small]


def test_finish_frees_and_fork_shares():
    bm = BlockManager(num_blocks=8, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4)
    (parent,) = seqs(6)
    parent.num_samples = 2
    sched.add(parent)
    run_step(sched)
    child = SeqState(seq_id=99, request_id=0, prompt=parent.prompt, params=None, output=[8])
    sched.fork(parent, child)
    assert bm.block_table(99) == bm.block_table(0) and all(bm.ref_count(b) == 2 for b in bm.block_table(0))
    step = sched.schedule()               # both write token 6 into the shared, partly full block
    assert len(step.copies) == 1
    sched.finish(parent)
    assert parent.status is Status.FINISHED and sched.running == [child] and 0 not in bm


def test_a_request_needing_more_seats_waits_for_them():
    sched = Scheduler(BlockManager(num_blocks=8, block_size=4), max_num_seqs=2)
    a, b = seqs(1, 1)
    b.num_samples = 2
    sched.add(a)
    sched.add(b)
    assert run_step(sched).prefills == [a]   # b needs 2 seats, only 1 is left


def test_max_num_seqs_must_be_positive():
    with pytest.raises(ValueError, match="max_num_seqs"):
        Scheduler(BlockManager(4, 4), max_num_seqs=0)


def test_the_budget_takes_decodes_first_then_running_chunks_then_waiting():
    bm = BlockManager(num_blocks=32, block_size=4)
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=5, scheduling="decode_first")
    a, b, c = seqs(3, 9, 4)
    sched.add(a)
    step = run_step(sched)                # a's whole prompt (3) fits; 2 tokens left, nobody waits
    assert step.prefill_chunks == [3] and a.num_computed_tokens == 3 and a.output == [7]
    sched.add(b)
    sched.add(c)
    step = run_step(sched)                # a decodes (1), b gets a chunk of 4, c must wait
    assert step.decodes == [a] and step.prefills == [b] and step.prefill_chunks == [4]
    assert b.prefilling and b.output == [] and list(sched.waiting) == [c]
    step = run_step(sched)                # a (1), then b's next 4 before c, who is still waiting
    assert step.decodes == [a] and step.prefills == [b] and step.prefill_chunks == [4]
    step = run_step(sched)                # a (1), b's last token (1): b samples; c's first 3
    assert step.decodes == [a] and step.prefills == [b, c] and step.prefill_chunks == [1, 3]
    assert b.output == [7] and not b.prefilling and c.prefilling
    assert step.num_tokens == 5 and all(run_step(sched).num_tokens <= 5 for _ in range(3))


def test_a_budget_smaller_than_the_decodes_serves_the_oldest_first():
    sched = Scheduler(BlockManager(num_blocks=32, block_size=4), max_num_seqs=8, max_num_batched_tokens=2)
    a, b, c = seqs(1, 1, 1)
    for s in (a, b, c):
        sched.add(s)
    assert run_step(sched).prefills == [a, b]
    step = run_step(sched)                # a and b decode; c waits for the budget
    assert step.decodes == [a, b] and step.prefills == [] and list(sched.waiting) == [c]


def test_a_prefill_takes_blocks_chunk_by_chunk_and_can_be_the_one_preempted():
    """Failed on the old code (it took blocks for the whole prompt at admission, so a prefill was never
    the sequence that ran out)."""
    bm = BlockManager(num_blocks=5, block_size=2)
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=3, scheduling="decode_first")
    a, b = seqs(2, 5)
    sched.add(a)
    run_step(sched)                       # a: 2 tokens (one block), sampled one
    sched.add(b)
    step = run_step(sched)                # a decodes into a new block; b admitted with blocks for 2 tokens
    assert step.prefills == [b] and step.prefill_chunks == [2] and bm.num_free_blocks == 2
    step = run_step(sched)                # a fits its block; b's next chunk takes one more block
    assert step.prefill_chunks == [2] and bm.num_free_blocks == 1
    step = run_step(sched)                # a takes the last block; b's last token finds none: b goes
    assert step.preempted == [b] and b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert list(sched.waiting) == [b] and step.decodes == [a] and b not in step.seqs


def test_a_long_prompt_starts_in_the_blocks_that_are_free():
    """Issue 24's reproduction: 20 blocks of 16, a running request holding 10, a 200-token prompt, a
    budget of 64. vLLM v1 takes 4 blocks and prefills 63 tokens; the old code scheduled none of them.
    (First-chunk admission, as vLLM before #37307: the whole prompt's 13 blocks fit in the 10 free.)"""
    bm = BlockManager(num_blocks=20, block_size=16)
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=64, scheduler_reserve_full_isl=False)
    a, b = seqs(150, 200)
    sched.add(a)
    for _ in range(3):
        run_step(sched)                   # a's 150 tokens in chunks of 64, then it decodes
    assert len(bm.block_table(a.seq_id)) == 10
    sched.add(b)
    step = run_step(sched)
    assert step.seqs == [a, b] and step.num_new_tokens == [1, 63]
    assert len(bm.block_table(b.seq_id)) == 4 and bm.num_free_blocks == 6


@pytest.mark.parametrize("scheduling, order", [("vllm", "ab"), ("decode_first", "ba")])
def test_vllm_walks_running_in_order_decode_first_puts_decodes_first(scheduling, order):
    """Failed on the old code (it always put decodes first, and called that vLLM v1's order)."""
    sched = Scheduler(BlockManager(32, 4), max_num_seqs=8, max_num_batched_tokens=4, scheduling=scheduling,
                      long_prefill_token_threshold=2)
    a, b = seqs(10, 2)
    sched.add(a)
    sched.add(b)
    step = run_step(sched)                # a: a chunk of 2 (the threshold), b: its whole prompt, samples
    assert step.seqs == [a, b] and step.num_new_tokens == [2, 2] and b.output == [7]
    step = run_step(sched)                # a still prefills (older), b decodes
    assert step.seqs == {"ab": [a, b], "ba": [b, a]}[order] and step.decodes == [b]
    assert step.num_new_tokens == {"ab": [2, 1], "ba": [1, 2]}[order]


def test_unknown_orders_and_policies_are_refused():
    for kwargs, match in [(dict(scheduling="fifo"), "scheduling must be one of"),
                          (dict(admission="greedy"), "admission must be one of"),
                          (dict(long_prefill_token_threshold=-1), "long_prefill_token_threshold")]:
        with pytest.raises(ValueError, match=match):
            Scheduler(BlockManager(4, 4), max_num_seqs=2, **kwargs)


def test_seats_are_counted_from_admission_and_forks_take_them():
    sched = Scheduler(BlockManager(num_blocks=32, block_size=4), max_num_seqs=4)
    a, b = seqs(6, 5)
    a.num_samples = b.num_samples = 3
    sched.add(a)
    sched.add(b)
    run_step(sched)                       # a holds 3 seats before it forks: b (3 more) must wait
    assert sched.running == [a] and sched.num_seats == 3 and list(sched.waiting) == [b]
    for k in (1, 2):
        sched.fork(a, SeqState(seq_id=100 + k, request_id=0, prompt=a.prompt, params=None, output=[7]))
    assert len(sched.running) == 3 and sched.num_seats == 3 and a.num_samples == 1
    with pytest.raises(ValueError, match="holds no seat for another sample"):
        sched.fork(a, SeqState(seq_id=103, request_id=0, prompt=a.prompt, params=None))
    run_step(sched)
    assert list(sched.waiting) == [b]     # still only 1 seat free


@pytest.mark.parametrize("value", [0, True, 2.5])
def test_the_budget_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match="max_num_batched_tokens must be a positive integer"):
        Scheduler(BlockManager(4, 4), max_num_seqs=2, max_num_batched_tokens=value)


class Params:
    """The one SamplingParams field the scheduler reads."""

    def __init__(self, max_new_tokens):
        self.max_new_tokens = max_new_tokens


@settings(max_examples=150, deadline=None, derandomize=True)
@given(num_blocks=st.integers(3, 10), block_size=st.sampled_from([1, 2, 4]), max_num_seqs=st.integers(1, 6),
       requests=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 10), st.integers(0, 6)), min_size=1, max_size=8),
       prefix=st.booleans(), budget=st.sampled_from([None, None, 1, 2, 3, 5]),
       scheduling=st.sampled_from(["vllm", "decode_first", "prefill_first"]),
       admission=st.sampled_from(["on_demand", "guaranteed", "estimated"]),
       threshold=st.sampled_from([0, 0, 2]))
def test_random_workloads_finish_with_invariants(num_blocks, block_size, max_num_seqs, requests, prefix, budget,
                                                 scheduling, admission, threshold):
    """Random requests (prompt length, tokens to generate, the step they arrive in), in the three orders and
    under the three admission policies: every step keeps the invariants, and every request finishes
    with exactly its tokens, however often it is preempted or chunked."""
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=prefix)
    sched = Scheduler(bm, max_num_seqs, max_num_batched_tokens=budget, scheduling=scheduling,
                      admission=admission, long_prefill_token_threshold=threshold)
    todo, arrivals = [], {}
    for i, (plen, out, arrive) in enumerate(requests):
        if -(-(plen + out) // block_size) <= num_blocks:   # the engine refuses requests that can never fit
            seq = seqs(plen, first_id=i)[0]
            seq.params = Params(out)
            todo.append(seq)
            arrivals.setdefault(arrive, []).append(seq)
    for t in range(3000):
        for seq in arrivals.pop(t, []):  # requests arrive between steps
            sched.add(seq)
        if not sched.has_unfinished():
            if not arrivals:
                break
            continue
        order = list(sched.running)
        step = sched.schedule()
        # vLLM's preemption takes the newest: the survivors are the oldest, in their order (SGLang's
        # order picks by outputs and prompt length: the survivors keep their order)
        survivors = [s for s in order if s not in step.preempted]
        kept = sched.running[:len(order) - len(step.preempted)]
        assert survivors == kept if admission != "estimated" else set(survivors) >= set(kept)
        assert len(sched.running) <= max_num_seqs and sched.num_seats <= max_num_seqs
        assert not set(map(id, sched.running)) & set(map(id, sched.waiting))
        assert set(step.seqs) <= set(sched.running) and len(set(step.seqs)) == len(step.seqs)
        assert step.num_tokens <= (budget or float("inf")) and step.num_tokens > 0
        if threshold:
            assert all(n <= threshold for n in step.num_new_tokens)
        if scheduling == "prefill_first":  # a step of prompts or a step of decodes, never both
            assert not (step.prefills and step.decodes)
        elif budget is None and not threshold:
            assert set(step.seqs) == set(sched.running) and all(s.all_computed for s in step.seqs)
        if admission == "guaranteed":    # promised blocks fit the cache, so nobody is ever preempted
            assert sched.reserved_blocks <= num_blocks and not step.preempted
            assert bm.num_used_blocks <= sched.reserved_blocks
        for seq in sched.running:         # blocks follow the computed tokens: slots for exactly those
            assert seq.status is Status.RUNNING and bm.num_tokens(seq.seq_id) == seq.num_computed_tokens
            assert len(bm.block_table(seq.seq_id)) == -(-seq.num_computed_tokens // block_size)
        held = [b for s in sched.running for b in bm.block_table(s.seq_id)]
        assert len(set(held)) == bm.num_used_blocks == num_blocks - bm.num_free_blocks   # no double free
        for seq in step.seqs:
            if not seq.all_computed:
                continue
            seq.output.append(len(seq) % 5)       # deterministic "sampled" token
            if len(seq.output) == seq.params.max_new_tokens:
                sched.finish(seq)
    assert not sched.has_unfinished()
    for seq in todo:
        want = seq.params.max_new_tokens
        assert seq.status is Status.FINISHED and len(seq.output) == want
        assert seq.output == [(len(seq.prompt) + i) % 5 for i in range(want)]
    assert bm.num_used_blocks == 0


def test_prefill_first_runs_new_prompts_alone_and_decodes_only_when_no_prompt_runs():
    """vLLM v0's order: a request that arrives while another decodes gets a step of its own (the
    running one waits); a step in which no prompt can run decodes everyone."""
    bm = BlockManager(num_blocks=4, block_size=4)
    sched = Scheduler(bm, max_num_seqs=8, scheduling="prefill_first")
    a, b, c = seqs(3, 4, 9)
    sched.add(a)
    assert run_step(sched).prefills == [a]
    assert run_step(sched).decodes == [a]                     # nothing waits: a decode step
    sched.add(b)
    step = run_step(sched)
    assert step.seqs == [b] and step.admitted == [b]          # b's prompt alone; a waits a step
    assert len(a.output) == 2 and len(b.output) == 1
    sched.add(c)                                              # 9 tokens: 3 blocks, 2 are free
    step = run_step(sched)
    assert step.decodes == [a, b] and not step.prefills       # c cannot run: the others decode
    assert list(sched.waiting) == [c]
    vllm = Scheduler(BlockManager(num_blocks=3, block_size=4), max_num_seqs=8)
    x, y = seqs(3, 4)
    vllm.add(x)
    run_step(vllm)
    vllm.add(y)
    assert run_step(vllm).seqs == [x, y]                      # vLLM v1's order mixes them


def test_decode_first_never_preempts_a_decode_it_has_already_scheduled():
    """A prefill that runs out of blocks after the decodes were scheduled must not pick one of them
    (newer than it) as the victim: that sequence would be in the batch with its blocks freed."""
    sched = Scheduler(BlockManager(3, 4), 4, max_num_batched_tokens=5, scheduling="decode_first",
                      long_prefill_token_threshold=2)
    arrivals = {2: [(0, 1, 5), (2, 3, 5), (3, 4, 5), (4, 8, 2)], 4: [(1, 5, 3)]}   # step: (id, prompt, output)
    todo = []
    for t in range(300):
        for i, p, o in arrivals.pop(t, []):
            seq = SeqState(seq_id=i, request_id=i, prompt=list(range(p)), params=Params(o))
            sched.add(seq)
            todo.append(seq)
        if not sched.has_unfinished() and not arrivals:
            break
        if not sched.has_unfinished():
            continue
        step = sched.schedule()
        assert set(step.seqs) <= set(sched.running) and not set(step.seqs) & set(step.preempted)
        for seq in step.seqs:
            if seq.all_computed:
                seq.output.append(0)
                if len(seq.output) == seq.params.max_new_tokens:
                    sched.finish(seq)
    assert all(s.status is Status.FINISHED for s in todo)


# ---- admission as vLLM's today: scheduler_reserve_full_isl (vllm-project/vllm#37307) ----------------
def long_prompt_scene(reserve_full_isl: bool):
    """A decoding request holds 2 of 6 blocks; a 20-token prompt (5 blocks) arrives with a budget of 4
    tokens a step: its first chunk fits in the free blocks, its whole prompt does not."""
    bm = BlockManager(num_blocks=6, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=4, scheduler_reserve_full_isl=reserve_full_isl)
    (a,) = seqs(5)
    a.params = type("P", (), {"max_new_tokens": 100})()
    sched.add(a)
    run_step(sched)
    run_step(sched)
    (b,) = seqs(20, first_id=1)
    sched.add(b)
    return sched, bm, a, b


def test_full_isl_admits_only_when_the_whole_prompt_fits():
    sched, bm, a, b = long_prompt_scene(True)
    step = run_step(sched)
    assert step.admitted == [] and list(sched.waiting) == [b]      # 5 blocks needed, 4 free
    assert sched.num_preemptions == 0


def test_first_chunk_admission_lets_a_long_prompt_in_and_it_is_preempted_mid_prefill():
    sched, bm, a, b = long_prompt_scene(False)
    step = run_step(sched)
    assert step.admitted == [b]                                     # its first chunk fits
    for _ in range(4):
        run_step(sched)
    assert b.num_preemptions >= 1 and a.status is Status.RUNNING    # it filled the cache mid-prefill


def test_full_isl_counts_cache_hits():
    bm = BlockManager(num_blocks=6, block_size=4, enable_prefix_caching=True)
    sched = Scheduler(bm, max_num_seqs=4)
    (a,) = seqs(13)
    sched.add(a)
    run_step(sched)                                                 # 13 tokens: 4 blocks, 3 cached
    (b,) = seqs(17, first_id=1)                                     # the same first 12 tokens
    b.prompt[12:] = [50, 51, 52, 53, 54]
    sched.add(b)
    assert bm.num_free_blocks == 2                                  # 5 blocks, 3 of them hits held by a
    step = run_step(sched)
    assert b in step.admitted and b.num_cached_tokens == 12


@pytest.mark.parametrize("reserve_full_isl", [True, False])
def test_full_isl_counts_a_preempted_sequences_output(reserve_full_isl):
    """A preempted sequence's whole known sequence is its prompt and its output so far."""
    bm = BlockManager(num_blocks=4, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=4, scheduler_reserve_full_isl=reserve_full_isl)
    (c,) = seqs(7)
    c.output = [1, 2, 3, 4, 5, 6]                                   # 13 tokens known: 4 blocks
    c.num_preemptions = 1
    bm.allocate("other", [9])                                       # 3 blocks free
    sched.add(c)
    step = run_step(sched)
    assert (step.admitted == [c]) is (not reserve_full_isl)


def test_reserve_full_isl_must_be_a_bool():
    with pytest.raises(ValueError, match="scheduler_reserve_full_isl must be True or False"):
        Scheduler(BlockManager(4, 2), 4, scheduler_reserve_full_isl="yes")


# ---- admission="estimated" as SGLang runs it (issue 40, finding 3) -------------------------------
def estimated_scene(admission):
    """P (prompt 1), Q (prompt 3), R (prompt 1) admitted together on 8 one-token blocks; each decodes
    one token a step (this scheduler-only test never retires them). After two steps the cache is full
    and P, the oldest, asks first: every one of them is a candidate victim."""
    from pagedlib.engine.scheduler import RETRACT_DECODE_STEPS  # noqa: F401  (the rule's constant)
    bm = BlockManager(num_blocks=8, block_size=1)
    sched = Scheduler(bm, max_num_seqs=4, admission=admission)
    p, q, r = seqs(1, 3, 1)
    for s in (p, q, r):
        s.params = Params(1)
        sched.add(s)
    assert run_step(sched).admitted == [p, q, r]
    run_step(sched)
    assert bm.num_free_blocks == 0
    return sched, p, q, r


def test_estimated_retracts_in_sglangs_order_until_the_survivors_have_room():
    sched, p, q, r = estimated_scene("estimated")
    step = run_step(sched)
    # fewest outputs first (all have 2), then the longest prompt: Q. Its 4 blocks hold the next
    # token of P and R, so nobody else goes (SGLang before #9989 would have wanted 20 tokens each)
    assert step.preempted == [q] and sched.running == [p, r]
    assert sched.new_token_ratio == 1.0             # (4 decoded + 20 steps each) / (2 + 1), at most 1


def test_estimated_retracts_until_the_next_token_of_the_others_fits():
    """Four sequences fill one 4-token block each and all need a second: the first victim frees one
    block, three still need three, so a second goes; two blocks for the last two: it stops there."""
    bm = BlockManager(num_blocks=4, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4, admission="estimated")
    a, b, c, d = seqs(3, 3, 3, 3)
    for s in (a, b, c, d):
        s.params = Params(1)                        # charged 4 tokens each: all four admitted
        sched.add(s)
    assert run_step(sched).admitted == [a, b, c, d]
    run_step(sched)
    for s in (a, b, c, d):
        s.params = Params(100)                      # (a scheduler-only test: only the ratio reads it now)
    step = run_step(sched)
    assert step.preempted == [d, c] and sched.running == [a, b]      # equal keys: the newest first
    # the ratio's jump: (2 + 2 tokens generated + 20 steps each) / (100 + 100 max_new_tokens + 1)
    assert sched.new_token_ratio == pytest.approx(44 / 201, rel=1e-9)


def test_on_demand_preempts_the_newest_only():
    sched, p, q, r = estimated_scene("on_demand")
    step = run_step(sched)
    assert step.preempted == [r] and sched.running == [p, q]


def test_estimated_ratio_decays_every_step_without_a_retraction_to_its_floor():
    from pagedlib.engine.scheduler import INIT_NEW_TOKEN_RATIO, MIN_NEW_TOKEN_RATIO, NEW_TOKEN_RATIO_DECAY
    sched = Scheduler(BlockManager(num_blocks=100, block_size=4), max_num_seqs=2, admission="estimated")
    (a,) = seqs(3)
    a.params = Params(50)
    sched.add(a)
    for k in range(1, 6):
        run_step(sched)
        assert sched.new_token_ratio == pytest.approx(INIT_NEW_TOKEN_RATIO - k * NEW_TOKEN_RATIO_DECAY)
    sched.new_token_ratio = MIN_NEW_TOKEN_RATIO + NEW_TOKEN_RATIO_DECAY / 2
    run_step(sched)
    assert sched.new_token_ratio == MIN_NEW_TOKEN_RATIO


def test_estimated_admission_waits_for_the_decay():
    """A newcomer refused while the running sequence is charged 0.7 of its remaining tokens is admitted
    once the ratio has decayed enough; without the decay it would wait for good."""
    sched = Scheduler(BlockManager(num_blocks=1100, block_size=1), max_num_seqs=2, admission="estimated")
    (a, b) = seqs(10, 10)
    a.params, b.params = Params(1000), Params(400)
    sched.add(a)
    assert run_step(sched).admitted == [a]         # charged 10 + 1000 tokens
    sched.add(b)            # 11 + 0.7 * 999 + 410 > 1100 blocks; 50 steps later 61 + 0.65 * 949 + 410 fits
    waited = 0
    while b.status is Status.WAITING and waited < 400:
        run_step(sched)
        waited += 1
    assert b.status is Status.RUNNING and 10 < waited < 100


def test_estimated_charges_the_prompt_minus_its_cached_prefix_and_clips_max_new_tokens():
    bm = BlockManager(num_blocks=300, block_size=16, enable_prefix_caching=True)
    sched = Scheduler(bm, max_num_seqs=4, admission="estimated")
    (big,) = seqs(10)
    big.params = Params(100_000)                    # charged min(100000, 4096) + 10 tokens: 257 blocks
    assert sched.can_admit(big)
    (a,) = seqs(33 * 16 + 1)
    a.params = Params(1)
    sched.add(a)
    run_step(sched)                                 # 33 full blocks cached, 34 held
    (b,) = seqs(33 * 16 + 1, first_id=1)
    b.params = Params(4096)
    # cached prefix not charged: 1 + 4096 tokens = 257 blocks; the whole prompt would be 290
    assert sched.estimated_blocks + 257 <= 300 < sched.estimated_blocks + 290
    assert sched.can_admit(b)


def test_a_sequence_reads_like_the_list_of_its_tokens():
    """seq[i] and seq[a:b] (the batch builder's and the block manager's way in) equal the prompt and
    output read as one list, on both sides of the prompt's end; an index past the end is an IndexError."""
    seq = SeqState(seq_id=0, request_id=0, prompt=[10, 11, 12, 13], output=[20, 21, 22])
    whole = seq.tokens
    for i in range(-len(whole), len(whole)):
        assert seq[i] == whole[i]
    for a in range(-8, 9):
        for b in range(-8, 9):
            assert seq[a:b] == whole[a:b], (a, b)
    assert seq[::2] == whole[::2]
    for bad in (7, -8):
        with pytest.raises(IndexError):
            seq[bad]
