"""GPT-2 whose attention reads and writes K/V only through the paged cache (chapter 10).

The transformer itself is the GPT-2 every course shows (token + position embeddings, ``n_layer``
pre-norm blocks of attention and MLP, a final LayerNorm, an output head tied to the embeddings).
What is new is *where K/V live*: not in a ``[batch, heads, seq, dim]`` tensor per request, but in one
paged cache per layer, ``[num_blocks, block_size, n_head, head_dim]`` for K and for V, shared by every
request, each request finding its tokens through its block table.

The model runs on a *flat batch* (:class:`PagedBatch`): the new tokens of every scheduled sequence,
concatenated, with the slot each token's K/V goes to. One forward pass serves a whole engine step,
prefill chunks and decode tokens mixed. In every layer:

- each sequence's new tokens (a prompt chunk, or one decode token: a chunk of length 1) first write
  their K/V with ``write_kv``, then attend causally over the cached prefix + chunk with ``paged_prefill``;
- when every chunk is a single token (``is_decode``), ``paged_attention`` runs instead.

Either way the model returns the logits of each sequence's *last* token, the only ones the engine
samples from. The attention backend is ``"triton"`` (the course's kernels ``write_kv``,
``paged_prefill``, ``paged_attention``: compiled on a GPU, through the interpreter on a CPU) or
``"torch"`` (the plain PyTorch references ``paged_prefill_ref``, ``paged_attention_ref``, with
:func:`write_kv_torch`, an index assignment that mirrors ``write_kv``'s contract). :data:`DEFAULT_BACKEND`
follows the runtime; ``GPT2(..., backend=...)`` or ``model.backend = ...`` overrides it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from . import runtime

BACKENDS = ("triton", "torch")
# Compiled kernels on a GPU; on a CPU the interpreter is correct but slow, so the reference is the
# default there (pass backend="triton" to run the kernels through the interpreter anyway).
DEFAULT_BACKEND = "triton" if runtime.DEVICE.type == "cuda" else "torch"


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


@dataclass
class PagedBatch:
    """One forward pass over the paged cache: the new tokens of ``num_seqs`` sequences, flattened.

    Sequence ``s`` owns rows ``query_start_loc[s]:query_start_loc[s+1]`` of ``input_ids``; they are
    its *last* tokens, so its K/V before them must already be in the cache. ``is_decode`` says every
    sequence brings exactly one token (then ``paged_attention`` runs instead of ``paged_prefill``).
    ``max_query_len``, if the builder knows it, is the longest chunk: ``paged_prefill`` sizes its grid
    with it instead of reading ``query_start_loc`` back from the GPU in every layer.
    """

    input_ids: torch.Tensor        # [num_tokens] int64
    positions: torch.Tensor        # [num_tokens] int64, each token's index in its sequence
    slot_mapping: torch.Tensor     # [num_tokens] int64, slot = block_id * block_size + offset
    block_tables: torch.Tensor     # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor         # [num_seqs] int32, tokens in the cache after this step
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    is_decode: bool
    max_query_len: int | None = None   # the most new tokens of any sequence (host int), or None: unknown


class KVCache:
    """The paged K/V storage of a model: for each layer, a key and a value cache of
    ``[num_blocks, block_size, n_head, head_dim]``. Block ids are the block manager's."""

    def __init__(self, config: GPT2Config, num_blocks: int, block_size: int,
                 dtype: torch.dtype, device: torch.device):
        shape = (num_blocks, block_size, config.n_head, config.head_dim)
        # [num_blocks, block_size, n_head, head_dim], one K and one V per layer
        self.layers = [(torch.zeros(shape, dtype=dtype, device=device),
                        torch.zeros(shape, dtype=dtype, device=device)) for _ in range(config.n_layer)]
        self.num_blocks, self.block_size = num_blocks, block_size

    def copy_block(self, src: int, dst: int) -> None:
        """Copy one block's K/V in every layer (copy-on-write before a shared block is written)."""
        for key_cache, value_cache in self.layers:
            key_cache[dst] = key_cache[src]
            value_cache[dst] = value_cache[src]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


