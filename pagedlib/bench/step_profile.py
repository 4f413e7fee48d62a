"""What an engine step spends around the model's forward pass, and what production engines do about it
(chapter 10b).

:func:`profile` serves a workload with a :class:`pagedlib.LLM` and times every step in four phases:

- ``schedule``: the scheduler picks the step's tokens, admits, preempts, takes blocks;
- ``build``: copy-on-write copies and ``build_batch`` (the step's six tensors, moved to the device);
- ``forward``: the model's forward pass (on a GPU, waited for, so it is the device's time);
- ``finish``: sampling, forks, stop checks, retiring finished requests, the step's metrics.

Everything but ``forward`` is CPU work that a GPU waits through when steps run one after the other.
vLLM's asynchronous scheduling (its default) and SGLang's overlap scheduler prepare step n + 1 on the
CPU while the GPU runs step n; :attr:`StepProfile.overlapped_seconds` is the time the same steps would
take if each step's CPU work hid entirely behind its forward pass (the ideal that overlap approaches).

CUDA graphs remove most of the forward pass's own CPU cost (launching each kernel) by replaying a
recorded pass, but a graph has fixed shapes: a step is padded up to the smallest captured batch size
that holds it. :func:`~pagedlib.sim.cuda_graphs.vllm_capture_sizes` is vLLM's default list of sizes
and :func:`~pagedlib.sim.cuda_graphs.padding` counts the rows a mix of batch sizes pads::

    prof = profile(llm, prompts, SamplingParams(max_new_tokens=32))
    prof.outside_share, prof.overlap_saving
    padding([37, 250, 3], vllm_capture_sizes(256))    # (useful rows, padded rows)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from ..sim.cuda_graphs import padded_size, padding, vllm_capture_sizes  # noqa: F401 (the docstring's)

PHASES = ("schedule", "build", "forward", "finish")


@dataclass(frozen=True)
class StepTimes:
    """One step's seconds per phase, and the tokens its forward pass computed."""

    schedule: float
    build: float
    forward: float
    finish: float
    tokens: int

    @property
    def total(self) -> float:
        return self.schedule + self.build + self.forward + self.finish

    @property
    def outside(self) -> float:
        """Seconds outside the forward pass: the CPU's share of the step."""
        return self.total - self.forward


@dataclass
class StepProfile:
    """The steps of one profiled run (:func:`profile`) and what they add up to."""

    steps: list[StepTimes]
    outputs: list[list[int]]

    def seconds(self) -> dict[str, float]:
        """Seconds per phase over all steps, and their ``"total"``."""
        out = {phase: sum(getattr(s, phase) for s in self.steps) for phase in PHASES}
        out["total"] = sum(out.values())
        return out

    @property
    def outside_share(self) -> float:
        """The share of the run's time spent outside the model's forward pass."""
        sec = self.seconds()
        return 1 - sec["forward"] / sec["total"]

    @property
    def overlapped_seconds(self) -> float:
        """The run's time if each step's CPU work ran during a forward pass (ideal overlap): each step
        costs the longer of its forward pass and its CPU work."""
        return sum(max(s.forward, s.outside) for s in self.steps)

    @property
    def overlap_saving(self) -> float:
        """The share of the run's time that ideal overlap would save."""
        return 1 - self.overlapped_seconds / self.seconds()["total"]


def _sync(device) -> None:
    if device.type == "cuda":
        import torch
        torch.cuda.synchronize(device)


def profile(llm, prompts: Sequence[Sequence[int]], sampling_params=None) -> StepProfile:
    """Serve ``prompts`` with ``llm`` (a :class:`pagedlib.LLM` with nothing queued) one step at a time,
    timing each step's phases; ``sampling_params`` is one :class:`~pagedlib.SamplingParams` or one per
    prompt. The outputs are the same token ids ``llm.generate`` returns."""
    if llm.scheduler.has_unfinished():
        raise ValueError("profile needs an idle LLM: it has unfinished requests; build a new LLM or "
                         "finish them first")
    params = (list(sampling_params) if isinstance(sampling_params, (list, tuple))
              else [sampling_params] * len(prompts))
    if len(params) != len(prompts):
        raise ValueError(f"sampling_params: one per prompt, got {len(params)} for {len(prompts)} prompts")
    device = llm.model.device
    marks: dict[str, float] = {}
    scheduler, schedule = llm.scheduler, llm.scheduler.schedule

    def timed_schedule():
        scheduled = schedule()
        marks["scheduled"] = time.perf_counter()
        return scheduled

    def before_forward(module, args):
        _sync(device)
        marks["forward_start"] = time.perf_counter()

    def after_forward(module, args, output):
        _sync(device)
        marks["forward_end"] = time.perf_counter()

    hooks = [llm.model.register_forward_pre_hook(before_forward),
             llm.model.register_forward_hook(after_forward)]
    scheduler.schedule = timed_schedule          # this scheduler only, until the run ends
    steps = []
    try:
        ids = [llm.add_request(list(p), q) for p, q in zip(prompts, params)]
        while scheduler.has_unfinished():
            marks.clear()
            start = time.perf_counter()
            llm.step()
            end = time.perf_counter()
            scheduled = marks["scheduled"]
            f0, f1 = marks.get("forward_start", scheduled), marks.get("forward_end", scheduled)
            record = llm.metrics["history"][-1]
            steps.append(StepTimes(schedule=scheduled - start, build=f0 - scheduled, forward=f1 - f0,
                                   finish=end - f1,
                                   tokens=record["prefill_tokens"] + record["decode_tokens"]))
        outputs = [llm.pop_result(i) for i in ids]
    finally:
        del scheduler.schedule                   # the class's method again
        for hook in hooks:
            hook.remove()
    return StepProfile(steps, outputs)
