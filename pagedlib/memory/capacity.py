"""Capacity math: how big the KV cache is, and how many requests fit it (chapters 1, 2, 4 and 12).

Every token a model has seen leaves a key and a value vector in every layer. For the plain shape their
size per token is ``2 * layers * kv_heads * head_dim * dtype_bytes`` (:attr:`ModelSpec.kv_bytes_per_token`);
sliding windows, MLA latents, hybrid fixed state, the KV dtype and tensor parallelism change it, and
:meth:`ModelSpec.kv_bytes` counts what a sequence of a given length really keeps (per GPU);
:func:`requests_that_fit` divides a GPU's budget by it. How many requests fit a GPU then depends on
how the cache is laid out:

- *reserve-max* (:func:`reserve_max_plan`): every request gets one contiguous slot of ``max_len``
  tokens, because its final length is unknown (:func:`reserve_max_slots`, the rule every reserve-max
  in the course uses). Short replies leave most of the slot as padding.
- *paged* (:func:`paged_plan`): the cache is cut into blocks (pages) of ``block_size`` tokens and a
  request holds only the whole blocks it fills (:func:`blocks_for`), so it wastes less than one block.

A :class:`Plan` reports the token slots used and allocated, the waste and the capacity of a pool.
:func:`usable_memory` is the one rule for how much of a GPU an engine takes (:data:`GPU_MEMORY_UTILIZATION`);
:func:`blocks_for_gpu` turns that into a number of KV blocks the way serving engines do.

>>> lengths = [512, 37, 1900, 128, 4]
>>> reserve_max_plan(lengths, max_len=2048).capacity(40_960), paged_plan(lengths, 16).capacity(40_960)
(20, 78)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Sequence

from ..output import TableView
from ..validation import as_int, cdiv, nonnegative_int, positive_int

__all__ = ["blocks_for", "next_pow2", "reserve_max_slots", "PlanRow", "Plan", "reserve_max_plan", "paged_plan",
           "ModelSpec",
           "MODELS", "SMOLLM2_135M", "model_spec", "requests_that_fit", "requests_per_group", "kv_budget", "GPU", "GPUS", "BLACKWELL_GPUS", "gpu_spec", "PEAK_BANDWIDTH_GBS", "PEAK_FP16_TFLOPS",
           "GPU_MEMORY_UTILIZATION", "usable_memory",
           "blocks_for_gpu", "GiB", "KiB"]

KiB = 1024
GiB = 1024 ** 3


# ---- blocks ------------------------------------------------------------------------------------
def blocks_for(num_tokens: int, block_size: int) -> int:
    """Whole blocks needed to hold ``num_tokens`` tokens: ``ceil(num_tokens / block_size)``.

    A partly filled last block still counts as a block: ``blocks_for(37, 16) == 3`` (48 slots for 37
    tokens). Zero tokens need zero blocks.
    """
    block = positive_int("block_size", block_size, "tokens")
    return cdiv(nonnegative_int("num_tokens", num_tokens), block)


def next_pow2(n: int) -> int:
    """The smallest power of two that is ``>= n`` (``n >= 1``): the size a power-of-two reservation
    (the paper's Orca Pow2, a buddy allocator) rounds ``n`` tokens up to."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    return 1 << (n - 1).bit_length()


def reserve_max_slots(length: int, max_len: int) -> int:
    """Reserve-max's rule: the token slots a request of ``length`` tokens (prompt + output) reserves
    at admission: always ``max_len``, since its final length is unknown. A request longer than
    ``max_len`` never fits its slot: a ``ValueError``. Every reserve-max of the course applies this
    one rule (the plans here, chapter 2's allocator, the engine's baseline, the simulator's Orca Max).
    """
    if length > max_len:
        raise ValueError(f"length={length} tokens is longer than max_len={max_len}; raise max_len or "
                         "shorten the request")
    return max_len


# ---- plans -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanRow:
    """One request in a :class:`Plan`.

    ``length`` tokens of real K/V sit in ``allocated`` slots. The unused slots are either the tail of
    the last block (``tail``, paged plans) or the padding of a reserved slot (``padding``, reserve-max).
    ``blocks`` is the number of blocks (1 slot of ``max_len`` for reserve-max).
    """
    request: str
    length: int
    blocks: int
    allocated: int
    tail: int = 0
    padding: int = 0

    @property
    def wasted(self) -> int:
        """Allocated but unused slots of this request (``allocated - length``)."""
        return self.allocated - self.length


@dataclass(frozen=True)
class Plan:
    """How a batch of requests is laid out in a KV cache, and what that costs.

    ``kind`` is ``"reserve-max"`` (``unit`` = ``max_len``, the slot per request) or ``"paged"``
    (``unit`` = ``block_size``). ``rows`` has one :class:`PlanRow` per request; ``table()`` gives them
    as dicts for display. All sizes are in token slots; multiply by
    :attr:`ModelSpec.kv_bytes_per_token` for bytes.
    """
    kind: str
    unit: int
    rows: list[PlanRow] = field(repr=False)

    @property
    def lengths(self) -> list[int]:
        """The requests' lengths in tokens."""
        return [r.length for r in self.rows]

    @property
    def n_requests(self) -> int:
        return len(self.rows)

    @property
    def used(self) -> int:
        """Token slots holding real K/V."""
        return sum(r.length for r in self.rows)

    @property
    def allocated(self) -> int:
        """Token slots reserved for the requests (used plus wasted)."""
        return sum(r.allocated for r in self.rows)

    @property
    def waste(self) -> float:
        """Fraction of the allocated slots that hold nothing: ``1 - used / allocated``."""
        return 1 - self.used / self.allocated if self.allocated else 0.0

    @property
    def num_blocks(self) -> int:
        """Blocks in all block tables together (reserve-max: one slot per request)."""
        return sum(r.blocks for r in self.rows)

    def capacity(self, pool_slots: int) -> int:
        """How many requests of this mix fit a pool of ``pool_slots`` token slots.

        ``floor(pool_slots / (allocated / n_requests))``: the pool divided by the average allocation
        per request, computed in exact integers.
        """
        pool = nonnegative_int("pool_slots", pool_slots)
        if not self.rows or self.allocated == 0:
            raise ValueError("capacity needs a plan with at least one request of length >= 1")
        return pool * self.n_requests // self.allocated

    def table(self) -> list[dict]:
        """The rows as a list of dicts (request, length, blocks, allocated, tail, padding)."""
        return [asdict(r) for r in self.rows]

    def text(self) -> str:
        """The rows and the totals as an aligned text table."""
        head = ["request", "len", "blocks" if self.kind == "paged" else "slots", "alloc",
                "tail waste" if self.kind == "paged" else "padding"]
        body = [[r.request, r.length, r.blocks, r.allocated, r.tail if self.kind == "paged" else r.padding]
                for r in self.rows]
        body.append(["total", self.used, self.num_blocks, self.allocated, self.allocated - self.used])
        summary = (f"{self.kind} ({'max_len' if self.kind == 'reserve-max' else 'block_size'}="
                   f"{self.unit}): waste {self.waste:.1%}")
        return TableView(body, head, caption=summary).text()

    def __str__(self) -> str:
        return self.text()


def _check_lengths(lengths: Sequence[int]) -> list[int]:
    checked = [nonnegative_int(f"lengths[{i}]", n, "tokens") for i, n in enumerate(lengths)]
    if not checked:
        raise ValueError("lengths must hold at least one request length")
    return checked


def reserve_max_plan(lengths: Sequence[int], max_len: int) -> Plan:
    """The naive layout: each request reserves one contiguous slot of ``max_len`` tokens.

    The slot is sized for the longest possible reply because the real length is unknown up front;
    what the request does not fill is padding. A length above ``max_len`` is a ``ValueError``.
    """
    lengths = _check_lengths(lengths)
    max_len = positive_int("max_len", max_len)
    rows, too_long = [], []
    for i, n in enumerate(lengths):
        try:
            slot = reserve_max_slots(n, max_len)
        except ValueError:
            too_long.append(n)
            continue
        rows.append(PlanRow(f"r{i + 1}", n, 1, slot, padding=slot - n))
    if too_long:
        raise ValueError(f"lengths holds requests of {too_long} tokens, which do not fit a "
                         f"max_len={max_len} slot; raise max_len or shorten them")
    return Plan("reserve-max", max_len, rows)


def paged_plan(lengths: Sequence[int], block_size: int) -> Plan:
    """The paged layout: each request holds ``blocks_for(length, block_size)`` whole blocks.

    The only waste is the unused tail of each request's last block, at most ``block_size - 1`` tokens.
    """
    lengths = _check_lengths(lengths)
    block_size = positive_int("block_size", block_size, "tokens")
    rows = []
    for i, n in enumerate(lengths):
        blocks = blocks_for(n, block_size)
        rows.append(PlanRow(f"r{i + 1}", n, blocks, blocks * block_size, tail=blocks * block_size - n))
    return Plan("paged", block_size, rows)


# ---- models ------------------------------------------------------------------------------------
def _exact(x: float) -> Fraction:
    """A byte size such as 2, 1 (fp8) or 0.5 (4-bit) as an exact fraction."""
    return Fraction(x).limit_denominator(64)


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a transformer's KV cache, and its parameter count.

    The plain shape: every layer caches one key and one value vector per KV head per token.
    ``num_kv_heads`` below ``num_heads`` means grouped-query attention (GQA): several query heads read
    one K/V head, so the cache shrinks by ``num_heads / num_kv_heads``. ``dtype_bytes`` is the size of
    one element of the weights and, unless ``kv_dtype_bytes`` says otherwise, of the cache.

    Today's models break the plain shape in five ways, each a field here:

    - ``sliding_window`` / ``num_sliding_layers``: that many layers attend only to the last
      ``sliding_window`` tokens, so they keep at most that many tokens (Mistral-7B v0.1: all 32 layers,
      4,096 tokens; Gemma 3: 5 local layers to 1 global; gpt-oss: every other layer, 128 tokens).
      ``None`` layers with a window set means all of them.
    - ``kv_latent_dim``: multi-head latent attention (MLA, DeepSeek-V3) caches one compressed vector
      of that many elements per token per layer, shared by K and V and by all heads.
    - ``num_state_layers`` / ``state_bytes_per_layer``: hybrids whose linear-attention or Mamba layers
      keep a fixed-size state per sequence instead of per-token K/V.
    - ``kv_dtype_bytes``: the cache in fp8 (1) or 4 bits (0.5) while the weights keep ``dtype_bytes``.
    - ``tensor_parallel_size``: the model split over that many GPUs. KV heads are sharded over them
      until there are more GPUs than KV heads, then each GPU keeps one head (replicated); an MLA latent
      is replicated on every GPU. Every byte figure of a spec is **per GPU**.
    - ``dp_attention``: data-parallel attention over the same ``tensor_parallel_size`` GPUs (SGLang's
      ``--enable-dp-attention``): each GPU runs attention, and keeps the cache, for its own requests
      only (all KV heads, or the whole MLA latent), while the other layers stay sharded. The
      attention layers' weights (``attention_weights_size`` bytes) are then whole on every GPU.

    ``weights_size`` is the checkpoint's size when it is not ``num_params * dtype_bytes`` (quantised
    weights). Use :meth:`replace` for variants: ``spec.replace(kv_dtype_bytes=1)``.
    """
    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_params: int
    max_len: int
    dtype_bytes: int = 2
    kv_dtype_bytes: float | None = None
    sliding_window: int | None = None
    num_sliding_layers: int | None = None
    kv_latent_dim: int | None = None
    num_state_layers: int = 0
    state_bytes_per_layer: int = 0
    tensor_parallel_size: int = 1
    weights_size: int | None = None
    attention_weights_size: int = 0
    dp_attention: bool = False

    def __post_init__(self):
        if self.kv_dtype_bytes is not None and not self.kv_dtype_bytes > 0:
            raise ValueError(f"kv_dtype_bytes must be > 0 (2 for fp16, 1 for fp8, 0.5 for 4-bit); "
                             f"got {self.kv_dtype_bytes!r}")
        if not 0 <= self.num_state_layers < self.num_layers:
            raise ValueError(f"num_state_layers must be in [0, num_layers) (at least one attention layer); "
                             f"got {self.num_state_layers} of {self.num_layers}")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1 token or None; got {self.sliding_window!r}")
        if self.num_sliding_layers is not None and not 0 <= self.num_sliding_layers <= self.num_attention_layers:
            raise ValueError(f"num_sliding_layers must be in [0, {self.num_attention_layers}] (the attention "
                             f"layers); got {self.num_sliding_layers}")
        tp, heads = self.tensor_parallel_size, self.num_kv_heads
        if self.dp_attention and not 0 < self.attention_weights_size < self.total_weights_bytes:
            raise ValueError(f"dp_attention needs attention_weights_size: the bytes of the attention "
                             f"layers' weights (more than 0, less than all {self.total_weights_bytes:,}); "
                             f"got {self.attention_weights_size!r}")
        if tp < 1 or (self.kv_latent_dim is None and heads % tp and tp % heads):
            raise ValueError(f"tensor_parallel_size={tp} must divide num_kv_heads={heads} or be a multiple "
                             f"of it (KV heads are sharded over the GPUs, then replicated)")

    def replace(self, **changes) -> "ModelSpec":
        """A copy with some fields changed (``dataclasses.replace``), checked like a new spec."""
        return replace(self, **changes)

    # -- layer counts --
    @property
    def num_attention_layers(self) -> int:
        """Layers that cache per-token K/V (all but the fixed-state ones)."""
        return self.num_layers - self.num_state_layers

    @property
    def num_windowed_layers(self) -> int:
        """Attention layers that keep only the last ``sliding_window`` tokens (0 without a window)."""
        if self.sliding_window is None:
            return 0
        return self.num_attention_layers if self.num_sliding_layers is None else self.num_sliding_layers

    @property
    def num_global_layers(self) -> int:
        """Attention layers that keep every token (no window)."""
        return self.num_attention_layers - self.num_windowed_layers

    @property
    def is_uniform(self) -> bool:
        """True for the plain shape: ``2 * layers * kv_heads * head_dim * bytes`` per token, always."""
        return (self.num_windowed_layers == 0 and self.kv_latent_dim is None and self.num_state_layers == 0)

    # -- per GPU --
    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads one GPU keeps: sharded over ``tensor_parallel_size``, at least one (replicated);
        all of them under ``dp_attention`` (a GPU keeps its own requests' whole cache)."""
        if self.dp_attention:
            return self.num_kv_heads
        return max(1, self.num_kv_heads // self.tensor_parallel_size)

    @property
    def kv_element_bytes(self) -> float:
        """Bytes of one cached element: ``kv_dtype_bytes``, or the weights' ``dtype_bytes``."""
        return self.dtype_bytes if self.kv_dtype_bytes is None else self.kv_dtype_bytes

    @property
    def _kv_bytes(self) -> Fraction:
        return _exact(self.kv_element_bytes)

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        """Bytes one token adds to one attention layer on one GPU: ``2 * kv_heads * head_dim * bytes``,
        or ``kv_latent_dim * bytes`` for MLA."""
        elements = (self.kv_latent_dim if self.kv_latent_dim is not None
                    else 2 * self.kv_heads_per_gpu * self.head_dim)
        return math.ceil(elements * self._kv_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V for one token in all attention layers (one GPU), while the sequence is
        shorter than every window: ``2 * layers * kv_heads * head_dim * bytes`` for the plain shape.
        Past a window, use :meth:`kv_bytes` (windowed layers stop growing)."""
        return self.num_attention_layers * self.kv_bytes_per_token_per_layer

    @property
    def state_bytes_per_seq(self) -> int:
        """Bytes of fixed state one sequence keeps on one GPU, whatever its length (hybrid models;
        the state's heads are sharded like the KV heads, and kept whole under ``dp_attention``)."""
        shards = 1 if self.dp_attention else self.tensor_parallel_size
        return cdiv(self.num_state_layers * self.state_bytes_per_layer, shards)

    @property
    def total_weights_bytes(self) -> int:
        """Bytes of all the weights: ``weights_size``, or ``num_params * dtype_bytes``."""
        return self.num_params * self.dtype_bytes if self.weights_size is None else self.weights_size

    @property
    def weights_bytes(self) -> int:
        """Bytes of the weights on one GPU: :attr:`total_weights_bytes` split over
        ``tensor_parallel_size``; under ``dp_attention`` the attention layers' weights are whole on
        every GPU and only the rest is split."""
        if self.dp_attention:
            rest = self.total_weights_bytes - self.attention_weights_size
            return cdiv(rest, self.tensor_parallel_size) + self.attention_weights_size
        return cdiv(self.total_weights_bytes, self.tensor_parallel_size)

    @property
    def requests_share_gpus(self) -> bool:
        """True when every GPU of the group holds a part of every request's cache (tensor
        parallelism); False under ``dp_attention``, where each request lives on one GPU."""
        return not self.dp_attention

    def tokens_held(self, num_tokens: int) -> int:
        """Token entries the attention layers keep for a sequence of ``num_tokens``, summed over layers:
        global layers keep all, windowed layers at most ``sliding_window`` (engines free the blocks
        that fall out of the window; they may keep up to one block more)."""
        n = nonnegative_int("num_tokens", num_tokens)
        window = n if self.sliding_window is None else min(n, self.sliding_window)
        return self.num_global_layers * n + self.num_windowed_layers * window

    def kv_bytes(self, num_tokens: int, batch_size: int = 1) -> int:
        """KV-cache bytes (one GPU) of ``batch_size`` sequences of ``num_tokens`` tokens each: the
        tokens every layer keeps, plus each sequence's fixed state."""
        per_seq = self.tokens_held(num_tokens) * self.kv_bytes_per_token_per_layer + self.state_bytes_per_seq
        return batch_size * per_seq

    def kv_bytes_per_token_at(self, num_tokens: int) -> float:
        """Average bytes per token of one sequence of ``num_tokens`` (falls past a window)."""
        return self.kv_bytes(num_tokens) / num_tokens

    def block_bytes(self, block_size: int) -> int:
        """Bytes of one KV block of ``block_size`` tokens (K and V, all attention layers, one GPU)."""
        return block_size * self.kv_bytes_per_token


# Published configurations (the ``config.json`` of each model on Hugging Face: sourced constants);
# KV cached in the weights' dtype (2 bytes) unless a variant says otherwise.
MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    ModelSpec("gpt2", 12, 12, 12, 64, 124_439_808, 1024),                  # 36 KiB per token
    ModelSpec("opt-13b", 40, 40, 40, 128, 12_853_000_000, 2048),           # 800 KiB per token
    ModelSpec("llama-2-7b", 32, 32, 32, 128, 6_738_415_616, 4096),         # 512 KiB per token
    ModelSpec("llama-2-13b", 40, 40, 40, 128, 13_015_864_320, 4096),       # 800 KiB per token
    ModelSpec("llama-3-8b", 32, 32, 8, 128, 8_030_261_248, 8192),          # 128 KiB per token (GQA)
    ModelSpec("llama-3-70b", 80, 64, 8, 128, 70_553_706_496, 8192),        # 320 KiB per token (GQA)
    # v0.1: every layer attends to the last 4,096 tokens ("sliding_window": 4096), so past 4,096
    # tokens its cache stops growing although max_position_embeddings is 32,768
    ModelSpec("mistral-7b-v0.1", 32, 32, 8, 128, 7_241_732_096, 32768, sliding_window=4096),
    # today's shapes
    ModelSpec("llama-3.1-8b", 32, 32, 8, 128, 8_030_261_248, 131_072),     # 128 KiB per token (GQA)
    ModelSpec("qwen3-8b", 36, 32, 8, 128, 8_200_000_000, 40_960),          # 144 KiB per token; 8.2B (card)
    # "sliding_window": 1024, "sliding_window_pattern": 6: layers 6, 12, ..., 60 global, 52 local
    ModelSpec("gemma-3-27b", 62, 32, 16, 128, 27_400_000_000, 131_072, sliding_window=1024,
              num_sliding_layers=52),
    # "layer_types": sliding/full alternating over 36 layers, "sliding_window": 128; MXFP4 experts:
    # a 60.8 GiB checkpoint for 116.8B parameters (its model card)
    ModelSpec("gpt-oss-120b", 36, 64, 8, 64, 116_800_000_000, 131_072, sliding_window=128,
              num_sliding_layers=18, weights_size=round(60.8 * 1024 ** 3)),
    # MLA: "kv_lora_rank": 512 + "qk_rope_head_dim": 64 per token per layer; fp8 weights (1 byte a
    # parameter; scales left out)
    # Its attention weights, per layer: q_a 7168x1536, q_b 1536x(128 heads x 192), kv_a 7168x(512+64),
    # kv_b 512x(128 x 256), o 16384x7168, 187,107,328 parameters (norms left out), in fp8: 61 layers
    # make 11.4 GB, which data-parallel attention keeps whole on every GPU
    ModelSpec("deepseek-v3", 61, 128, 128, 192, 671_000_000_000, 163_840, kv_latent_dim=512 + 64,
              weights_size=671_000_000_000, attention_weights_size=61 * 187_107_328),
    # hybrid: "full_attention_interval": 4 over 48 layers, so 36 Gated DeltaNet layers, each with a
    # state of 32 value heads x 128 x 128 plus a 3-step convolution over 2x16x128 + 32x128 channels,
    # counted in bf16 (an engine may keep the recurrent state in fp32: vLLM's mamba_ssm_cache_dtype)
    ModelSpec("qwen3-coder-next", 48, 16, 2, 256, 79_674_391_296, 262_144, num_state_layers=36,
              state_bytes_per_layer=(32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3) * 2),
]}

# The course's real chat model (chapters 7, 10, 11 and 13; pagedlib.models.smollm2), from its
# config.json: 30 layers, 9 query and 3 K/V heads of 64, 134,515,008 parameters (embedding tied to
# the head). Kept out of MODELS, the table of chapter 1; its K/V counted in fp16 (2 bytes), as a GPU
# serves it.
SMOLLM2_135M = ModelSpec("smollm2-135m", 30, 9, 3, 64, 134_515_008, 8192)   # 22.5 KiB per token


def kv_budget(model: "ModelSpec | str", gpu: int | str, utilization: float | None = None,
              activation_bytes: int = 0) -> int:
    """Bytes one GPU has left for the KV cache: the engine's share (:func:`usable_memory`) less the
    weights on that GPU (:attr:`ModelSpec.weights_bytes`) and ``activation_bytes``; 0 when the
    weights do not fit."""
    spec = model_spec(model)
    utilization = GPU_MEMORY_UTILIZATION if utilization is None else utilization
    return max(usable_memory(gpu, utilization) - spec.weights_bytes - activation_bytes, 0)


def requests_that_fit(model: "ModelSpec | str", gpu: int | str, seq_len: int,
                      utilization: float | None = None, activation_bytes: int = 0) -> int:
    """How many sequences of ``seq_len`` tokens keep their whole cache on ``gpu`` at once: the
    :func:`kv_budget` over one sequence's :meth:`ModelSpec.kv_bytes` at that length. Windows,
    latents, fixed state, KV dtype and tensor parallelism all follow from the spec (per GPU). Under
    tensor parallelism every GPU holds a part of each of these sequences, so the count is also the
    group's; under ``dp_attention`` it is one GPU's (see :func:`requests_per_group`)."""
    spec = model_spec(model)
    positive_int("seq_len", seq_len, "tokens")
    if seq_len > spec.max_len:
        raise ValueError(f"seq_len={seq_len:,} is past {spec.name}'s max_len={spec.max_len:,}; "
                         f"ask for at most max_len tokens")
    return kv_budget(spec, gpu, utilization, activation_bytes) // spec.kv_bytes(seq_len)


def requests_per_group(model: "ModelSpec | str", gpu: int | str, seq_len: int,
                       utilization: float | None = None, activation_bytes: int = 0) -> int:
    """Sequences of ``seq_len`` tokens the whole group of ``tensor_parallel_size`` GPUs holds at
    once: :func:`requests_that_fit` under tensor parallelism (each sequence is spread over every
    GPU), that many times the group size under ``dp_attention`` (each GPU holds its own)."""
    spec = model_spec(model)
    per_gpu = requests_that_fit(spec, gpu, seq_len, utilization, activation_bytes)
    return per_gpu if spec.requests_share_gpus else per_gpu * spec.tensor_parallel_size


# ---- GPUs --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GPU:
    """A GPU model and the memory a program can really use on it.

    ``memory_bytes`` is what PyTorch reports as the device's total
    (``torch.cuda.mem_get_info()[1]``, the figure in its out-of-memory messages), which is what a
    serving engine multiplies by its memory-utilisation fraction. It is less than the box says:
    ``nvidia_smi_mib`` is the total ``nvidia-smi`` prints, and the driver keeps a few hundred MiB of
    that for itself (ECC and reserved memory). ``sold_as`` is the marketing name, in decimal GB.
    """
    name: str
    memory_bytes: int
    nvidia_smi_mib: int | None       # None: not read (the datasheet rows, BLACKWELL_GPUS)
    sold_as: str

    @property
    def memory_gib(self) -> float:
        """Usable memory in GiB (2**30 bytes)."""
        return self.memory_bytes / GiB


def _gib(x: float) -> int:
    return round(x * GiB)


# Usable capacities. ``memory_bytes``: the "total capacity" that PyTorch's CUDA out-of-memory messages
# report for each GPU in public bug reports (to 0.01 GiB; recent drivers reserve a little more than
# old ones, e.g. a T4 read 14.75 GiB on 2022-23 Colab drivers and 14.56 GiB on 2025-26 ones: we keep
# the current figure). ``nvidia_smi_mib``: the Memory-Usage total that nvidia-smi prints for the same
# GPU. Two rows are derived, not read: the L4 (nvidia-smi's 23,034 MiB less the 0.44 GiB that the
# driver keeps on a T4, also GDDR6) and the H200 (nvidia-smi's 143,771 MiB less about 0.6 GiB, a little
# more than the 0.54 GiB it keeps on an H100). Measure yours with ``torch.cuda.mem_get_info()``.
# Sources: the "GPU 0 has a total capacity of ..." lines of public PyTorch OOM reports (T4 14.56 GiB,
# A10G 22.20, A100-40GB 39.39, A100-80GB 79.25, H100-80GB 79.11) and nvidia-smi printouts in the same
# kind of reports; tests/test_capacity.py checks that every row sits below its nvidia-smi total.
GPUS: dict[str, GPU] = {g.name: g for g in [
    GPU("T4", _gib(14.56), 15_360, "16 GB"),          # Colab's free GPU; 14.75 GiB on older drivers
    GPU("L4", _gib(22.05), 23_034, "24 GB"),          # derived (see above)
    GPU("A10G", _gib(22.20), 23_028, "24 GB"),
    GPU("A100-40GB", _gib(39.39), 40_960, "40 GB"),   # the PagedAttention paper's OPT-13B GPU
    GPU("A100-80GB", _gib(79.25), 81_920, "80 GB"),
    GPU("H100-80GB", _gib(79.11), 81_559, "80 GB"),
    GPU("H200", _gib(139.81), 143_771, "141 GB"),     # derived (see above)
]}

# Blackwell GPUs (2025-26 deployments), from NVIDIA's datasheets (pagedlib.facts, "blackwell_gpus").
# No nvidia-smi total is recorded for them here. The B200's usable figure is measured: 178.35 GiB,
# the device total that CUDA reports in pytorch/ao#4002 (March 2026). NVIDIA's HBM "GB" is close to
# a GiB (the H200's 141 GB shows as 140.4 GiB in nvidia-smi), so the GB200 and the B300 rows are
# derived: the datasheet figure times the B200's measured ratio, 178.35 / 180.
_B200_RATIO = 178.35 / 180
BLACKWELL_GPUS: dict[str, GPU] = {g.name: g for g in [
    GPU("B200", _gib(178.35), None, "180 GB"),                  # HGX/DGX B200: 8 x 180 GB
    GPU("GB200", _gib(186 * _B200_RATIO), None, "186 GB"),      # GB200 NVL72: 13.4 TB / 72 GPUs
    GPU("B300", _gib(288 * _B200_RATIO), None, "288 GB"),       # Blackwell Ultra: HGX B300, 2.3 TB / 8
]}

# Peak DRAM bandwidth in GB/s (vendor datasheets), by the datasheets' names: the yardstick of a
# memory-bound kernel (chapters 8-9, pagedlib.bench.attention) and the linear step-cost model of the simulator
# (chapter 12, pagedlib.sim.timing).
PEAK_BANDWIDTH_GBS = {
    "T4": 320, "L4": 300, "A10G": 600, "A100 40GB": 1555, "A100 80GB": 2039,
    "H100 PCIe": 2000, "H100": 3350, "H200": 4800,
    "B200": 8000, "GB200": 8000, "B300": 8000,   # NVIDIA: 64 TB/s per 8 GPUs, 576 TB/s per 72
}
# Dense fp16 tensor-core TFLOP/s (vendor datasheets), for the compute side of both.
PEAK_FP16_TFLOPS = {"T4": 65, "A100 40GB": 312, "A100 80GB": 312, "H100": 989}

# The share of a GPU's memory a serving engine takes for weights, activations and the KV cache:
# vLLM's ``gpu_memory_utilization`` default, 0.92 since v0.21 (which also profiles the CUDA graphs'
# memory and subtracts it; before, the default was 0.9 and the graphs came out of the headroom).
# Every capacity in the course uses this one rule.
GPU_MEMORY_UTILIZATION = 0.92


def usable_memory(gpu: int | str, utilization: float = GPU_MEMORY_UTILIZATION) -> int:
    """Bytes an engine may use on ``gpu`` (a byte count or a key of :data:`GPUS`):
    ``int(memory * utilization)``, the budget that the weights, the activations and the KV cache share."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1]; got {utilization!r}")
    return int(_gpu_bytes(gpu) * utilization)


def blocks_for_gpu(model: ModelSpec | str, gpu_mem_bytes: int | str, block_size: int = 16,
                   utilization: float = GPU_MEMORY_UTILIZATION, weights_bytes: int | None = None,
                   activation_bytes: int = 0) -> int:
    """How many KV blocks of ``block_size`` tokens fit a GPU, as serving engines size their cache.

    The engine may use ``usable_memory(gpu_mem_bytes, utilization)`` of the memory; the weights
    (default: the model's :attr:`ModelSpec.weights_bytes`) and what the engine's profiling run
    measures besides them (``activation_bytes``: peak activations, non-torch memory that grew during
    the run, such as cuBLAS workspaces, and in vLLM v0.21+ the CUDA graphs' memory) come first, and
    what remains is cut into blocks of ``block_size * kv_bytes_per_token`` bytes (vLLM's
    ``num_gpu_blocks``). The CUDA context and the distributed (NCCL) setup exist before vLLM's
    baseline snapshot, so they sit in the ``1 - utilization`` headroom, not in ``activation_bytes``. ``model`` may be a :class:`ModelSpec` or a key of :data:`MODELS`,
    ``gpu_mem_bytes`` a byte count or a key of :data:`GPUS`. Returns 0 when the weights do not fit.
    """
    spec = model_spec(model)
    mem = _gpu_bytes(gpu_mem_bytes)
    positive_int("block_size", block_size, "tokens")
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1]; got {utilization!r}")
    if activation_bytes < 0:
        raise ValueError(f"activation_bytes must be >= 0; got {activation_bytes!r}")
    if weights_bytes is not None and weights_bytes < 0:
        raise ValueError(f"weights_bytes must be >= 0, or None for the model's own; got {weights_bytes!r}")
    weights = spec.weights_bytes if weights_bytes is None else weights_bytes
    budget = usable_memory(mem, utilization) - weights - activation_bytes
    return max(budget, 0) // spec.block_bytes(block_size)


def model_spec(model: ModelSpec | str) -> ModelSpec:
    """A ModelSpec, given one or a name in MODELS (a KeyError that lists the known names otherwise)."""
    if isinstance(model, ModelSpec):
        return model
    if model not in MODELS:
        raise KeyError(f"unknown model {model!r}; pick one of {sorted(MODELS)} or pass a ModelSpec")
    return MODELS[model]


def gpu_spec(name: str) -> GPU:
    """The :class:`GPU` called ``name``, in :data:`GPUS` or :data:`BLACKWELL_GPUS` (a KeyError that
    lists the known names otherwise)."""
    known = {**GPUS, **BLACKWELL_GPUS}
    if name not in known:
        raise KeyError(f"unknown GPU {name!r}; pick one of {list(known)} or pass a byte count")
    return known[name]


def _gpu_bytes(gpu: int | str) -> int:
    if isinstance(gpu, str):
        return gpu_spec(gpu).memory_bytes
    if as_int(gpu) is None or gpu <= 0:
        raise ValueError(f"gpu_mem_bytes must be a positive byte count or a GPU name; got {gpu!r}")
    return gpu
