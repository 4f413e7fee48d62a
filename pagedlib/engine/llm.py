"""``LLM``: a small serving engine on the paged cache (chapters 10 and 11).

Three pieces, each in its own module, meet here:

- the **block manager** (``pagedlib.memory.block_manager``) owns the cache's blocks: who holds which, shared
  prompt blocks, cached prefixes;
- the **scheduler** (``pagedlib.engine.scheduler``) decides, each step, which tokens run: one for each
  decoding sequence, then prefill chunks, within a token budget; it preempts the newest sequence
  when blocks run out;
- the **model** (``pagedlib.models.gpt2``) computes the scheduled tokens, reading and writing K/V through
  the block tables.

One step is short: schedule; copy any copy-on-write blocks; run **one forward pass** over the flat
batch of every scheduled token, decodes and prefill chunks together (``pagedlib.engine.batch``; every
layer writes the step's K/V before its attention reads, which is what makes the scheduler's prefix
caching safe, see ``pagedlib.memory.block_manager``); sample a token (``pagedlib.engine.sampling``) for each sequence
whose prompt is now fully computed or that decoded (a request with ``n > 1`` forks into its samples
first); retire those that are done::

    llm = LLM(GPT2.from_hf(hf_model), num_blocks=256, block_size=16, max_num_seqs=32,
              max_num_batched_tokens=512)                 # None: whole prompts in one step
    outputs = llm.generate(prompts, max_new_tokens=64)    # list[list[int]] -> list[list[int]]
    llm.metrics["preemptions"], llm.metrics["history"][0]["prefill_tokens"], llm.metrics["requests"]
"""
from __future__ import annotations

import itertools
import operator
import time
from typing import Sequence as Seq

import torch
from tqdm.auto import tqdm

from .batch import build_batch
from ..memory.block_manager import BlockManager
from ..models.layers import PagedModel
from .metrics import EngineMetrics, RequestMetrics, StepRecord
from .sampling import SamplingParams, sample_rows, sample_token
from .scheduler import ScheduledStep, Scheduler, Sequence, Status
from ..validation import cdiv, positive_int

__all__ = ["LLM", "SamplingParams", "sample_token"]


class EngineFailed(RuntimeError):
    """A step of this engine raised; its blocks and queues are left mid-step, so it refuses more work."""


class _RequestLog:
    """When a request arrived and produced tokens, and its first prefix hit (for its RequestMetrics)."""
    __slots__ = ("arrival", "first_token", "last_token", "num_cached_tokens")

    def __init__(self, arrival: float):
        self.arrival, self.first_token, self.last_token = arrival, None, None
        self.num_cached_tokens: int | None = None


