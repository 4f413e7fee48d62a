"""pagedlib.engine.scheduler: continuous batching, on-demand admission, preemption of the newest, FCFS,
the token budget (decodes first, then prefill chunks), seats counted from admission.

The scheduler is driven here without a model: a test "samples" a token for every scheduled sequence
whose prompt is fully computed.
"""
import pytest
from hypothesis import given, settings, strategies as st

from pagedlib.memory.block_manager import BlockManager
from pagedlib.engine.scheduler import Scheduler, Sequence, Status


def seqs(*prompt_lens, first_id=0):
    return [Sequence(seq_id=first_id + i, request_id=first_id + i, prompt=list(range(1, n + 1)), params=None)
            for i, n in enumerate(prompt_lens)]


def run_step(sched, token=7):
    """Schedule and pretend the model produced ``token`` for every scheduled sequence that samples
    (a decode, or the chunk that completes a prompt)."""
    step = sched.schedule()
    for seq in step.prefills + step.decodes:
        if not seq.prefilling:
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
    child = Sequence(seq_id=99, request_id=0, prompt=parent.prompt, params=None, output=[8])
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
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=5)
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


def test_a_decode_preempts_the_newest_even_mid_prefill():
    bm = BlockManager(num_blocks=5, block_size=2)
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=3)
    a, b = seqs(2, 5)
    sched.add(a)
    run_step(sched)                       # a: 2 tokens (block 0), sampled one
    sched.add(b)
    step = run_step(sched)                # a decodes into a new block; b admitted (3 blocks), chunk of 2
    assert step.prefills == [b] and step.prefill_chunks == [2] and bm.num_free_blocks == 0
    run_step(sched)                       # a fits its block; b's next chunk
    step = run_step(sched)                # a needs a block: b (newest, still prefilling) is preempted
    assert step.preempted == [b] and b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert list(sched.waiting) == [b] and step.decodes == [a]


def test_seats_are_counted_from_admission_and_forks_take_them():
    sched = Scheduler(BlockManager(num_blocks=32, block_size=4), max_num_seqs=4)
    a, b = seqs(6, 5)
    a.num_samples = b.num_samples = 3
    sched.add(a)
    sched.add(b)
    run_step(sched)                       # a holds 3 seats before it forks: b (3 more) must wait
    assert sched.running == [a] and sched.num_seats == 3 and list(sched.waiting) == [b]
    for k in (1, 2):
        sched.fork(a, Sequence(seq_id=100 + k, request_id=0, prompt=a.prompt, params=None, output=[7]))
    assert len(sched.running) == 3 and sched.num_seats == 3 and a.num_samples == 1
    with pytest.raises(ValueError, match="holds no seat for another sample"):
        sched.fork(a, Sequence(seq_id=103, request_id=0, prompt=a.prompt, params=None))
    run_step(sched)
    assert list(sched.waiting) == [b]     # still only 1 seat free


@pytest.mark.parametrize("value", [0, True, 2.5])
def test_the_budget_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match="max_num_batched_tokens must be a positive integer"):
        Scheduler(BlockManager(4, 4), max_num_seqs=2, max_num_batched_tokens=value)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(num_blocks=st.integers(3, 10), block_size=st.sampled_from([1, 2, 4]), max_num_seqs=st.integers(1, 6),
       requests=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 10)), min_size=1, max_size=8),
       prefix=st.booleans(), budget=st.sampled_from([None, None, 1, 2, 3, 5]))
def test_random_workloads_finish_with_invariants(num_blocks, block_size, max_num_seqs, requests, prefix, budget):
    """Random requests (prompt length, tokens to generate): every step keeps the invariants, and every
    request finishes with exactly its tokens, however often it is preempted or chunked."""
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=prefix)
    sched = Scheduler(bm, max_num_seqs, max_num_batched_tokens=budget)
    todo = []
    for i, (plen, out) in enumerate(requests):
        if -(-(plen + out) // block_size) <= num_blocks:   # the engine refuses requests that can never fit
            seq = seqs(plen, first_id=i)[0]
            seq.want = out
            todo.append(seq)
            sched.add(seq)
    for _ in range(3000):
        if not sched.has_unfinished():
            break
        order = list(sched.running)
        step = sched.schedule()
        # preemption takes the newest: the survivors are the oldest, in their order
        assert [s for s in order if s not in step.preempted] == sched.running[:len(order) - len(step.preempted)]
        assert len(sched.running) <= max_num_seqs
        assert not set(map(id, sched.running)) & set(map(id, sched.waiting))
        assert set(step.seqs) <= set(sched.running) and len(set(step.seqs)) == len(step.seqs)
        assert step.num_tokens <= (budget or float("inf")) and step.num_tokens > 0
        if budget is None:
            assert set(step.seqs) == set(sched.running) and not any(s.prefilling for s in step.seqs)
        for seq in sched.running:         # the block manager holds slots for every token to compute
            held = bm.token_ids(seq.seq_id)
            assert held == seq.tokens or (seq not in step.seqs and held == seq.tokens[:-1])
            assert seq.status is Status.RUNNING and seq.num_computed_tokens <= len(held)
        assert len({b for s in sched.running for b in bm.block_table(s.seq_id)}) == bm.num_used_blocks
        for seq in step.seqs:
            if seq.prefilling:
                continue
            seq.output.append(len(seq) % 5)       # deterministic "sampled" token
            if len(seq.output) == seq.want:
                sched.finish(seq)
    assert not sched.has_unfinished()
    for seq in todo:
        assert seq.status is Status.FINISHED and len(seq.output) == seq.want
        assert seq.output == [(len(seq.prompt) + i) % 5 for i in range(seq.want)]
    assert bm.num_used_blocks == 0
