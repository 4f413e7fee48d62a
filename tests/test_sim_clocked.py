"""pagedlib.sim.clocked: the real engine on a modelled clock gives the engine's own outputs, and
latencies that follow the step-time model."""
import functools

import pytest
import torch
import transformers

from pagedlib import GPT2, LLM, SamplingParams
from pagedlib.sim.clocked import serve
from pagedlib.sim.timing import StepTime

transformers.logging.set_verbosity_error()


@functools.lru_cache(maxsize=None)
def model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=64)
    return GPT2.from_hf(transformers.GPT2LMHeadModel(config).eval(), dtype=torch.float32, backend="torch")


def requests():
    g = torch.Generator().manual_seed(0)
    return [(0.0, torch.randint(0, 50, (8,), generator=g).tolist(), SamplingParams(max_new_tokens=4)),
            (0.0, torch.randint(0, 50, (5,), generator=g).tolist(), SamplingParams(max_new_tokens=6)),
            (10.0, torch.randint(0, 50, (9,), generator=g).tolist(), SamplingParams(max_new_tokens=3))]


def test_outputs_are_the_engines_and_the_clock_follows_the_model():
    clock = StepTime(weights_s=1.0, per_kv_token_s=0.0, per_prefill_token_s=0.0)   # every step: 1 s
    run = serve(LLM(model(), num_usable_blocks=32, block_size=4), requests(), clock)
    want = LLM(model(), num_usable_blocks=32, block_size=4).generate([r[1] for r in requests()],
                                                            [r[2] for r in requests()], use_tqdm=False)
    assert run.outputs == want
    assert list(run.ttft_s) == [1.0, 1.0, 1.0]       # the third arrives at 10 s, after an idle wait
    assert set(run.itl_s) == {1.0} and len(run.itl_s) == 3 + 5 + 2
    assert run.token_times_s[2][0] == 11.0 and run.elapsed_s == 6 + 3
    p = run.percentiles()
    assert p["ttft_p50_s"] == p["ttft_p99_s"] == 1.0 and p["itl_p99_s"] == 1.0
    assert run.tokens_per_s == pytest.approx(13 / 9)


def test_a_request_with_samples_has_one_token_time_per_step_and_all_its_samples_output():
    """n > 1: the request's times count a step in which any sample produced a token (the engine's
    rule), its output is its samples' outputs, and throughput counts every sample's tokens."""
    clock = StepTime(weights_s=1.0, per_kv_token_s=0.0, per_prefill_token_s=0.0)
    prompt = requests()[0][1]
    params = SamplingParams(max_new_tokens=4, n=3, temperature=1.0, seed=5)
    run = serve(LLM(model(), num_usable_blocks=32, block_size=4), [(0.0, prompt, params)], clock)
    want = LLM(model(), num_usable_blocks=32, block_size=4).generate([prompt], [params], use_tqdm=False)[0]
    assert run.outputs == [want] and len(want) == 3
    assert run.token_times_s == [[1.0, 2.0, 3.0, 4.0]]      # not 3 times per step
    assert run.tokens_per_s == pytest.approx(12 / 4)
