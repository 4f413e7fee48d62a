"""pagedlib.sim mirrors pagedlib.engine.scheduler: on one small workload, the simulator's step loop in the
engine's order (``grow_first=True``, no watermark) admits and preempts exactly the requests the real
scheduler does, step by step; in its default order (the paper's) it differs, as its docstring says.

The scheduler runs in its default order (``scheduling="vllm"``) with no token budget: every admitted
prompt is computed whole in its first step, so every running request decodes and vLLM v1's walk over
``running`` is the decode-first order too (both are checked)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from pagedlib.memory.block_manager import BlockManager
from pagedlib.engine.scheduler import Scheduler, SeqState
from pagedlib.sim.loop import StepLoop
from pagedlib.sim.paged import PagedPool
from pagedlib.sim.request import SimRequest
from pagedlib.sim.timing import OPT13B_A100

# (prompt, output) tokens; 12 blocks of 4 for six requests of up to 22 tokens: several preemptions
WORKLOAD = [(10, 6), (3, 12), (6, 9), (5, 4), (12, 5), (2, 7)]
NUM_BLOCKS, BLOCK_SIZE = 12, 4


def scheduler_log(workload=WORKLOAD, num_blocks=NUM_BLOCKS, scheduling="vllm") -> list[tuple[list, list]]:
    """(admitted, preempted) request ids of every step of the real scheduler (no model: every
    scheduled sequence "samples" a token)."""
    sched = Scheduler(BlockManager(num_blocks, BLOCK_SIZE), max_num_seqs=100, scheduling=scheduling)
    want = {}
    for rid, (prompt, output) in enumerate(workload):
        sched.add(SeqState(seq_id=rid, request_id=rid, prompt=[0] * prompt, params=None))
        want[rid] = output
    log = []
    while sched.has_unfinished():
        step = sched.schedule()
        admitted = [s.seq_id for s in step.prefills]
        log.append((admitted, [s.seq_id for s in step.preempted]))
        for seq in step.seqs:
            seq.output.append(0)
            if len(seq.output) == want[seq.seq_id]:
                sched.finish(seq)
    return log


class LoggedLoop(StepLoop):
    """The simulator's loop, recording who it admits and preempts in each step."""

    def step(self):
        self.log = getattr(self, "log", [])
        self._admitted, self._preempted = [], []
        super().step()
        self.log.append((self._admitted, self._preempted))

    def admit(self, generate=False):
        before = len(self.running)
        prefill = super().admit(generate)
        self._admitted += [r.rid for r in self.running[before:]]
        return prefill

    def preempt(self, r):
        self._preempted.append(r.rid)
        super().preempt(r)



def sim_log(grow_first: bool, workload=WORKLOAD, num_blocks=NUM_BLOCKS) -> list[tuple[list, list]]:
    # the simulator stores the token generated in a step at once: its prompt p holds the engine's p + 1
    requests = [SimRequest(rid, prompt - 1, output) for rid, (prompt, output) in enumerate(workload)]
    pool = PagedPool(num_blocks * BLOCK_SIZE, BLOCK_SIZE, watermark=0)
    loop = LoggedLoop(requests, np.zeros(len(requests)), pool, OPT13B_A100, grow_first=grow_first)
    loop.run()
    return loop.log


def test_the_simulator_in_the_engines_order_admits_and_preempts_like_the_scheduler():
    engine = scheduler_log()
    assert sum(len(p) for _, p in engine) >= 2                     # the workload does preempt
    assert sim_log(grow_first=True) == engine == scheduler_log(scheduling="decode_first")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(workload=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=5),
       num_blocks=st.integers(3, 8))
def test_on_random_workloads_too(workload, num_blocks):
    if any(-(-(p + o) // BLOCK_SIZE) > num_blocks for p, o in workload):
        return                                                     # the engine refuses these
    assert sim_log(True, workload, num_blocks) == scheduler_log(workload, num_blocks)


def test_the_simulators_default_order_differs_as_documented():
    """In its default (the paper's) order the simulator admits before growing: here request 3 is
    admitted and preempted in the same step, which the engine's order never does."""
    workload, num_blocks = [(7, 1), (8, 6), (4, 6), (2, 4)], 4
    engine, paper_order = scheduler_log(workload, num_blocks), sim_log(False, workload, num_blocks)
    assert engine[1] == ([2], []) and paper_order[1] == ([2, 3], [3])
    assert sim_log(True, workload, num_blocks) == engine
