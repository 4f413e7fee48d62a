"""Chapter 10's exercise references are what pagedlib's scheduler and batch builder really do."""
import pytest

from pagedlib import BlockManager, SamplingParams, Scheduler
from pagedlib.exercises import ch10
from pagedlib.engine.scheduler import SeqState

from engine_scenarios import chapter10_mixed_step


def _drive(scheduler: Scheduler, stop_at_preemption: bool = False):
    """Run the scheduler with every sequence 'sampling' token 0; return (steps, first preemption)."""
    step = 0
    while scheduler.has_unfinished():
        step += 1
        scheduled = scheduler.schedule()
        if scheduled.preempted and stop_at_preemption:
            return step, (scheduled.preempted[0].seq_id, step)
        for seq in scheduled.seqs:
            if not seq.prefilling:
                seq.output.append(0)
                if len(seq.output) == seq.params.max_new_tokens:
                    scheduler.finish(seq)
    return step, None


def test_preempted_reference_is_the_schedulers_first_preemption():
    scenario = ch10.PREEMPT_SCENARIO
    scheduler = Scheduler(BlockManager(scenario["num_blocks"], scenario["block_size"]), max_num_seqs=8)
    for i, (name, (prompt, output)) in enumerate(scenario["requests"].items()):
        scheduler.add(SeqState(seq_id=name, request_id=i, prompt=[0] * prompt,
                               params=SamplingParams(max_new_tokens=output)))
    _, first = _drive(scheduler, stop_at_preemption=True)
    assert first == ch10.preempted.reference


@pytest.mark.parametrize("case", ch10.num_steps.cases, ids=str)
def test_num_steps_reference_counts_the_schedulers_steps(case):
    num_requests, output_len, max_num_seqs = case
    scheduler = Scheduler(BlockManager(4096, 16), max_num_seqs=max_num_seqs)
    for i in range(num_requests):
        scheduler.add(SeqState(seq_id=i, request_id=i, prompt=[0] * (3 + i % 7),
                               params=SamplingParams(max_new_tokens=output_len)))
    steps, _ = _drive(scheduler)
    assert steps == ch10.num_steps.reference(*case)


def test_mixed_slots_reference_is_build_batchs_slot_mapping():
    step = ch10.MIXED_STEP
    batch, manager = chapter10_mixed_step()
    assert manager.block_size == step["block_size"]
    assert {"A": manager.block_table("A"), "B": manager.block_table("B")} == step["tables"]
    assert batch.slot_mapping.tolist() == ch10.mixed_slots.reference
    assert batch.positions.tolist() == step["positions"]["A"] + step["positions"]["B"]


def test_graph_padding_reference_is_vllms_rule_and_names_its_mistakes():
    from pagedlib.sim.cuda_graphs import padded_size, vllm_capture_sizes

    ex = ch10.graph_padding
    assert ex.reference == padded_size(250, vllm_capture_sizes(256)) - 250 == 6
    assert ex.check(6).correct
    for wrong, words in ((2, "padded UP"), (0, "steps of 8"), (256, "size the step runs at"),
                         (22, "coarser sizes")):
        result = ex.check(wrong)
        assert not result.correct and words in result.message


def test_graph_padding_runs_without_numpy_or_torch_for_the_site():
    """The site's checker imports the chapter module without numpy and torch; its reference agrees with
    pagedlib.sim.cuda_graphs at every step size the rule written out in it covers."""
    import subprocess
    import sys
    from pagedlib.sim.cuda_graphs import padded_size, vllm_capture_sizes

    sizes = vllm_capture_sizes(256)
    assert all(ch10._graph_padding(n) == padded_size(n, sizes) - n for n in range(8, 257))
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'numpy', 'triton'):\n"
            "            raise ModuleNotFoundError(name, name=name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "from pagedlib.exercises import ch10\n"
            "print(ch10.graph_padding.reference)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "6", run.stderr[-500:]
