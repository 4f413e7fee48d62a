"""Models on the paged KV cache: the layers every model shares, GPT-2, the Llama family, and loading
from ``transformers``, and a real chat model from the package index.

============  ==========================================================  =========
module        idea                                                        chapters
============  ==========================================================  =========
``layers``    KV cache, the paged attention layer, the model protocol     10
``gpt2``      GPT-2 on the paged cache                                    10
``llama``     the Llama family (RMSNorm, RoPE, GQA, SwiGLU; Qwen2)        10
``loading``   ``from_hf`` / ``from_pretrained`` by architecture           10
``smollm2``   SmolLM2-135M-Instruct without the internet: ``load_smollm2``  7, 10, 11
============  ==========================================================  =========
"""
from ..lazy import lazy_submodules

__getattr__, __dir__ = lazy_submodules(__name__, ("layers", "gpt2", "llama", "loading", "smollm2"))