class LLM:
    """A serving engine: continuous batching of many requests over one paged KV cache of
    ``num_blocks`` blocks of ``block_size`` tokens, at most ``max_num_seqs`` sequences at once and at
    most ``max_num_batched_tokens`` tokens per step (``None``: no limit, every prompt whole).

    :meth:`generate` runs a list of prompts to completion; :meth:`add_request` and :meth:`step` do
    it one step at a time. ``metrics`` (a :class:`~pagedlib.engine.metrics.EngineMetrics`, readable by key)
    describes the steps since :meth:`reset_metrics` (``generate`` resets it):

    - ``steps``, ``tokens_generated``, ``elapsed_s``, ``tokens_per_s`` (time spent in steps);
    - ``preemptions``: sequences sent back to wait because blocks ran out;
    - ``prompt_tokens_computed``: tokens run through prefill (recomputed ones included, cached ones not);
    - ``prefix_hit_tokens``: prompt tokens found in the prefix cache instead;
    - ``peak_blocks_used``, ``peak_running``; ``peak_blocks_saved_by_sharing``: blocks the sequences'
      tables name minus the blocks really held (parallel samples sharing their prompt);
    - ``history``: one :class:`~pagedlib.engine.metrics.StepRecord` per step (``running``, ``waiting``,
      ``blocks_used``, ``logical_blocks``, ``preempted``, ``prefill_tokens``, ``decode_tokens``,
      ``seconds``) for the figures of :mod:`pagedlib.plots.engine`;
    - ``requests``: one :class:`~pagedlib.engine.metrics.RequestMetrics` per finished request (``ttft_s``,
      ``tpot_s``, ``num_cached_tokens``, ``num_preemptions``), in prompt order after ``generate``.

    If a step raises (the model failed, say), the engine is left mid-step and refuses further use
    with :class:`EngineFailed`; build a new ``LLM`` (the model itself is unaffected).
    """

    def __init__(self, model: PagedModel, num_blocks: int, block_size: int = 16, max_num_seqs: int = 64,
                 enable_prefix_caching: bool = False, max_num_batched_tokens: int | None = None):
        if not isinstance(model, PagedModel):
            raise TypeError(f"model must be a paged model (pagedlib.GPT2, pagedlib.Llama, or anything with "
                            f"the pagedlib.models.layers.PagedModel protocol); got {type(model).__name__}. "
                            "Convert a transformers model with pagedlib.from_hf(model) (it picks "
                            "pagedlib.GPT2.from_hf or pagedlib.Llama.from_hf by architecture).")
        self.model = model
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        self.max_num_seqs = positive_int("max_num_seqs", max_num_seqs)
        self.max_num_batched_tokens = (None if max_num_batched_tokens is None else
                                       positive_int("max_num_batched_tokens", max_num_batched_tokens))
        self.block_manager = BlockManager(num_blocks, block_size, enable_prefix_caching=enable_prefix_caching)
        self.scheduler = self.make_scheduler()
        self.kv_cache = model.make_kv_cache(num_blocks, block_size)
        self._request_ids = itertools.count()
        self._seq_ids = itertools.count()
        self._requests: dict[int, list[Sequence]] = {}   # request id -> its samples
        self._logs: dict[int, _RequestLog] = {}
        self._failure: BaseException | None = None
        self.reset_metrics()

    def make_scheduler(self) -> Scheduler:
        """The admission policy; the reserve-max baseline overrides this."""
        return Scheduler(self.block_manager, self.max_num_seqs, self.max_num_batched_tokens)

    # ---- requests ------------------------------------------------------------------------------
    def generate(self, prompts: Seq[Seq[int]], sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
                 *, use_tqdm: bool = True, **kwargs) -> list:
        """Generate for every prompt (a list of token ids) and return the generated tokens, in order.

        Pass a :class:`SamplingParams` (one for all, or one per prompt) or its fields as keyword
        arguments (``max_new_tokens=32, temperature=0.8, ...``). Each result is a ``list[int]``, or,
        for a request with ``n > 1``, a list of its ``n`` samples. Every request is checked before any
        work starts; a bad one raises ``ValueError`` and leaves the engine as it was.
        """
        self._check_usable()
        params = self._params_for(prompts, sampling_params, kwargs)
        prompts = [self.check_request(i, prompt, p) for i, (prompt, p) in enumerate(zip(prompts, params))]
        self.reset_metrics()
        ids = [self.add_request(prompt, p, checked=True) for prompt, p in zip(prompts, params)]
        with tqdm(total=len(ids), desc="requests", unit="req", disable=not use_tqdm) as bar:
            while self.scheduler.has_unfinished():
                bar.update(len(self.step()))
        return [self.pop_result(i) for i in ids]

    def add_request(self, prompt: Seq[int], params: SamplingParams | None = None, *, checked: bool = False) -> int:
        """Queue one request (it starts in a later :meth:`step`); returns its request id."""
        self._check_usable()
        params = params or SamplingParams()
        if not checked:
            prompt = self.check_request(0, prompt, params)
        request_id = next(self._request_ids)
        seed = params.seed if params.seed is not None else int(torch.randint(2**62, ()))
        seq = self._new_sequence(request_id, list(prompt), params, 0, seed)
        seq.num_samples = params.n                       # n seats now; forked into n once its prompt is computed
        self._requests[request_id] = [seq]
        self._logs[request_id] = _RequestLog(time.perf_counter())
        self.scheduler.add(seq)
        return request_id

    def pop_result(self, request_id: int) -> list[int] | list[list[int]]:
        """The output of a finished request (its ``n`` samples if ``n > 1``), forgotten afterwards;
        its :class:`~pagedlib.engine.metrics.RequestMetrics` joins ``metrics["requests"]``."""
        samples = sorted(self._requests.pop(request_id), key=lambda s: s.sample_index)
        log = self._logs.pop(request_id)
        outputs = [s.output for s in samples]
        longest = max(map(len, outputs))
        if log.first_token is not None:
            self.metrics.requests.append(RequestMetrics(
                request_id=request_id, prompt_tokens=len(samples[0].prompt), output_tokens=longest,
                ttft_s=log.first_token - log.arrival,
                tpot_s=(log.last_token - log.first_token) / (longest - 1) if longest > 1 else 0.0,
                num_cached_tokens=log.num_cached_tokens,
                num_preemptions=sum(s.num_preemptions for s in samples)))
        return outputs[0] if len(outputs) == 1 else outputs

    def _new_sequence(self, request_id: int, prompt: list[int], params: SamplingParams, index: int,
                      seed: int) -> Sequence:
        seq = Sequence(seq_id=next(self._seq_ids), request_id=request_id, prompt=prompt, params=params,
                       sample_index=index, seed=seed)
        if not params.greedy:
            seq.generator = torch.Generator().manual_seed(seed + index)
        return seq

    # ---- one step ------------------------------------------------------------------------------
    def step(self) -> list[int]:
        """Run one engine step; returns the ids of the requests that finished in it.

        If anything in it raises, the engine refuses further use (:class:`EngineFailed`): the block
        manager and the scheduler would otherwise hold blocks for K/V that was never written.
        """
        self._check_usable()
        try:
            return self._step()
        except BaseException as exc:
            self._failure = exc
            raise

    def _step(self) -> list[int]:
        start = time.perf_counter()
        plan = self.scheduler.schedule()
        for src, dst in plan.copies:                     # copy-on-write before anyone writes
            self.kv_cache.copy_block(src, dst)
        seqs = plan.seqs
        if not seqs and not self.scheduler.running and self.scheduler.waiting and not plan.preempted:
            head = self.scheduler.waiting[0]
            raise RuntimeError(f"request {head.request_id} cannot be admitted even into an empty cache "
                               f"({len(head)} tokens, {head.num_samples} seats); the admission rule "
                               "(can_admit) or check_request should have refused it")
        sampled: list[Sequence] = []
        if seqs:
            batch = build_batch(seqs, plan.num_new_tokens, self.block_manager, self.model.device)
            logits = self.model(batch, self.kv_cache)    # [num_seqs, vocab_size]: each one's last token
            rows: list[int] = []
            for row, seq in enumerate(seqs):
                if not seq.prefilling:                   # decoded, or its last prompt token computed
                    for s in self._fork_samples(seq):
                        sampled.append(s)
                        rows.append(row)
            tokens = sample_rows(logits, rows, [s.params for s in sampled], [s.generator for s in sampled])
            for seq, token in zip(sampled, tokens):
                seq.output.append(token)
        now = time.perf_counter()
        for seq in plan.prefills:
            log = self._logs[seq.request_id]
            if log.num_cached_tokens is None:            # its first admission's prefix hit
                log.num_cached_tokens = seq.num_cached_tokens
        for request_id in {s.request_id for s in sampled}:
            log = self._logs[request_id]
            log.first_token = log.first_token or now
            log.last_token = now
        self._record(plan, len(sampled), now - start)
        return self._retire(sampled)

    def _fork_samples(self, seq: Sequence) -> list[Sequence]:
        """After a request's prompt is computed: fork it into its ``n`` samples, sharing its blocks."""
        samples = [seq]
        for index in range(1, seq.num_samples):
            child = self._new_sequence(seq.request_id, seq.prompt, seq.params, index, seq.seed)
            self.scheduler.fork(seq, child)
            self._requests[seq.request_id].append(child)
            samples.append(child)
        return samples

    def _retire(self, seqs: list[Sequence]) -> list[int]:
        """Finish the sequences that are done; return the requests all of whose samples are done."""
        done_requests = []
        for seq in seqs:
            p = seq.params
            if len(seq.output) >= p.max_new_tokens or (p.eos_token_id is not None and seq.output[-1] == p.eos_token_id):
                self.scheduler.finish(seq)
                siblings = self._requests[seq.request_id]
                if len(siblings) == p.n and all(s.status is Status.FINISHED for s in siblings):
                    done_requests.append(seq.request_id)
        return done_requests

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise EngineFailed(
                f"this LLM can no longer be used: an earlier step() failed with "
                f"{type(self._failure).__name__}: {self._failure}. That step had already handed out "
                "blocks and moved sequences, so its cache and queues are inconsistent; build a new "
                "LLM (the model and its weights are unaffected).") from self._failure

    # ---- checks ----------------------------------------------------------------------------------
    def _params_for(self, prompts, sampling_params, kwargs) -> list[SamplingParams]:
        if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
            raise ValueError("prompts must be a non-empty list of prompts, each a list of token ids; "
                             f"got {type(prompts).__name__} {prompts!r:.60}")
        if sampling_params is not None and kwargs:
            raise ValueError(f"pass either sampling_params or its fields as keywords, not both; got both "
                             f"and {sorted(kwargs)}")
        if sampling_params is None:
            sampling_params = SamplingParams(**kwargs)
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"sampling_params must be one SamplingParams or one per prompt; got "
                             f"{len(sampling_params)} for {len(prompts)} prompts")
        return list(sampling_params)

    def check_request(self, index: int, prompt, params: SamplingParams) -> list[int]:
        """Refuse, with a ``ValueError`` saying why, a request that cannot run; return its token ids."""
        where = f"prompts[{index}]"
        vocab_size, context = self.model.vocab_size, self.model.context_length
        try:
            tokens = [operator.index(t) for t in prompt]
        except TypeError:
            raise ValueError(f"{where} must be a list of integer token ids; got {prompt!r:.60}") from None
        if not tokens:
            raise ValueError(f"{where} is empty: a request needs at least one prompt token to start from.")
        bad = [t for t in tokens if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"{where} has token id {bad[0]}, outside the model's vocabulary "
                             f"[0, {vocab_size}): tokenize with the model's own tokenizer.")
        if params.eos_token_id is not None and not 0 <= params.eos_token_id < vocab_size:
            raise ValueError(f"eos_token_id {params.eos_token_id} is outside the vocabulary [0, {vocab_size}).")
        total = len(tokens) + params.max_new_tokens
        if total > context:
            raise ValueError(f"{where}: {len(tokens)} prompt tokens + max_new_tokens {params.max_new_tokens} = "
                             f"{total} exceeds the model's context of {context} tokens (context_length); "
                             "shorten the prompt or lower max_new_tokens.")
        need = cdiv(total, self.block_size)
        if need > self.num_blocks:
            raise ValueError(f"{where}: {total} tokens need {need} blocks of {self.block_size}, but the whole "
                             f"cache has {self.num_blocks} blocks, so it could never run; give LLM more "
                             "num_blocks or lower max_new_tokens.")
        if params.n > self.max_num_seqs:
            raise ValueError(f"n = {params.n} samples cannot run at once with max_num_seqs = "
                             f"{self.max_num_seqs}; raise max_num_seqs or lower n.")
        return tokens

    # ---- metrics ---------------------------------------------------------------------------------
    def reset_metrics(self) -> None:
        """Start counting afresh (``generate`` does this)."""
        self.scheduler.num_preemptions = 0
        self._hits_at_reset = self.block_manager.hit_tokens
        self.metrics = EngineMetrics(num_blocks=self.num_blocks, block_size=self.block_size,
                                     max_num_batched_tokens=self.max_num_batched_tokens)

    def step_record(self, **fields) -> StepRecord:
        """The history row of the step just run. A subclass may return a richer record (the
        reserve-max baseline adds its reserved blocks)."""
        return StepRecord(**fields)

    def _record(self, plan: ScheduledStep, tokens_sampled: int, seconds: float) -> None:
        """Count this step and append it to the history (measured before retiring)."""
        m, bm, running = self.metrics, self.block_manager, self.scheduler.running
        m.preemptions = self.scheduler.num_preemptions
        m.prefix_hit_tokens = bm.hit_tokens - self._hits_at_reset     # the block manager counts hits
        m.add_step(self.step_record(
            step=m.steps + 1, running=len(running), waiting=len(self.scheduler.waiting),
            blocks_used=bm.num_used_blocks,
            logical_blocks=sum(cdiv(bm.num_tokens(s.seq_id), self.block_size) for s in running),  # unshared
            preempted=len(plan.preempted), prefill_tokens=sum(plan.prefill_chunks),
            decode_tokens=len(plan.decodes), seconds=seconds), tokens_sampled)
