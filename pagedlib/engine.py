"""``LLM``: a small serving engine on the paged cache (chapter 9).

Three pieces, each in its own module, meet here:

- the **block manager** (``pagedlib.block_manager``) owns the cache's blocks: who holds which, shared
  prompt blocks, cached prefixes;
- the **scheduler** (``pagedlib.scheduler``) decides, each step, which sequences run: admits waiting
  requests when their prompt fits, preempts the newest when blocks run out;
- the **model** (``pagedlib.model``) computes the scheduled tokens, reading and writing K/V through
  the block tables.

The engine's loop is short: schedule, copy any copy-on-write blocks, run the newly admitted sequences
(prefill) and the running ones (decode), sample one token for each, retire those that are done::

    llm = LLM(GPT2.from_hf(hf_model), num_blocks=256, block_size=16, max_num_seqs=32)
    outputs = llm.generate(prompts, max_new_tokens=64)    # list[list[int]] -> list[list[int]]
    llm.metrics["preemptions"], llm.metrics["peak_blocks_used"], llm.metrics["history"]
"""
from __future__ import annotations

import itertools
import operator
import time
from dataclasses import dataclass
from typing import Sequence as Seq

import torch
from tqdm.auto import tqdm

from .block_manager import BlockManager
from .layers import PagedBatch, PagedModel
from .scheduler import Scheduler, ScheduledStep, Sequence, Status


