"""pagedlib.sim.counting_engine: the paged simulation is the engine's scheduler and block manager.

Its admissions and preemptions are the scheduler's, step by step (checked against a scheduler driven
by hand, as tests/test_scheduler.py drives it), and its meter reads the pool from the block manager
(checked against an account taken from the block tables and the free count at every measured step).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pagedlib.engine.scheduler import Scheduler, SeqState
from pagedlib.memory.block_manager import BlockManager
from pagedlib.sim import Workload, simulate
from pagedlib.sim.counting_engine import CountingEngine
from pagedlib.sim.timing import OPT13B_A100, StepTime

# (prompt, output) tokens; 12 blocks of 4 for six requests of up to 22 tokens: several preemptions
WORKLOAD = [(10, 6), (3, 12), (6, 9), (5, 4), (12, 5), (2, 7)]
NUM_BLOCKS, BLOCK_SIZE = 12, 4


def engine(workload, num_blocks=NUM_BLOCKS, arrivals=None, scheduling="vllm", step_time=OPT13B_A100):
    prompts, outputs = zip(*workload)
    arrivals = np.zeros(len(workload)) if arrivals is None else np.asarray(arrivals, dtype=float)
    return CountingEngine(prompts, outputs, arrivals, kv_slots=num_blocks * BLOCK_SIZE,
                          block_size=BLOCK_SIZE, max_len=2048, step_time=step_time, scheduling=scheduling)


def scheduler_log(workload, num_blocks, scheduling="vllm") -> list[tuple[list, list]]:
    """(admitted, preempted) ids of every step of a scheduler driven by hand, every request queued
    at once: each scheduled sequence whose tokens are all computed samples a token."""
    sched = Scheduler(BlockManager(num_blocks, BLOCK_SIZE), max_num_seqs=100, scheduling=scheduling)
    want = {}
    for rid, (prompt, output) in enumerate(workload):
        sched.add(SeqState(seq_id=rid, request_id=rid, prompt=[0] * prompt))
        want[rid] = output
    log = []
    while sched.has_unfinished():
        step = sched.schedule()
        log.append(([s.seq_id for s in step.admitted], [s.seq_id for s in step.preempted]))
        for seq in step.seqs:
            if seq.all_computed:
                seq.output.append(0)
                if len(seq.output) == want[seq.seq_id]:
                    sched.finish(seq)
    return log


def sim_log(workload, num_blocks, scheduling="vllm") -> list[tuple[list, list]]:
    run, log = engine(workload, num_blocks, scheduling=scheduling), []
    while run.pending or run.scheduler.has_unfinished():
        step = run.step()
        log.append(([s.seq_id for s in step.admitted], [s.seq_id for s in step.preempted]))
    return log


@pytest.mark.parametrize("scheduling", ["vllm", "prefill_first"])
def test_the_simulation_admits_and_preempts_as_the_scheduler_does(scheduling):
    log = scheduler_log(WORKLOAD, NUM_BLOCKS, scheduling)
    assert sum(len(p) for _, p in log) >= 2                        # the workload does preempt
    assert sim_log(WORKLOAD, NUM_BLOCKS, scheduling) == log
    result = engine(WORKLOAD, scheduling=scheduling).run().result()
    assert result.preemptions == sum(len(p) for _, p in log) and result.total_steps == len(log)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(workload=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=6),
       num_blocks=st.integers(3, 8), scheduling=st.sampled_from(["vllm", "prefill_first", "decode_first"]))
def test_on_random_workloads_too(workload, num_blocks, scheduling):
    if any(-(-(p + o) // BLOCK_SIZE) > num_blocks for p, o in workload):
        with pytest.raises(ValueError, match="raise kv_slots"):   # refused as the engine refuses it
            engine(workload, num_blocks)
        return
    assert sim_log(workload, num_blocks, scheduling) == scheduler_log(workload, num_blocks, scheduling)


def account(run: CountingEngine) -> tuple[int, int, int, int, int]:
    """What the meter must record now, taken from the block tables, the free count and the
    sequences: (K/V tokens, slots their owners will fill, reserved, held, batch)."""
    bm, running = run.block_manager, run.scheduler.running
    tables = {s.seq_id: bm.block_table(s.seq_id) for s in running}
    held = (bm.num_blocks - bm.num_free_blocks) * BLOCK_SIZE
    assert held == sum(map(len, tables.values())) * BLOCK_SIZE        # no block held twice
    tokens = sum(s.num_computed_tokens for s in running)
    assert tokens == sum(bm.num_tokens(s.seq_id) for s in running)   # slots for exactly those
    useful = sum(min(len(tables[s.seq_id]) * BLOCK_SIZE, len(s.prompt) + s.max_new_tokens - 1)
                 for s in running)
    return tokens, useful, held, held, len(running)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(workload=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=8),
       num_blocks=st.integers(6, 12), rate=st.sampled_from([None, 0.5, 5.0]),
       scheduling=st.sampled_from(["vllm", "prefill_first"]))
def test_the_meter_records_what_the_block_manager_holds(workload, num_blocks, rate, scheduling):
    arrivals = Workload(*zip(*workload)).arrival_times(rate, seed=1)
    run = engine(workload, num_blocks, arrivals, scheduling, step_time=StepTime(1.0, 0.0, 0.0))
    recorded, expected = [], []
    meter_record = run.meter.record

    def spy(*args):
        recorded.append(args)
        expected.append(account(run))
        meter_record(*args)
    run.meter.record = spy
    run.run()
    assert recorded == expected and len(recorded) == run.meter.steps


def test_prefill_first_iterations_pause_the_running_requests():
    """vLLM v0's scheduler: a step that admits someone runs only the new prompt."""
    def history(scheduling):
        run = engine([(8, 6), (8, 6)], num_blocks=64, arrivals=[0.0, 2.5], scheduling=scheduling,
                     step_time=StepTime(1.0, 0.0, 0.0))                   # one second a step
        out = []
        while run.pending or run.scheduler.has_unfinished():
            run.step()
            out.append([len(s.output) for s in run.seqs])
        return out, run.result()

    (mixed, mixed_result), (v0, v0_result) = history("vllm"), history("prefill_first")
    # request 1 arrives during step 2; at step 3 it is admitted
    assert mixed[3] == [4, 1]                  # mixed: request 0 decodes in the same step
    assert v0[3] == [3, 1]                     # prefill-first: request 0 waits that step
    assert v0_result.finish_steps[0] == mixed_result.finish_steps[0] + 1   # one step later
    assert v0[-1] == [6, 6]


