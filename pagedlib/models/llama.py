"""The Llama family over the paged cache (chapter 10): what learners serve today.

Four changes from GPT-2 (``gpt2.py``), each a few lines here:

- **RMSNorm** instead of LayerNorm: scale by the root mean square, no mean, no bias;
- **rotary positions (RoPE)** instead of learned ones: q and k are rotated by an angle that grows
  with the token's position, *before* K is written to the cache, so a cached row never changes;
- **grouped-query attention (GQA)**: ``num_kv_heads`` K/V heads, each shared by
  ``num_heads // num_kv_heads`` query heads, so the cache is that many times smaller (the course's
  kernels read one K/V head for its whole group);
- **SwiGLU** MLP, ``down(silu(gate(x)) * up(x))``, and an output head that may be untied from the
  embeddings.

Qwen2 is the same layer with biases on q, k and v. :meth:`Llama.from_hf` copies a ``transformers``
``LlamaForCausalLM`` or ``Qwen2ForCausalLM``; the rope settings come from ``config.rope_parameters``
(``rope_type`` "default" or "llama3"; any other is refused by name).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from .. import runtime
from .layers import KVCache, KVShape, PagedAttention, PagedLM

if TYPE_CHECKING:
    from ..attention.metadata import PagedBatch

ROPE_TYPES = ("default", "llama3")
HEAD_DIMS = (16, 128)          # the head sizes tested end to end (the kernels allow up to 256)


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama-family model: the ``transformers`` config fields this model uses."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_layers: int = 32
    num_heads: int = 32
    num_kv_heads: int = 32
    head_dim: int = 128
    max_position_embeddings: int = 2048   # the context: at most this many tokens per sequence
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: tuple = ()       # llama3: (factor, low_freq_factor, high_freq_factor, original_max_positions)
    qkv_bias: bool = False         # Qwen2: True
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False


def rope_frequencies(config: LlamaConfig) -> torch.Tensor:
    """The rotation speed of each pair of dimensions, ``[head_dim // 2]`` (fp32, as transformers).

    "default": ``theta ** (-2i / head_dim)``. "llama3" (Llama 3.1 and later) keeps the fast
    (short-wavelength) ones, divides the slow ones by ``factor``, and blends in between, so a model
    trained on ``original_max_positions`` tokens reaches further.
    """
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if not config.rope_scaling:
        return inv_freq
    factor, low, high, old_context = config.rope_scaling
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return torch.where(medium, blended, scaled)


class RotaryEmbedding(nn.Module):
    """cos and sin of every position's angles, computed once for the whole context."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        positions = torch.arange(config.max_position_embeddings).float()
        angles = positions[:, None] * rope_frequencies(config)[None, :]   # [max_positions, head_dim / 2]
        angles = torch.cat([angles, angles], dim=-1)                      # [max_positions, head_dim]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) of the given positions, each ``[num_tokens, 1, head_dim]`` (one per batch)."""
        return self.cos[positions][:, None, :], self.sin[positions][:, None, :]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x [num_tokens, heads, head_dim]``: dimension i turns with dimension i + head_dim / 2."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class RMSNorm(nn.Module):
    """x / rms(x) * weight: the root mean square taken in fp32 (as transformers does), the result in
    x's dtype, then scaled."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class LlamaLayer(nn.Module):
    """One transformer layer: x + attn(norm(x)) with RoPE and GQA, then x + swiglu(norm(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        d, hd = config.hidden_size, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, hd
        self.input_norm = RMSNorm(d, config.rms_norm_eps)
        # q, k, v side by side: num_heads + 2 * num_kv_heads heads of head_dim
        self.qkv = nn.Linear(d, (config.num_heads + 2 * config.num_kv_heads) * hd, bias=config.qkv_bias)
        self.attn = PagedAttention()
        self.o_proj = nn.Linear(config.num_heads * hd, d, bias=config.o_bias)
        self.post_attention_norm = RMSNorm(d, config.rms_norm_eps)
        self.gate_up = nn.Linear(d, 2 * config.intermediate_size, bias=config.mlp_bias)   # gate, up
        self.down = nn.Linear(config.intermediate_size, d, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor], batch: PagedBatch,
                backend, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        num_tokens = x.shape[0]
        qkv = self.qkv(self.input_norm(x)).view(num_tokens, -1, self.head_dim)   # [num_tokens, heads, head_dim]
        qk, v = qkv.split([self.num_heads + self.num_kv_heads, self.num_kv_heads], dim=1)
        q, k = rotate(qk, *cos_sin).split([self.num_heads, self.num_kv_heads], dim=1)   # K is cached rotated
        out = self.attn(q, k, v, cache, batch, backend)             # [num_tokens, num_heads, head_dim]
        x = x + self.o_proj(out.reshape(num_tokens, -1))            # [num_tokens, hidden_size]
        gate, up = self.gate_up(self.post_attention_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(PagedLM):
    """A Llama-family model over a paged KV cache. Build it from ``transformers`` with
    :meth:`from_hf`; :class:`pagedlib.LLM` serves it as it serves :class:`pagedlib.GPT2`."""

    def __init__(self, config: LlamaConfig, backend: str | None = None):
        super().__init__(config, backend, context_length=config.max_position_embeddings,
                         vocab_size=config.vocab_size,
                         kv_shape=KVShape(config.num_layers, config.num_kv_heads, config.head_dim))
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rope = RotaryEmbedding(config)
        self.layers = nn.ModuleList(LlamaLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                          bias=False)

    @torch.inference_mode()
    def forward(self, batch: PagedBatch, kv_cache: KVCache) -> torch.Tensor:
        """Run the batch's new tokens through the model, writing their K/V into ``kv_cache``;
        return the logits of each sequence's last token, ``[num_seqs, vocab_size]`` (fp32)."""
        x = self.embed(batch.input_ids)                              # [num_tokens, hidden_size]
        cos_sin = self.rope(batch.positions)                         # each [num_tokens, 1, head_dim]
        for layer, cache, backend in zip(self.layers, kv_cache.layers, self.layer_backends(batch)):
            x = layer(x, cache, batch, backend, cos_sin)
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return self.last_logits(x, batch, self.norm, head)

    # ---- loading weights -------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf_model, backend: str | None = None, dtype: torch.dtype | None = None,
                device: torch.device | str | None = None) -> "Llama":
        """Copy the weights of a ``transformers`` ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` (any
        size, pretrained or random) into a paged Llama. ``dtype``/``device`` default to the
        runtime's (fp16 on a GPU, fp32 on a CPU). Refuses, with a ``ValueError`` naming the setting,
        what this model does not compute: another rope type, a sliding window, a head size outside
        16..128, an activation other than SiLU."""
        runtime.check_dtype(dtype or runtime.DTYPE)              # refuse before copying any weight
        config = config_from_hf(hf_model.config)
        model = cls(config, backend=backend)
        src = hf_model.model
        with torch.no_grad():
            model.embed.weight.copy_(src.embed_tokens.weight)
            model.norm.weight.copy_(src.norm.weight)
            if model.lm_head is not None:
                model.lm_head.weight.copy_(hf_model.lm_head.weight)
            for mine, theirs in zip(model.layers, src.layers):
                attn, mlp = theirs.self_attn, theirs.mlp
                mine.input_norm.weight.copy_(theirs.input_layernorm.weight)
                mine.post_attention_norm.weight.copy_(theirs.post_attention_layernorm.weight)
                _copy_fused(mine.qkv, [attn.q_proj, attn.k_proj, attn.v_proj])
                _copy_fused(mine.o_proj, [attn.o_proj])
                _copy_fused(mine.gate_up, [mlp.gate_proj, mlp.up_proj])
                _copy_fused(mine.down, [mlp.down_proj])
        return model.to(device=device or runtime.DEVICE, dtype=dtype or runtime.DTYPE).eval()


def _copy_fused(linear: nn.Linear, parts: list[nn.Linear]) -> None:
    """Copy ``parts`` (their outputs side by side) into one fused ``linear``."""
    linear.weight.copy_(torch.cat([p.weight for p in parts], dim=0))
    if linear.bias is not None:
        linear.bias.copy_(torch.cat([p.bias for p in parts], dim=0))


MODEL_TYPES = ("llama", "qwen2")   # transformers' LlamaForCausalLM and Qwen2ForCausalLM


def config_from_hf(hf) -> LlamaConfig:
    """A :class:`LlamaConfig` from a ``transformers`` ``LlamaConfig`` or ``Qwen2Config``; a
    ``ValueError`` that names the setting for anything this model would compute differently."""
    if hf.model_type not in MODEL_TYPES:
        raise ValueError(f"config.model_type {hf.model_type!r} is not a Llama-family model; pagedlib.Llama "
                         f"supports {list(MODEL_TYPES)} (pagedlib.from_hf picks the model for any supported one)")
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    if not HEAD_DIMS[0] <= head_dim <= HEAD_DIMS[1]:
        raise ValueError(f"head_dim {head_dim} is not supported; pagedlib.Llama runs head_dim "
                         f"{HEAD_DIMS[0]} to {HEAD_DIMS[1]}")
    if hf.hidden_act != "silu":
        raise ValueError(f"hidden_act {hf.hidden_act!r} is not supported; pagedlib.Llama runs 'silu' (SwiGLU)")
    if getattr(hf, "use_sliding_window", False) or getattr(hf, "sliding_window", None):
        raise ValueError(f"sliding_window {hf.sliding_window} is not supported: pagedlib.Llama attends to "
                         "every cached token (set use_sliding_window=False)")
    if (getattr(hf, "pretraining_tp", 1) or 1) != 1:
        raise ValueError(f"pretraining_tp {hf.pretraining_tp} is not supported; pagedlib.Llama needs 1")
    rope = dict(hf.rope_parameters or {})
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type {rope_type!r} (config.rope_parameters) is not supported; "
                         f"pagedlib.Llama supports {list(ROPE_TYPES)}")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"partial_rotary_factor {rope['partial_rotary_factor']} is not supported; "
                         "pagedlib.Llama rotates the whole head (1.0)")
    scaling = ()
    if rope_type == "llama3":
        scaling = (rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"],
                   rope["original_max_position_embeddings"])
    qwen = hf.model_type == "qwen2"
    return LlamaConfig(vocab_size=hf.vocab_size, hidden_size=hf.hidden_size,
                       intermediate_size=hf.intermediate_size, num_layers=hf.num_hidden_layers,
                       num_heads=hf.num_attention_heads, num_kv_heads=hf.num_key_value_heads,
                       head_dim=head_dim, max_position_embeddings=hf.max_position_embeddings,
                       rms_norm_eps=hf.rms_norm_eps, rope_theta=rope.get("rope_theta", 10000.0),
                       rope_scaling=scaling, qkv_bias=qwen or bool(getattr(hf, "attention_bias", False)),
                       o_bias=not qwen and bool(getattr(hf, "attention_bias", False)),
                       mlp_bias=bool(getattr(hf, "mlp_bias", False)),
                       tie_word_embeddings=bool(hf.tie_word_embeddings))
