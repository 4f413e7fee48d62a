"""``LLM``: a small serving engine on the paged cache (chapters 10 and 11).

Three pieces, each in its own module, meet here:

- the **block manager** (``pagedlib.memory.block_manager``) owns the cache's blocks: who holds which, shared
  prompt blocks, cached prefixes; block 0 is its null block, which padding names;
- the **scheduler** (``pagedlib.engine.scheduler``) decides, each step, which tokens run, within a token
  budget, in vLLM v1's order (``scheduling="vllm"``), Sarathi-Serve's (``"decode_first"``) or vLLM v0's
  prompts-or-decodes steps (``"prefill_first"``), admitting
  by one of three policies (``admission="on_demand"``, ``"guaranteed"``, ``"estimated"``); blocks are
  taken as the computed tokens need them, and the newest sequence is preempted when they run out;
- the **model** (``pagedlib.models``) computes the scheduled tokens, reading and writing K/V through
  the block tables.

One step is short: schedule; copy any copy-on-write blocks; run **one forward pass** over the flat
batch of every scheduled token, decodes and prefill chunks together (``pagedlib.engine.batch``; every
layer writes the step's K/V before its attention reads, which is what makes the scheduler's prefix
caching safe, see ``pagedlib.memory.block_manager``); sample a token (``pagedlib.engine.sampling``) for
each sequence whose tokens are now all computed (a request with ``n > 1`` forks into its samples);
retire those that are done. If the step raises (the model fails, a ``KeyboardInterrupt``), it is
undone first (:meth:`pagedlib.engine.scheduler.Scheduler.undo`), so the next ``step()`` goes on.
Requests are checked by ``pagedlib.engine.request_checks``, measured by ``pagedlib.engine.metrics``::

    llm = LLM(GPT2.from_hf(hf_model), num_usable_blocks=256, block_size=16, max_num_seqs=32,
              max_num_batched_tokens=512)                 # None: whole prompts in one step
    outputs = llm.generate(prompts, max_new_tokens=64)    # list[list[int]] -> list[list[int]]
    llm.metrics["preemptions"], llm.metrics["history"][0]["prefill_tokens"], llm.metrics["ttft_p99_s"]
"""
from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass, field
from typing import Hashable, Iterator, Sequence as Seq

import torch
from tqdm.auto import tqdm

from .batch import build_batch
from ..memory.block_manager import BlockManager
from ..models.layers import PagedModel
from .metrics import MetricsRecorder, StepRecord
from .request_checks import check_request, sampling_params_for
from .sampling import SamplingParams, sample_rows, sample_token
from .scheduler import ScheduledStep, Scheduler, SeqState, Status, check_limits
from ..validation import cdiv, positive_int

__all__ = ["LLM", "SamplingParams", "sample_token", "EngineFailed", "RequestOutput", "CompletionOutput"]


class EngineFailed(RuntimeError):
    """A step failed and could not be undone; the engine refuses more work (build a new ``LLM``)."""


class _Request:
    """One request in the engine (vLLM's ``Request``): its samples (the scheduler's sequences, in
    sample order; one until its prompt is computed, then ``n``), each sample's random generator
    (``None`` when greedy), its seed, whether its prompt came as text, how each sample ended, and how
    much of each output a stream has been given."""
    __slots__ = ("request_id", "params", "seed", "samples", "generators", "finish_reasons", "aborted",
                 "text", "sent")

    def __init__(self, request_id: int, params: SamplingParams, seed: int, text: bool):
        self.request_id, self.params, self.seed, self.text = request_id, params, seed, text
        self.samples: list[SeqState] = []
        self.generators: dict[Hashable, torch.Generator | None] = {}
        self.finish_reasons: dict[Hashable, str] = {}     # seq id -> "length", "stop" or "abort"
        self.aborted = False
        self.sent: dict[Hashable, tuple[int, int]] = {}   # seq id -> (tokens, characters) streamed

    @property
    def finished(self) -> bool:
        return self.aborted or (len(self.samples) == self.params.n and
                                all(s.status is Status.FINISHED for s in self.samples))


