"""From a ``transformers`` model to a paged one (chapter 9): pick the paged model by architecture.

:func:`from_hf` turns a ``GPT2LMHeadModel`` into :class:`pagedlib.GPT2` and a ``LlamaForCausalLM``
or ``Qwen2ForCausalLM`` into :class:`pagedlib.Llama`, weights copied; anything else is refused with
the list of what is supported. :func:`from_pretrained` downloads a model and its tokenizer from the
Hugging Face hub first (it needs the internet, e.g. on Colab; tests never call it).
"""
from __future__ import annotations

import torch

from .llama import Llama
from .gpt2 import GPT2

# transformers' model_type -> (the class transformers uses, the paged model that copies it)
ARCHITECTURES = {
    "gpt2": ("GPT2LMHeadModel", GPT2),
    "llama": ("LlamaForCausalLM", Llama),
    "qwen2": ("Qwen2ForCausalLM", Llama),
}
SMALL_LLAMA = "HuggingFaceTB/SmolLM2-135M"   # 30 layers, 9 query heads, 3 KV heads: fits a T4 in fp16


def supported() -> str:
    return ", ".join(f"{hf_class} ({model_type})" for model_type, (hf_class, _) in ARCHITECTURES.items())


def from_hf(hf_model, backend: str | None = None, dtype: torch.dtype | None = None,
            device: torch.device | str | None = None):
    """The paged model (:class:`~pagedlib.GPT2` or :class:`~pagedlib.Llama`) with ``hf_model``'s
    weights, chosen by ``hf_model.config.model_type``. The keywords are those of ``GPT2.from_hf``:
    ``backend`` "triton" or "torch" (default: the runtime's), ``dtype`` and ``device`` (default:
    fp16 on a GPU, fp32 on a CPU)."""
    config = getattr(hf_model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise ValueError(f"hf_model is a {type(hf_model).__name__} (model_type {model_type!r}), which pagedlib "
                         f"cannot serve; supported: {supported()}.")
    hf_class, paged = ARCHITECTURES[model_type]
    if type(hf_model).__name__ != hf_class:
        raise ValueError(f"hf_model must be a {hf_class} (the model with its language-model head) for "
                         f"model_type {model_type!r}; got {type(hf_model).__name__}. Load it with "
                         f"transformers.{hf_class}.from_pretrained(...) or AutoModelForCausalLM.")
    return paged.from_hf(hf_model, backend=backend, dtype=dtype, device=device)


def from_pretrained(name: str = SMALL_LLAMA, **kwargs):
    """``(model, tokenizer)``: the hub model ``name`` as a paged model (through :func:`from_hf`,
    ``kwargs`` passed on) and its ``transformers`` tokenizer. Needs the internet::

        model, tokenizer = pagedlib.from_pretrained("HuggingFaceTB/SmolLM2-135M")
        llm = pagedlib.LLM(model, num_usable_blocks=1024)
        ids = llm.generate([tokenizer.encode("The capital of France is")], max_new_tokens=20)
        print(tokenizer.decode(ids[0]))
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    hf_model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
    return from_hf(hf_model, **kwargs), AutoTokenizer.from_pretrained(name)