def write_kv_torch(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                   value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """``write_kv`` in plain PyTorch, for the reference backend: the same contract (key, value
    ``[num_tokens, n_head, head_dim]``, one slot per token, slot -1 skips), done by index assignment
    into the cache viewed as ``[num_blocks * block_size, n_head, head_dim]``."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    key_cache.view(-1, *key_cache.shape[2:])[slots] = key[keep]        # [num_slots, n_head, head_dim]
    value_cache.view(-1, *value_cache.shape[2:])[slots] = value[keep]


def _prefill_ref(*args, max_query_len: int | None = None):
    """``paged_prefill_ref`` with the kernel's keyword: the reference loops over sequences, no grid to size."""
    from .attention_ref import paged_prefill_ref
    return paged_prefill_ref(*args)


def _kernels(backend: str, validate: bool = True):
    """(write_kv, paged_prefill, paged_attention) of a backend. ``validate=False`` skips the Triton
    functions' checks of tensor values (a few small kernels and a GPU sync per call): every layer
    sees the same batch, so checking it in the first layer is enough."""
    if backend == "triton":
        from .attention import paged_attention, paged_prefill, write_kv
        return (partial(write_kv, validate=validate), partial(paged_prefill, validate=validate),
                partial(paged_attention, validate=validate))
    from .attention_ref import paged_attention_ref
    return write_kv_torch, _prefill_ref, paged_attention_ref


def _activation(name: str):
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: F.gelu(x, approximate="tanh")   # GPT-2's tanh approximation
    if name == "gelu":
        return F.gelu
    if name == "relu":
        return F.relu
    raise ValueError(f"activation_function {name!r} is not supported; use 'gelu_new', 'gelu' or 'relu'.")


class Block(nn.Module):
    """One transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, config: GPT2Config):
        super().__init__()
        d, inner = config.n_embd, config.n_inner or 4 * config.n_embd
        self.ln_1 = nn.LayerNorm(d, eps=config.layer_norm_epsilon)
        self.qkv = nn.Linear(d, 3 * d)          # q, k, v side by side
        self.attn_out = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=config.layer_norm_epsilon)
        self.fc = nn.Linear(d, inner)
        self.fc_out = nn.Linear(inner, d)
        self.act = _activation(config.activation_function)
        self.n_head, self.head_dim = config.n_head, config.head_dim

    def attention(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor],
                  batch: PagedBatch, backend: str, validate: bool = True) -> torch.Tensor:
        """Self-attention of the batch's new tokens, with every K/V read from and written to the cache."""
        write_kv, paged_prefill, paged_attention = _kernels(backend, validate)
        num_tokens = x.shape[0]
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)        # each [num_tokens, n_embd]
        q, k, v = (t.reshape(num_tokens, self.n_head, self.head_dim).contiguous()
                   for t in (q, k, v))                          # each [num_tokens, n_head, head_dim]
        key_cache, value_cache = cache
        write_kv(k, v, key_cache, value_cache, batch.slot_mapping)   # the new tokens join the cache
        if batch.is_decode:   # one query per sequence: num_tokens == num_seqs
            out = paged_attention(q, key_cache, value_cache, batch.block_tables, batch.seq_lens)
        else:                 # a causal chunk per sequence, over its cached prefix and itself
            out = paged_prefill(q, key_cache, value_cache, batch.block_tables, batch.seq_lens,
                                batch.query_start_loc, max_query_len=batch.max_query_len)
        return self.attn_out(out.reshape(num_tokens, -1))      # [num_tokens, n_embd]

    def forward(self, x, cache, batch, backend, validate=True):
        x = x + self.attention(self.ln_1(x), cache, batch, backend, validate)
        return x + self.fc_out(self.act(self.fc(self.ln_2(x))))


class GPT2(nn.Module):
    """GPT-2 over a paged KV cache. Build it from a ``transformers`` model with :meth:`from_hf`
    (or :meth:`from_pretrained`), make its cache with :meth:`make_kv_cache`, run it with
    :meth:`forward` on a :class:`PagedBatch`; :class:`pagedlib.LLM` does all of that for you."""

    def __init__(self, config: GPT2Config, backend: str | None = None):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.backend = backend or DEFAULT_BACKEND

    @property
    def backend(self) -> str:
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        if name not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}; got {name!r}.")
        self._backend = name

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.wte.weight.dtype

    def make_kv_cache(self, num_blocks: int, block_size: int) -> KVCache:
        """An empty paged cache of ``num_blocks`` blocks of ``block_size`` tokens, on the model's
        device and in its dtype."""
        return KVCache(self.config, num_blocks, block_size, self.dtype, self.device)

    @torch.inference_mode()
    def forward(self, batch: PagedBatch, kv_cache: KVCache) -> torch.Tensor:
        """Run the batch's new tokens through the model, writing their K/V into ``kv_cache``;
        return the logits of each sequence's last token, ``[num_seqs, vocab_size]`` (fp32)."""
        x = self.wte(batch.input_ids) + self.wpe(batch.positions)   # [num_tokens, n_embd]
        for layer, (block, cache) in enumerate(zip(self.blocks, kv_cache.layers)):
            x = block(x, cache, batch, self.backend, validate=layer == 0)   # one batch: check it once
        last = x[batch.query_start_loc[1:].long() - 1]              # [num_seqs, n_embd]
        return (self.ln_f(last) @ self.wte.weight.T).float()        # head tied to the embeddings

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
            for mine, theirs in zip(model.blocks, src.h):
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

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