@dataclass
class CompletionOutput:
    """One sample's new tokens in a step (vLLM's ``CompletionOutput`` with ``output_kind=DELTA``):
    ``token_ids`` and, when the engine has a tokenizer, ``text`` (what they add to the decoded reply);
    ``finish_reason`` once it ended: ``"length"``, ``"stop"`` or ``"abort"``."""
    index: int
    token_ids: list[int]
    text: str = ""
    finish_reason: str | None = None


@dataclass
class RequestOutput:
    """What one request produced in a step (vLLM's ``RequestOutput``, incremental): ``prompt_index``
    is its place in the prompts given to :meth:`LLM.stream`."""
    request_id: int
    prompt_index: int
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False


_OLD_NAME = ("an engine's num_blocks is now num_usable_blocks, the blocks requests can hold; num_blocks "
             "names a pool's size, the null block included (block_manager.num_blocks, kv_cache.num_blocks)")


def usable_blocks(num_usable_blocks: int | None, num_blocks: int | None) -> int:
    """An engine's ``num_usable_blocks``, given under that name or its old one, ``num_blocks``
    (accepted, with a ``DeprecationWarning``); checked."""
    if num_blocks is not None:
        if num_usable_blocks is not None:
            raise TypeError("give num_usable_blocks only (num_blocks is its old name)")
        warnings.warn(_OLD_NAME, DeprecationWarning, stacklevel=3)
        num_usable_blocks = num_blocks
    if num_usable_blocks is None:
        raise TypeError("the engine needs num_usable_blocks: how many blocks of block_size tokens requests "
                        "can hold (LLM(model, num_usable_blocks=256))")
    return positive_int("num_usable_blocks", num_usable_blocks)


