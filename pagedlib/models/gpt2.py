"""GPT-2 whose attention reads and writes K/V only through the paged cache (chapter 10).

The transformer itself is the GPT-2 every course shows (token + position embeddings, ``n_layer``
pre-norm layers of attention and MLP, a final LayerNorm, an output head tied to the embeddings).
What is new is *where K/V live*: not in a ``[batch, heads, seq, dim]`` tensor per request, but in one
paged cache per layer, ``[num_blocks, block_size, n_head, head_dim]`` for K and for V, shared by every
request, each request finding its tokens through its block table.

The model runs on a *flat batch* (:class:`~pagedlib.attention.metadata.PagedBatch`): the new tokens of
every scheduled sequence, concatenated, with the slot each token's K/V goes to. One forward pass serves
a whole engine step, prefill chunks and decode tokens mixed. In every layer, each sequence's new tokens
(a prompt chunk, or one decode token: a chunk of length 1) first write their K/V, then attend causally
over the cached prefix and the chunk, through the model's attention backend.

That step lives in :class:`~pagedlib.models.layers.PagedAttention`, shared with the Llama family
(``pagedlib.models.llama``), as are the cache, the batch and the backend choice: ``"triton"`` (the course's
kernels: compiled on a GPU, through the interpreter on a CPU) or ``"torch"`` (the
whole batch in PyTorch, ``pagedlib.attention.torch_backend``). The default follows the runtime;
``GPT2(..., backend=...)`` or ``model.backend = ...`` overrides it. The model returns the logits of
each sequence's *last* token, the only ones the engine samples from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from .. import runtime
from .layers import KVCache, KVShape, PagedAttention, PagedLM

if TYPE_CHECKING:
    from ..attention.metadata import PagedBatch

__all__ = ["GPT2", "GPT2Config", "GPT2Layer"]


@dataclass(frozen=True)
class GPT2Config:
    """The shape of a GPT-2: the fields of ``transformers.GPT2Config`` this model uses."""

    vocab_size: int = 50257
    n_positions: int = 1024        # the context: at most this many tokens per sequence
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None     # MLP width; None means 4 * n_embd
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def _activation(name: str):
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: F.gelu(x, approximate="tanh")   # GPT-2's tanh approximation
    if name == "gelu":
        return F.gelu
    if name == "relu":
        return F.relu
    raise ValueError(f"activation_function {name!r} is not supported; use 'gelu_new', 'gelu' or 'relu'.")


class GPT2Layer(nn.Module):
    """One transformer layer: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, config: GPT2Config):
        super().__init__()
        d, inner = config.n_embd, config.n_inner or 4 * config.n_embd
        self.ln_1 = nn.LayerNorm(d, eps=config.layer_norm_epsilon)
        self.qkv = nn.Linear(d, 3 * d)          # q, k, v side by side
        self.attn = PagedAttention()
        self.attn_out = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=config.layer_norm_epsilon)
        self.fc = nn.Linear(d, inner)
        self.fc_out = nn.Linear(inner, d)
        self.act = _activation(config.activation_function)
        self.n_head, self.head_dim = config.n_head, config.head_dim

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor], batch: PagedBatch,
                backend) -> torch.Tensor:
        num_tokens = x.shape[0]
        qkv = self.qkv(self.ln_1(x)).view(num_tokens, 3, self.n_head, self.head_dim)
        q, k, v = qkv.unbind(1)                                  # each [num_tokens, n_head, head_dim]
        out = self.attn(q, k, v, cache, batch, backend)          # [num_tokens, n_head, head_dim]
        x = x + self.attn_out(out.reshape(num_tokens, -1))       # [num_tokens, n_embd]
        return x + self.fc_out(self.act(self.fc(self.ln_2(x))))


class GPT2(PagedLM):
    """GPT-2 over a paged KV cache. Build it from a ``transformers`` model with :meth:`from_hf`
    (or :meth:`from_pretrained`), make its cache with :meth:`make_kv_cache`, run it with
    :meth:`forward` on a :class:`PagedBatch`; :class:`pagedlib.LLM` does all of that for you."""

    def __init__(self, config: GPT2Config, backend: str | None = None):
        super().__init__(config, backend, context_length=config.n_positions, vocab_size=config.vocab_size,
                         kv_shape=KVShape(config.n_layer, config.n_head, config.head_dim))
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.layers = nn.ModuleList(GPT2Layer(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    @torch.inference_mode()
    def forward(self, batch: PagedBatch, kv_cache: KVCache) -> torch.Tensor:
        """Run the batch's new tokens through the model, writing their K/V into ``kv_cache``;
        return the logits of each sequence's last token, ``[num_seqs, vocab_size]`` (fp32)."""
        x = self.wte(batch.input_ids) + self.wpe(batch.positions)   # [num_tokens, n_embd]
        for layer, cache, backend in zip(self.layers, kv_cache.layers, self.layer_backends(batch)):
            x = layer(x, cache, batch, backend)
        return self.last_logits(x, batch, self.ln_f, self.wte.weight)   # head tied to the embeddings

    # ---- loading weights -------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf_model, backend: str | None = None, dtype: torch.dtype | None = None,
                device: torch.device | str | None = None) -> "GPT2":
        """Copy the weights of a ``transformers`` ``GPT2LMHeadModel`` (any size, pretrained or random)
        into a paged GPT2. ``dtype``/``device`` default to the runtime's (fp16 on a GPU, fp32 on a CPU)."""
        hf = hf_model.config
        runtime.check_dtype(dtype or runtime.DTYPE)              # refuse before copying any weight
        if getattr(hf, "scale_attn_by_inverse_layer_idx", False) or not getattr(hf, "scale_attn_weights", True):
            raise ValueError("hf_model.config must use GPT-2's standard attention scale "
                             "(scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False).")
        config = GPT2Config(vocab_size=hf.vocab_size, n_positions=hf.n_positions, n_embd=hf.n_embd,
                            n_layer=hf.n_layer, n_head=hf.n_head, n_inner=hf.n_inner,
                            layer_norm_epsilon=hf.layer_norm_epsilon,
                            activation_function=hf.activation_function)
        model = cls(config, backend=backend)
        src = hf_model.transformer
        with torch.no_grad():
            model.wte.weight.copy_(src.wte.weight)
            model.wpe.weight.copy_(src.wpe.weight)
            model.ln_f.load_state_dict(src.ln_f.state_dict())
            for mine, theirs in zip(model.layers, src.h):
                mine.ln_1.load_state_dict(theirs.ln_1.state_dict())
                mine.ln_2.load_state_dict(theirs.ln_2.state_dict())
                # transformers' Conv1D stores weights as [in, out]; nn.Linear wants [out, in]
                for linear, conv in ((mine.qkv, theirs.attn.c_attn), (mine.attn_out, theirs.attn.c_proj),
                                     (mine.fc, theirs.mlp.c_fc), (mine.fc_out, theirs.mlp.c_proj)):
                    linear.weight.copy_(conv.weight.T)
                    linear.bias.copy_(conv.bias)
        return model.to(device=device or runtime.DEVICE, dtype=dtype or runtime.DTYPE).eval()

    @classmethod
    def from_pretrained(cls, name: str = "gpt2", **kwargs) -> "GPT2":
        """Download a pretrained GPT-2 from the Hugging Face hub (needs internet, e.g. on Colab) and
        load it with :meth:`from_hf`; ``kwargs`` go to :meth:`from_hf`."""
        from transformers import GPT2LMHeadModel
        return cls.from_hf(GPT2LMHeadModel.from_pretrained(name), **kwargs)

