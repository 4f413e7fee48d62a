"""pagedlib.bench.step_profile: the phases of an engine step, ideal overlap, CUDA-graph padding."""
import pytest
import torch
import transformers

from pagedlib import GPT2, LLM, SamplingParams
from pagedlib.bench.step_profile import StepProfile, StepTimes, profile
from pagedlib.sim.cuda_graphs import padded_size, padding, vllm_capture_sizes


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=256,
                                     initializer_range=0.2, attn_implementation="eager")
    return GPT2.from_hf(transformers.GPT2LMHeadModel(config).eval(), dtype=torch.float32)


def _prompts(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (int(k),), generator=g).tolist() for k in torch.randint(3, 40, (n,), generator=g)]


def test_a_profiled_run_gives_generates_tokens_and_times_every_step(tiny):
    prompts, params = _prompts(), SamplingParams(max_new_tokens=7)
    want = LLM(tiny, num_usable_blocks=64, block_size=8, max_num_seqs=4).generate(prompts, params, use_tqdm=False)
    llm = LLM(tiny, num_usable_blocks=64, block_size=8, max_num_seqs=4)
    prof = profile(llm, prompts, params)
    assert prof.outputs == want
    assert len(prof.steps) == llm.metrics["steps"]
    assert sum(s.tokens for s in prof.steps) == sum(map(len, prompts)) + sum(len(o) - 1 for o in want)
    assert all(min(s.schedule, s.build, s.forward, s.finish) >= 0 for s in prof.steps)
    assert all(s.forward > 0 for s in prof.steps)
    sec = prof.seconds()
    assert sec["total"] == pytest.approx(sum(s.total for s in prof.steps))
    assert 0 < prof.outside_share < 1
    assert max(sec["forward"], sec["total"] - sec["forward"]) <= prof.overlapped_seconds <= sec["total"]
    # the engine is left as it was: the class's schedule, no hooks; it serves on
    assert "schedule" not in vars(llm.scheduler)
    assert not llm.model._forward_hooks and not llm.model._forward_pre_hooks
    assert llm.generate(prompts[:2], params, use_tqdm=False) == want[:2]


def test_profile_refuses_a_busy_engine_and_a_wrong_number_of_params(tiny):
    llm = LLM(tiny, num_usable_blocks=16, block_size=8)
    with pytest.raises(ValueError, match="one per prompt"):
        profile(llm, _prompts(3), [SamplingParams()] * 2)
    llm.add_request(_prompts(1)[0])
    with pytest.raises(ValueError, match="idle"):
        profile(llm, _prompts(1), SamplingParams())


def test_overlap_costs_each_step_the_longer_of_its_forward_pass_and_its_cpu_work():
    prof = StepProfile([StepTimes(0.1, 0.1, 1.0, 0.3, 4), StepTimes(0.5, 0.5, 0.5, 0.5, 1)], [])
    assert prof.seconds()["total"] == pytest.approx(1.5 + 2.0)
    assert prof.outside_share == pytest.approx((0.5 + 1.5) / 3.5)
    assert prof.overlapped_seconds == pytest.approx(1.0 + 1.5)     # max(1.0, 0.5) + max(0.5, 1.5)
    assert prof.overlap_saving == pytest.approx(1 - 2.5 / 3.5)


def test_vllms_default_capture_sizes():
    sizes = vllm_capture_sizes(256)
    assert sizes[:6] == [1, 2, 4, 8, 16, 24] and len(sizes) == 51
    assert 248 in sizes and 256 in sizes and 264 not in sizes and 272 in sizes and sizes[-1] == 512
    assert vllm_capture_sizes(1024)[-1] == 512          # capped at 512
    assert vllm_capture_sizes(8) == [1, 2, 4, 8, 16]    # up to 2 x max_num_seqs


def test_a_step_pads_up_to_the_smallest_captured_size_that_holds_it():
    sizes = vllm_capture_sizes(256)
    assert [padded_size(n, sizes) for n in (1, 3, 5, 8, 9, 250, 257, 512, 513)] == \
        [1, 4, 8, 8, 16, 256, 272, 512, None]
    assert padding([250, 5, 600, 8], sizes) == (863, 9)   # 600 runs without a graph
    with pytest.raises(ValueError, match="rows"):
        padded_size(0, sizes)


def test_the_figure_stacks_the_phases_and_marks_ideal_overlap():
    import matplotlib.pyplot as plt
    from figures import check_open_figures
    from pagedlib.plots import step_phases

    runs = {"GPT-2": StepProfile([StepTimes(0.1, 0.1, 1.0, 0.3, 4)], []),
            "SmolLM2": StepProfile([StepTimes(0.3, 0.2, 0.4, 0.1, 4)], [])}
    fig = step_phases(runs)
    ax = fig.axes[0]
    widths = [round(p.get_width(), 6) for p in ax.patches]
    assert widths == [round(w, 6) for w in (100 / 15, 100 / 15, 1000 / 15, 300 / 15, 30, 20, 40, 10)]
    ticks = [line.get_xdata()[0] for line in ax.lines]
    assert ticks == pytest.approx([100 * 1.0 / 1.5, 100 * 0.6 / 1.0])
    check_open_figures()
    plt.close("all")