class LLM:
    """A serving engine: continuous batching of many requests over one paged KV cache of
    ``num_usable_blocks`` blocks of ``block_size`` tokens for requests, plus the null block that padding
    names (so the block manager and the KV cache hold ``num_blocks = num_usable_blocks + 1``), at most
    ``max_num_seqs`` sequences at once and at most ``max_num_batched_tokens`` tokens per step
    (``None``: no limit, every prompt whole).

    ``scheduling``: ``"vllm"`` (vLLM v1's order), ``"decode_first"`` (Sarathi-Serve's) or
    ``"prefill_first"`` (vLLM v0's: a step of prompts, or of decodes when no prompt runs);
    ``long_prefill_token_threshold``: the most tokens one prefill takes per step (0: no cap, as in
    vLLM); ``admission``: ``"on_demand"`` (vLLM), ``"guaranteed"`` (TensorRT-LLM's
    GUARANTEED_NO_EVICT) or ``"estimated"`` (SGLang's new_token_ratio), see
    :mod:`pagedlib.engine.scheduler`; ``scheduler_reserve_full_isl`` (vLLM's name and default since
    vllm#37307, 2026): admit a waiting request only when its whole known sequence fits in the free
    blocks (net of cache hits), though blocks are still taken chunk by chunk; ``False``: when its first
    chunk fits, as vLLM v1 did before. ``tokenizer`` (optional): text prompts and replies, ``stop``
    strings and :meth:`chat`. ``enable_prefix_caching`` with ``prefix_caching_hash``
    (``"blake2"``, ``"sha256"``, ``"builtin"``); a request's ``cache_salt`` keeps its blocks apart.

    :meth:`generate` runs a list of prompts to completion; :meth:`add_request` and :meth:`step` do
    it one step at a time. ``metrics`` (a :class:`~pagedlib.engine.metrics.EngineMetrics`, readable by key)
    describes the steps since :meth:`reset_metrics` (``generate`` resets it):

    - ``steps``, ``tokens_generated``, ``elapsed_s``, ``tokens_per_s`` (time spent in steps);
    - ``preemptions``: sequences sent back to wait because blocks ran out;
    - ``prompt_tokens_computed``: tokens run through prefill (recomputed ones included, cached ones not);
    - ``prefix_hit_tokens``: prompt tokens found in the prefix cache instead; ``resumed_hit_tokens``:
      of those, found by preempted sequences when they resumed (recompute saved);
    - ``peak_blocks_used``, ``peak_running``; ``peak_blocks_saved_by_sharing``: blocks the sequences'
      tables name minus the blocks really held (parallel samples sharing their prompt);
    - ``ttft_p50_s`` ... ``itl_p99_s``: percentiles of time to first token and inter-token latency;
      ``metrics.goodput(ttft_slo_s, tpot_slo_s)``: requests per second that met both bounds;
    - ``history``: one :class:`~pagedlib.engine.metrics.StepRecord` per step (``running``, ``waiting``,
      ``blocks_used``, ``logical_blocks``, ``preempted``, ``prefill_tokens``, ``decode_tokens``,
      ``seconds``) for the figures of :mod:`pagedlib.plots.engine`;
    - ``requests``: one :class:`~pagedlib.engine.metrics.RequestMetrics` per finished request (``ttft_s``,
      ``tpot_s``, ``itl_s``, ``num_cached_tokens``, ``num_preemptions``), in prompt order after ``generate``.

    If a step raises (the model failed, a ``KeyboardInterrupt``), the step is undone before the
    exception reaches the caller: its sequences go back to wait and will be recomputed, so the next
    :meth:`step` goes on. Only a failure of that undo leaves the engine refusing further use
    (:class:`EngineFailed`).
    """

    def __init__(self, model: PagedModel, num_usable_blocks: int | None = None, block_size: int = 16,
                 max_num_seqs: int = 64, enable_prefix_caching: bool = False,
                 max_num_batched_tokens: int | None = None, *, scheduling: str = "vllm",
                 admission: str = "on_demand", long_prefill_token_threshold: int = 0,
                 prefix_caching_hash: str = "builtin", scheduler_reserve_full_isl: bool = True, tokenizer=None,
                 num_blocks: int | None = None):
        if not isinstance(model, PagedModel):
            raise TypeError(f"model must be a paged model (pagedlib.GPT2, pagedlib.Llama, or anything with "
                            f"the pagedlib.models.layers.PagedModel protocol); got {type(model).__name__}. "
                            "Convert a transformers model with pagedlib.from_hf(model) (it picks "
                            "pagedlib.GPT2.from_hf or pagedlib.Llama.from_hf by architecture).")
        self.model = model
        self.tokenizer = tokenizer
        self.num_usable_blocks = usable_blocks(num_usable_blocks, num_blocks)
        self.block_size = positive_int("block_size", block_size)
        self.max_num_seqs, self.max_num_batched_tokens = check_limits(max_num_seqs, max_num_batched_tokens)
        self._scheduler_options = dict(scheduling=scheduling, admission=admission,
                                       long_prefill_token_threshold=long_prefill_token_threshold,
                                       scheduler_reserve_full_isl=scheduler_reserve_full_isl)
        # a pool of one more block than requests can hold: block 0 is the null block, never handed out
        num_blocks = self.num_usable_blocks + 1
        self.block_manager = BlockManager(num_blocks, block_size, enable_prefix_caching=enable_prefix_caching,
                                          null_block=True, prefix_caching_hash=prefix_caching_hash)
        self.scheduler = self.make_scheduler()
        self.kv_cache = model.make_kv_cache(num_blocks, block_size)
        self._request_ids = itertools.count()
        self._seq_ids = itertools.count()
        self._requests: dict[int, _Request] = {}         # request id -> its state, until popped
        self._produced: list[SeqState] = []               # the sequences that sampled in the last step
        self._failure: BaseException | None = None
        self.recorder = MetricsRecorder(self.scheduler, self.block_manager, self.num_usable_blocks,
                                        self.block_size, self.max_num_batched_tokens)

    @property
    def num_blocks(self) -> int:
        """The old name of :attr:`num_usable_blocks` (``num_blocks`` is the pool's size, null block
        included: ``block_manager.num_blocks``)."""
        warnings.warn(_OLD_NAME, DeprecationWarning, stacklevel=2)
        return self.num_usable_blocks

    def make_scheduler(self) -> Scheduler:
        """The scheduler with this engine's order and admission policy; the reserve-max baseline
        overrides this."""
        return Scheduler(self.block_manager, self.max_num_seqs, self.max_num_batched_tokens,
                         **self._scheduler_options)

    @property
    def metrics(self):
        return self.recorder.metrics

    # ---- requests ------------------------------------------------------------------------------
    def generate(self, prompts: Seq[Seq[int] | str], sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
                 *, use_tqdm: bool = True, **kwargs) -> list:
        """Generate for every prompt and return the outputs, in order.

        A prompt is a list of token ids, or a string when the engine has a ``tokenizer``; its output
        is alike: the generated token ids, or the decoded reply (ending before a ``stop`` string).
        Pass a :class:`SamplingParams` (one for all, or one per prompt) or its fields as keyword
        arguments (``max_new_tokens=32, temperature=0.8, stop=["\\n"], ...``). A request with
        ``n > 1`` gives a list of its ``n`` samples. Every request is checked before any work starts;
        a bad one raises ``ValueError`` and leaves the engine as it was.
        """
        ids = self._add_all(prompts, sampling_params, kwargs)
        with tqdm(total=len(ids), desc="requests", unit="req", disable=not use_tqdm) as bar:
            while self.scheduler.has_unfinished():
                bar.update(len(self.step()))
        return [self.pop_result(i) for i in ids]

    def stream(self, prompts: Seq[Seq[int] | str], sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
               **kwargs) -> Iterator[RequestOutput]:
        """:meth:`generate`, step by step: after every step, one :class:`RequestOutput` for each
        request that produced tokens in it, holding only the new ones (and their text, with a
        tokenizer), as vLLM's ``RequestOutput`` does with ``output_kind=DELTA``; the last one of a
        request has ``finished=True``. Its results are popped as it finishes. Closing the
        generator early aborts the requests still running."""
        ids = self._add_all(prompts, sampling_params, kwargs)
        index = {request_id: i for i, request_id in enumerate(ids)}
        try:
            while self.scheduler.has_unfinished():
                finished = set(self.step())
                for request_id in dict.fromkeys(s.request_id for s in self._produced):
                    if request_id not in index:          # a request added by someone else
                        continue
                    out = RequestOutput(request_id, index[request_id], self._new_outputs(request_id),
                                        request_id in finished)
                    if out.finished:
                        self.pop_result(request_id)
                        del index[request_id]
                    yield out
        finally:
            for request_id in list(index):               # closed early: nobody will read them
                if request_id in self._requests:
                    self.abort_request(request_id)
                    self.pop_result(request_id)

    def chat(self, messages: Seq[dict] | Seq[Seq[dict]], sampling_params: SamplingParams | None = None,
             *, use_tqdm: bool = False, **kwargs):
        """Reply to a chat (``[{"role": "system" | "user" | "assistant", "content": ...}, ...]``), or
        to each of a list of chats, through the tokenizer's chat template (the assistant's turn
        opened, as vLLM's ``LLM.chat``); returns the reply text (a list of them for a list). The reply
        ends at the tokenizer's end-of-turn token unless ``sampling_params`` says otherwise."""
        tokenizer = self._need_tokenizer("chat")
        many = bool(messages) and not isinstance(messages[0], dict)
        chats = list(messages) if many else [messages]
        prompts = [list(tokenizer.apply_chat_template(list(c), add_generation_prompt=True, return_dict=False))
                   for c in chats]
        if sampling_params is None:
            kwargs.setdefault("eos_token_id", tokenizer.eos_token_id)
            sampling_params = SamplingParams(**kwargs)
        elif kwargs:
            raise ValueError(f"pass either sampling_params or its fields as keywords, not both; got both "
                             f"and {sorted(kwargs)}")
        ids = self._add_all(prompts, sampling_params, {}, text=True)
        while self.scheduler.has_unfinished():
            self.step()
        replies = [self.pop_result(i) for i in ids]
        return replies if many else replies[0]

    def add_request(self, prompt: Seq[int] | str, params: SamplingParams | None = None, *, checked: bool = False,
                    cache_salt: Hashable = None) -> int:
        """Queue one request (it starts in a later :meth:`step`); returns its request id.
        ``cache_salt``: it shares prefix-cache blocks only with requests of the same salt."""
        self._check_usable()
        params = params or SamplingParams()
        text = isinstance(prompt, str)
        if not checked:
            prompt = self.check_request(0, prompt, params)
        request_id = next(self._request_ids)
        seed = params.seed if params.seed is not None else int(torch.randint(2**62, ()))
        request = self._requests[request_id] = _Request(request_id, params, seed, text)
        seq = self._new_sequence(request, list(prompt), 0)
        seq.num_samples = params.n                       # n seats now; forked into n once its prompt is computed
        seq.cache_salt = cache_salt
        self.recorder.arrived(request_id)
        self.scheduler.add(seq)
        return request_id

    def abort_request(self, request_id: int) -> None:
        """Stop a request now (its client went away), running or waiting: its blocks go back to the
        cache at once and it never runs again; every other request goes on as if it had never been
        there. Its output so far stays until :meth:`pop_result` returns it (the tokens, or text,
        generated before the abort; vLLM's aborted ``RequestOutput`` carries them too, with
        ``finish_reason="abort"``). Aborting a finished request changes nothing; an unknown id is a
        ``KeyError``."""
        request = self._request(request_id, "abort_request")
        if request.finished:
            return
        for seq in request.samples:
            if seq.status is not Status.FINISHED:
                self.scheduler.abort(seq)
                request.finish_reasons[seq.seq_id] = "abort"
        request.aborted = True

    def pop_result(self, request_id: int):
        """The output of a finished or aborted request (its ``n`` samples if ``n > 1``; text if its
        prompt was text), forgotten afterwards; its
        :class:`~pagedlib.engine.metrics.RequestMetrics` joins ``metrics["requests"]``. A request
        that has not finished yet is a ``ValueError`` (it goes on); an unknown id a ``KeyError``."""
        request = self._request(request_id, "pop_result")
        if not request.finished:
            raise ValueError(f"pop_result({request_id}): request {request_id} has not finished yet; call "
                             "step() until it is among the ids a step returns (generate() does this), "
                             "or abort_request() it")
        del self._requests[request_id]
        samples = request.samples
        outputs = [s.output for s in samples]
        self.recorder.finished(request_id, len(samples[0].prompt), max(map(len, outputs)),
                               sum(s.num_preemptions for s in samples))
        if request.text:
            outputs = [self._text(request, s)[0] for s in samples]
        return outputs[0] if len(outputs) == 1 else outputs

    def _request(self, request_id: int, op: str) -> _Request:
        try:
            return self._requests[request_id]
        except (KeyError, TypeError):
            raise KeyError(f"{op}({request_id!r}): no such request; it was never added, or its result "
                           "was popped already") from None

    def _add_all(self, prompts, sampling_params, kwargs: dict, text: bool | None = None) -> list[int]:
        """Check every prompt, then queue them all (generate's and stream's first half)."""
        self._check_usable()
        params = sampling_params_for(prompts, sampling_params, kwargs)
        checked = [self.check_request(i, prompt, p) for i, (prompt, p) in enumerate(zip(prompts, params))]
        self.reset_metrics()
        ids = [self.add_request(prompt, p, checked=True) for prompt, p in zip(checked, params)]
        for request_id, prompt in zip(ids, prompts):
            self._requests[request_id].text = isinstance(prompt, str) if text is None else text
        return ids

    def _new_sequence(self, request: _Request, prompt: list[int], index: int) -> SeqState:
        seq = SeqState(seq_id=next(self._seq_ids), request_id=request.request_id, prompt=prompt,
                       params=request.params)
        request.samples.append(seq)
        request.generators[seq.seq_id] = self._generator(request, index)
        return seq

    @staticmethod
    def _generator(request: _Request, index: int) -> torch.Generator | None:
        """Sample ``index`` of a request draws with its own generator seeded ``seed + index``."""
        return None if request.params.greedy else torch.Generator().manual_seed(request.seed + index)

    # ---- text ------------------------------------------------------------------------------------
    def _need_tokenizer(self, what: str):
        if self.tokenizer is None:
            raise ValueError(f"{what} needs a tokenizer: build the engine with LLM(model, ..., tokenizer=tokenizer) "
                             "(pagedlib.load_smollm2() returns one), or pass token ids")
        return self.tokenizer

    def _text(self, request: _Request, seq: SeqState) -> tuple[str, bool]:
        """The sample's reply decoded (special tokens skipped), cut before the first ``stop`` string;
        and whether one was found."""
        text = self.tokenizer.decode(seq.output, skip_special_tokens=True)
        cuts = [text.find(s) for s in request.params.stop]
        cuts = [c for c in cuts if c >= 0]
        return (text[:min(cuts)], True) if cuts else (text, False)

    def _new_outputs(self, request_id: int) -> list[CompletionOutput]:
        """Each sample's tokens (and text) since the stream last reported it."""
        request, outs = self._requests[request_id], []
        for index, seq in enumerate(request.samples):
            tokens_sent, chars_sent = request.sent.get(seq.seq_id, (0, 0))
            reason = request.finish_reasons.get(seq.seq_id)
            new = seq.output[tokens_sent:]
            if not new and reason is None:
                continue
            text = ""
            if self.tokenizer is not None:
                full, _ = self._text(request, seq)
                if reason is None:                       # hold back what may still change
                    hold = max((len(s) - 1 for s in request.params.stop), default=0)
                    full = full[:len(full) - hold] if hold else full
                    full = full[:len(full.rstrip("\ufffd"))]   # half a character: wait for the rest
                text = full[chars_sent:]
                chars_sent = max(chars_sent, len(full))
            request.sent[seq.seq_id] = (len(seq.output), chars_sent)
            outs.append(CompletionOutput(index, new, text, reason))
        return outs

    # ---- one step ------------------------------------------------------------------------------
    def step(self) -> list[int]:
        """Run one engine step; returns the ids of the requests that finished in it.

        If the step raises, it is undone before the exception propagates: every sequence scheduled
        in it goes back to wait, to be recomputed (nothing it generated is lost), and prefix-cache
        blocks registered in it are dropped, so the next ``step()`` goes on.
        """
        self._check_usable()
        start = time.perf_counter()
        scheduled = self.scheduler.schedule()
        try:
            return self._run(scheduled, start)
        except BaseException as exc:
            try:
                self.scheduler.undo(scheduled)
            except BaseException as undo_failure:
                self._failure = undo_failure
                raise EngineFailed(f"a step failed with {type(exc).__name__}: {exc}, and undoing it failed "
                                   f"too ({type(undo_failure).__name__}: {undo_failure}); the cache and "
                                   "queues are inconsistent, so build a new LLM (the model is unaffected)."
                                   ) from exc
            raise

    def _run(self, scheduled: ScheduledStep, start: float) -> list[int]:
        for src, dst in scheduled.copies:                # copy-on-write before anyone writes
            self.kv_cache.copy_block(src, dst)
        seqs = scheduled.seqs
        if not seqs and not self.scheduler.running and self.scheduler.waiting and not scheduled.preempted:
            head = self.scheduler.waiting[0]
            raise RuntimeError(f"request {head.request_id} cannot be admitted even into an empty cache "
                               f"({len(head)} tokens, {head.num_samples} seats); the admission rule "
                               "(can_admit) or check_request should have refused it")
        sampled: list[tuple[SeqState, int | None]] = []  # (sequence, or its parent and a new sample's index)
        if seqs:
            batch = build_batch(seqs, scheduled.num_new_tokens, self.block_manager, self.model.device)
            logits = self.model(batch, self.kv_cache)    # [num_seqs, vocab_size]: each one's last token
            rows, params, generators = [], [], []
            for row, seq in enumerate(seqs):
                if not seq.all_computed:                 # its chunk ends before its last token
                    continue
                request = self._requests[seq.request_id]
                todo = [(seq, None, request.generators[seq.seq_id])] + [  # n samples, forked after sampling
                    (seq, j, self._generator(request, j)) for j in range(1, seq.num_samples)]
                for parent, j, generator in todo:
                    sampled.append((parent, j))
                    rows.append(row)
                    params.append(seq.params)
                    generators.append(generator)
            tokens = sample_rows(logits, rows, params, generators)
            samples = []
            for (seq, j), generator, token in zip(sampled, generators, tokens):
                if j is not None:                        # a new sample: it shares its parent's blocks
                    seq = self._fork(seq, j, generator)
                seq.output.append(token)
                samples.append(seq)
        else:
            samples = []
        now = time.perf_counter()
        for seq in scheduled.admitted:
            self.recorder.admitted(seq.request_id, seq.num_cached_tokens)
        self.recorder.produced({s.request_id for s in samples}, now)
        self._record(scheduled, len(samples), now - start)
        self._produced = samples
        return self._retire(samples)

    def _fork(self, parent: SeqState, index: int, generator) -> SeqState:
        child = SeqState(seq_id=next(self._seq_ids), request_id=parent.request_id, prompt=parent.prompt,
                         params=parent.params)             # forked at its first token: no output yet
        request = self._requests[parent.request_id]
        request.samples.append(child)
        request.generators[child.seq_id] = generator
        self.scheduler.fork(parent, child)
        return child

    def _finish_reason(self, seq: SeqState) -> str | None:
        """Why the sequence stops after its last token (None: it goes on). ``"stop"``: the end token,
        a stop token or a stop string; ``"length"``: ``max_new_tokens``."""
        p, last = seq.params, seq.output[-1]
        if last == p.eos_token_id or last in p.stop_token_ids:
            return "stop"
        if p.stop and self._text(self._requests[seq.request_id], seq)[1]:
            return "stop"
        return "length" if len(seq.output) >= p.max_new_tokens else None

    def _retire(self, seqs: list[SeqState]) -> list[int]:
        """Finish the sequences that are done; return the requests all of whose samples are done."""
        done_requests = []
        for seq in seqs:
            reason = self._finish_reason(seq)
            if reason is not None:
                self.scheduler.finish(seq)
                request = self._requests[seq.request_id]
                request.finish_reasons[seq.seq_id] = reason
                if request.finished:
                    done_requests.append(seq.request_id)
        return done_requests

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise EngineFailed(
                f"this LLM can no longer be used: undoing a failed step() failed with "
                f"{type(self._failure).__name__}: {self._failure}, so its cache and queues are "
                "inconsistent; build a new LLM (the model and its weights are unaffected).") from self._failure

    # ---- checks ----------------------------------------------------------------------------------
    def check_request(self, index: int, prompt, params: SamplingParams) -> list[int]:
        """Refuse, with a ``ValueError`` saying why, a request that cannot run; return its token ids
        (see :func:`pagedlib.engine.request_checks.check_request`). A string prompt is tokenized
        (the engine needs a ``tokenizer``), and so does a request with ``stop`` strings."""
        if isinstance(prompt, str):
            prompt = self._need_tokenizer(f"prompts[{index}], a string,").encode(prompt)
        if params.stop:
            self._need_tokenizer(f"prompts[{index}]: stop={list(params.stop)!r}")
        bad = [t for t in params.stop_token_ids if t >= self.model.vocab_size]
        if bad:
            raise ValueError(f"stop_token_ids has {bad[0]}, outside the vocabulary [0, {self.model.vocab_size}).")
        tokens = check_request(index, prompt, params, vocab_size=self.model.vocab_size,
                               context_length=self.model.context_length, block_size=self.block_size,
                               num_usable_blocks=self.num_usable_blocks, max_num_seqs=self.max_num_seqs)
        admission = self._scheduler_options["admission"]
        need = params.n * cdiv(len(tokens) + params.max_new_tokens, self.block_size)
        if admission != "on_demand" and need > self.num_usable_blocks:
            raise ValueError(f"prompts[{index}]: admission={admission!r} charges each of its n = {params.n} "
                             f"samples its longest, {need} blocks in all, more than the cache's "
                             f"{self.num_usable_blocks}, so it could never be admitted; raise num_usable_blocks "
                             "or lower n or max_new_tokens.")
        return tokens

    # ---- metrics ---------------------------------------------------------------------------------
    def reset_metrics(self) -> None:
        """Start counting afresh (``generate`` does this); nothing in the engine changes."""
        self.recorder.reset()

    def step_record(self, **fields) -> StepRecord:
        """The history row of the step just run. A subclass may return a richer record (the
        reserve-max baseline adds its reserved blocks)."""
        return StepRecord(**fields)

    def _record(self, scheduled: ScheduledStep, tokens_sampled: int, seconds: float) -> None:
        """Count this step and append it to the history (measured before retiring)."""
        bm, running = self.block_manager, self.scheduler.running
        self.recorder.step(self.step_record(
            step=self.metrics.steps + 1, running=len(running), waiting=len(self.scheduler.waiting),
            blocks_used=bm.num_used_blocks,
            logical_blocks=sum(cdiv(bm.num_tokens(s.seq_id), self.block_size) for s in running),  # unshared
            preempted=len(scheduled.preempted), prefill_tokens=sum(scheduled.prefill_chunks),
            decode_tokens=len(scheduled.decodes), seconds=seconds), tokens_sampled)