def test_no_cap_binds_unless_asked():
    w = Workload([5] * 6, [3] * 6)
    free = simulate(w, "paged", kv_slots=4096)
    assert free.avg_batch == 6 and free.finish_steps.tolist() == [2] * 6
    capped = simulate(w, "paged", kv_slots=4096, max_num_seqs=2)
    assert capped.avg_batch == 2 and capped.finish_steps.tolist() == [2, 2, 5, 5, 8, 8]


def test_a_cap_above_the_reply_ends_it_at_eos_and_guaranteed_holds_blocks_for_the_cap():
    """max_new_tokens (the client's cap) over output_lens (where EOS falls): every request still
    generates its reply's length; on_demand runs as without a cap, guaranteed admits fewer at once."""
    prompts, outputs = [8] * 6, [4] * 6
    kw = dict(kv_slots=48, block_size=4, max_len=2048, step_time=OPT13B_A100)
    exact = CountingEngine(prompts, outputs, np.zeros(6), **kw).run()
    for admission in ("on_demand", "guaranteed", "estimated"):
        capped = CountingEngine(prompts, outputs, np.zeros(6), admission=admission, max_new_tokens=32,
                                **kw).run()
        assert [len(s.output) for s in capped.seqs] == outputs
        assert all(len(t) == 4 for t in capped.token_s)
        if admission == "on_demand":
            assert capped.steps == exact.steps and capped.token_s == exact.token_s
    guaranteed = CountingEngine(prompts, outputs, np.zeros(6), admission="guaranteed", max_new_tokens=32,
                                **kw).run()
    assert guaranteed.steps > exact.steps         # 10 blocks promised each: one request at a time
    assert guaranteed.result().output_lens.tolist() == outputs


def test_metrics_give_the_engines_latency_records_on_the_modelled_clock():
    clock = StepTime(weights_s=1.0, per_kv_token_s=0.0, per_prefill_token_s=0.0)
    e = CountingEngine([4, 4], [3, 2], np.array([0.0, 0.5]), kv_slots=64, block_size=4, max_len=64,
                       step_time=clock).run()
    m = e.metrics()
    assert [r.ttft_s for r in m.requests] == [1.0, 1.5]    # the second joins at 1 s, samples at 2 s
    assert [r.itl_s for r in m.requests] == [[1.0, 1.0], [1.0]]
    assert m.elapsed_s == 3.0 and m.tokens_generated == 5
    assert m.met_slo(ttft_slo_s=1.0, tpot_slo_s=1.0) == 1 and m.goodput(1.0, 1.0) == pytest.approx(1 / 3)