@dataclass(frozen=True)
class SamplingParams:
    """How to generate for one request.

    ``temperature=0`` is greedy (argmax); above 0 the next token is drawn from the softmax of
    ``logits / temperature``, restricted to the ``top_k`` most likely tokens (0: no limit) and to the
    smallest set whose probability reaches ``top_p``. ``seed`` makes sampling reproducible: sample
    ``j`` of a request draws from its own generator seeded with ``seed + j`` (``None``: a seed drawn
    from torch's global generator). ``n`` samples share the prompt's blocks. Generation stops after
    ``max_new_tokens`` tokens, or after ``eos_token_id`` (kept in the output) if one is given.
    """

    max_new_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    eos_token_id: int | None = None

    def __post_init__(self):
        checks = [
            (isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1,
             f"max_new_tokens must be an integer >= 1; got {self.max_new_tokens!r}"),
            (self.temperature >= 0, f"temperature must be >= 0 (0 means greedy); got {self.temperature}"),
            (isinstance(self.top_k, int) and self.top_k >= 0,
             f"top_k must be an integer >= 0 (0 means no limit); got {self.top_k!r}"),
            (0 < self.top_p <= 1, f"top_p must be in (0, 1]; got {self.top_p}"),
            (isinstance(self.n, int) and self.n >= 1, f"n (samples per prompt) must be an integer >= 1; got {self.n!r}"),
            (self.seed is None or isinstance(self.seed, int), f"seed must be an integer or None; got {self.seed!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Pick the next token from one sequence's ``logits [vocab_size]`` (fp32) by ``params``."""
    if params.greedy:
        return int(logits.argmax())
    logits = logits.cpu() / params.temperature                   # [vocab_size]
    if params.top_k:
        kth_best = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    if params.top_p < 1:
        probs, order = logits.softmax(-1).sort(descending=True)
        before = probs.cumsum(-1) - probs                        # probability of the better tokens
        drop = order[before >= params.top_p]                     # the nucleus is already full without them
        logits = logits.index_fill(0, drop, float("-inf"))
    probs = logits.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


class LLM:
    """A serving engine: continuous batching of many requests over one paged KV cache of
    ``num_blocks`` blocks of ``block_size`` tokens, at most ``max_num_seqs`` sequences at once.

    :meth:`generate` runs a list of prompts to completion; :meth:`add_request` and :meth:`step` do
    it one step at a time. ``metrics`` describes the last ``generate`` call (or the steps since
    :meth:`reset_metrics`):

    - ``steps``, ``tokens_generated``, ``elapsed_s``, ``tokens_per_s`` (time spent in steps);
    - ``preemptions``: sequences sent back to wait because blocks ran out;
    - ``prompt_tokens_computed``: tokens run through prefill (recomputed ones included, cached ones not);
    - ``prefix_hit_tokens``: prompt tokens found in the prefix cache instead;
    - ``peak_blocks_used``, ``peak_running``; ``peak_blocks_saved_by_sharing``: blocks the sequences'
      tables name minus the blocks really held (parallel samples sharing their prompt);
    - ``history``: one dict per step (``running``, ``waiting``, ``blocks_used``, ``logical_blocks``,
      ``preempted``, ``prefill_tokens``, ``decode_tokens``, ``seconds``) for the figures of
      :mod:`pagedlib.plots.engine`.
    """

    def __init__(self, model: PagedModel, num_blocks: int, block_size: int = 16, max_num_seqs: int = 64,
                 enable_prefix_caching: bool = False):
        if not isinstance(model, PagedModel):
            raise TypeError(f"model must be a paged model (pagedlib.GPT2, pagedlib.Llama, or anything with "
                            f"the pagedlib.layers.PagedModel protocol); got {type(model).__name__}. "
                            "Convert a transformers model with pagedlib.from_hf(model) (it picks pagedlib.GPT2.from_hf "
                            "or pagedlib.Llama.from_hf by architecture).")
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size), ("max_num_seqs", max_num_seqs)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
        self.model = model
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_num_seqs = max_num_seqs
        self.block_manager = BlockManager(num_blocks, block_size, enable_prefix_caching=enable_prefix_caching)
        self.scheduler = self.make_scheduler()
        self.kv_cache = model.make_kv_cache(num_blocks, block_size)
        self._request_ids = itertools.count()
        self._seq_ids = itertools.count()
        self._requests: dict[int, list[Sequence]] = {}   # request id -> its samples
        self.reset_metrics()

    def make_scheduler(self) -> Scheduler:
        """The admission policy; the reserve-max baseline overrides this."""
        return Scheduler(self.block_manager, self.max_num_seqs)

    # ---- requests ------------------------------------------------------------------------------
    def generate(self, prompts: Seq[Seq[int]], sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
                 *, use_tqdm: bool = True, **kwargs) -> list:
        """Generate for every prompt (a list of token ids) and return the generated tokens, in order.

        Pass a :class:`SamplingParams` (one for all, or one per prompt) or its fields as keyword
        arguments (``max_new_tokens=32, temperature=0.8, ...``). Each result is a ``list[int]``, or,
        for a request with ``n > 1``, a list of its ``n`` samples. Every request is checked before any
        work starts; a bad one raises ``ValueError`` and leaves the engine as it was.
        """
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
        params = params or SamplingParams()
        if not checked:
            prompt = self.check_request(0, prompt, params)
        request_id = next(self._request_ids)
        seed = params.seed if params.seed is not None else int(torch.randint(2**62, ()))
        seq = self._new_sequence(request_id, list(prompt), params, 0, seed)
        seq.num_samples = params.n                       # forked into n once its prompt is computed
        self._requests[request_id] = [seq]
        self.scheduler.add(seq)
        return request_id

    def pop_result(self, request_id: int) -> list[int] | list[list[int]]:
        """The output of a finished request (its ``n`` samples if ``n > 1``), forgotten afterwards."""
        samples = self._requests.pop(request_id)
        outputs = [s.output for s in sorted(samples, key=lambda s: s.sample_index)]
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
        """Run one engine step; returns the ids of the requests that finished in it."""
        start = time.perf_counter()
        plan = self.scheduler.schedule()
        for src, dst in plan.copies:                     # copy-on-write before anyone writes
            self.kv_cache.copy_block(src, dst)
        rows: list[tuple[Sequence, torch.Tensor]] = []
        prefill_tokens = 0
        if plan.prefills:
            batch = self._prefill_batch(plan.prefills)
            prefill_tokens = batch.input_ids.numel()             # computed now (a cached prefix is not)
            logits = self.model(batch, self.kv_cache)            # [num_seqs, vocab]
            for seq, row in zip(plan.prefills, logits):
                rows += [(s, row) for s in self._fork_samples(seq)]
        if plan.decodes:
            logits = self.model(self._decode_batch(plan.decodes), self.kv_cache)     # [num_seqs, vocab]
            rows += zip(plan.decodes, logits)
        for (seq, _), token in zip(rows, self._sample(rows)):
            seq.output.append(token)
        self._record(plan, prefill_tokens, len(rows), time.perf_counter() - start)
        return self._retire([seq for seq, _ in rows])

    def _sample(self, rows: list[tuple[Sequence, torch.Tensor]]) -> list[int]:
        """The next token of each (sequence, logits row). The greedy ones come from one argmax over all
        rows, so a step waits for the GPU once, not once per sequence; the others from sample_token."""
        if not rows:
            return []
        logits = torch.stack([row for _, row in rows])                # [num_rows, vocab_size]
        best = logits.argmax(-1).tolist()                               # [num_rows]
        return [best[i] if seq.params.greedy else sample_token(logits[i], seq.params, seq.generator)
                for i, (seq, _) in enumerate(rows)]

    def _fork_samples(self, seq: Sequence) -> list[Sequence]:
        """After a request's prompt is computed: fork it into its ``n`` samples, sharing its blocks."""
        samples = [seq]
        for index in range(1, seq.num_samples):
            child = self._new_sequence(seq.request_id, seq.prompt, seq.params, index, seq.seed)
            self.scheduler.fork(seq, child)
            self._requests[seq.request_id].append(child)
            samples.append(child)
        seq.num_samples = 1
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

    # ---- batches for the model -------------------------------------------------------------------
    def _slot(self, table: list[int], position: int) -> int:
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def _prefill_batch(self, seqs: list[Sequence]) -> PagedBatch:
        """Every token of each sequence that is not in the cache yet (a cached prefix is skipped)."""
        ids, positions, slots, starts, tables = [], [], [], [0], []
        for seq in seqs:
            tokens, first = seq.tokens, seq.num_cached
            table = self.block_manager.block_table(seq.seq_id)
            ids += tokens[first:]
            positions += range(first, len(tokens))
            slots += [self._slot(table, i) for i in range(first, len(tokens))]
            starts.append(starts[-1] + len(tokens) - first)
            tables.append(table)
        return self._batch(ids, positions, slots, tables, [len(s) for s in seqs], starts, is_decode=False)

    def _decode_batch(self, seqs: list[Sequence]) -> PagedBatch:
        """The last sampled token of each sequence."""
        tables = [self.block_manager.block_table(seq.seq_id) for seq in seqs]
        lens = [len(seq) for seq in seqs]
        slots = [self._slot(table, n - 1) for table, n in zip(tables, lens)]
        return self._batch([seq.tokens[-1] for seq in seqs], [n - 1 for n in lens], slots, tables, lens,
                           list(range(len(seqs) + 1)), is_decode=True)

    def _batch(self, ids, positions, slots, tables, lens, starts, is_decode) -> PagedBatch:
        device = self.model.device
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]    # padding is never read (masked by seq_lens)
        longest = max(end - start for start, end in zip(starts, starts[1:]))   # known here: no GPU sync later
        return PagedBatch(
            input_ids=torch.tensor(ids, dtype=torch.long, device=device),            # [num_tokens]
            positions=torch.tensor(positions, dtype=torch.long, device=device),      # [num_tokens]
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),       # [num_tokens]
            block_tables=torch.tensor(padded, dtype=torch.int32, device=device),     # [num_seqs, max_blocks]
            seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),           # [num_seqs]
            query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),  # [num_seqs + 1]
            is_decode=is_decode, max_query_len=longest)

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
        need = -(-total // self.block_size)
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
        self.metrics = {
            "steps": 0, "preemptions": 0, "tokens_generated": 0, "prompt_tokens_computed": 0,
            "prefix_hit_tokens": 0, "peak_blocks_used": 0, "peak_running": 0,
            "peak_blocks_saved_by_sharing": 0, "elapsed_s": 0.0, "tokens_per_s": 0.0,
            "num_blocks": self.num_blocks, "block_size": self.block_size, "history": [],
        }

    def _record(self, plan: ScheduledStep, prefill_tokens: int, num_new_tokens: int, seconds: float) -> None:
        """Update the counters and append this step to the history (measured before retiring)."""
        m, bm = self.metrics, self.block_manager
        running = self.scheduler.running
        used = self.num_blocks - bm.num_free_blocks
        logical = sum(len(bm.block_table(s.seq_id)) for s in running)   # blocks if nothing were shared
        m["steps"] += 1
        m["preemptions"] = self.scheduler.num_preemptions
        m["tokens_generated"] += num_new_tokens
        m["prompt_tokens_computed"] += prefill_tokens
        m["prefix_hit_tokens"] += sum(s.num_cached for s in plan.prefills)
        m["peak_blocks_used"] = max(m["peak_blocks_used"], used)
        m["peak_running"] = max(m["peak_running"], len(running))
        m["peak_blocks_saved_by_sharing"] = max(m["peak_blocks_saved_by_sharing"], logical - used)
        m["elapsed_s"] += seconds
        m["tokens_per_s"] = m["tokens_generated"] / m["elapsed_s"] if m["elapsed_s"] else 0.0
        m["history"].append({
            "step": m["steps"], "running": len(running), "waiting": len(self.scheduler.waiting),
            "blocks_used": used, "logical_blocks": logical, "preempted": len(plan.preempted),
            "prefill_tokens": prefill_tokens, "decode_tokens": len(plan.decodes), "seconds": seconds,
        })
