"""pagedlib.sim.disaggregated: a prefill engine, a link and a decode engine on the modelled clock."""
import numpy as np
import pytest

from pagedlib import LLM, SamplingParams
from pagedlib.sim.clocked import serve
from pagedlib.sim.disaggregated import prefill_done_s, serve_disaggregated
from pagedlib.sim.timing import OPT13B_A100, StepTime

from tests import test_engine as gpt2


def test_the_prefill_engine_takes_one_whole_prompt_at_a_time_in_arrival_order():
    step = StepTime(weights_s=1.0, per_kv_token_s=0.0, per_prefill_token_s=0.01)
    assert prefill_done_s([0.0, 5.0, 0.0], [100, 10, 100], step) == pytest.approx([2.0, 6.1, 4.0])


def _requests(n=10, seed=0):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.5, n))
    prompts = gpt2.random_prompts(n, 300, lo=60, hi=100, seed=seed)   # context 128
    return [(float(a), p, SamplingParams(max_new_tokens=int(k)))
            for a, p, k in zip(arrivals, prompts, rng.integers(8, 20, n))]


def test_disaggregation_keeps_the_tokens_and_cuts_the_tail_of_itl():
    reqs = _requests()
    step = StepTime(weights_s=0.02, per_kv_token_s=1e-6, per_prefill_token_s=5e-4)  # a prompt stalls
    model = gpt2.paged("h4v300")
    one = serve(LLM(model, 256, 4), reqs, step)
    kv_bytes, link = 800 * 1024, 25.0
    two = serve_disaggregated(LLM(model, 256, 4), reqs, kv_bytes_per_token=kv_bytes, link_gbs=link,
                              step_time=step)
    assert two.outputs == one.outputs
    assert two.arrival_s == [r[0] for r in reqs]
    assert np.percentile(two.itl_s, 99) < 0.5 * np.percentile(one.itl_s, 99)
    # nobody's first token comes before its prompt is prefilled and its K/V has crossed the link
    done = prefill_done_s(two.arrival_s, [len(r[1]) for r in reqs], step)
    transfer = [len(r[1]) * kv_bytes / (link * 1e9 * 0.5) for r in reqs]
    assert all(t[0] >= d + x for t, d, x in zip(two.token_times_s, done, transfer))


def test_bad_efficiency_is_refused():
    with pytest.raises(ValueError, match="efficiency"):
        serve_disaggregated(LLM(gpt2.paged("h4v300"), 16, 4), [], kv_bytes_per_token=1, link_gbs=1,
                            step_time=OPT13B_A100, efficiency=0)
