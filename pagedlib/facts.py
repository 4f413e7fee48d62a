"""Facts about production engines, each written once, with its source, the version it holds for
and the date it was checked (every chapter's "In production today" box, and the prose that names them).

A fact about another engine (vLLM, SGLang, TensorRT-LLM, FlashInfer, FlashAttention, llama.cpp,
transformers) changes with that engine's releases. Written by hand in every chapter that needs it, it
drifts: two chapters end up saying different things. Here each fact lives once:

- :data:`FACTS`: the statement (Markdown, as the course prints it), the engine, the version, commit
  or pull request it holds for, its source and the date it was checked;
- :data:`BOXES`: which facts each chapter's "In production today" box shows, in order.
  ``scripts/sync_notebooks.py`` writes every box from here (between ``<!-- production -->`` markers)
  and the list of all facts into ``book/references.md``; its ``--check`` reports a box edited by hand;
- ``used_in``: the other places (chapter prose) that state the fact; the tests check that each of
  them carries the registered sentence word for word, and that no text of the course matches a
  fact's ``contradicted_by`` patterns (the wrong or dated versions of it seen before).

To change a fact, edit it here, check it in the engine's source, update ``checked``, and run
``python scripts/sync_notebooks.py``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Fact", "FACTS", "BOXES", "fact", "render_box", "render_list", "normalise", "BOX_START", "BOX_END"]

BOX_START = "<!-- production: written by scripts/sync_notebooks.py from pagedlib/facts.py -->"
BOX_END = "<!-- /production -->"
BOX_TITLE = "In production today"

#: Where the course is published (GitHub Pages; _config.yml's html.baseurl says the same). A notebook
#: on Colab opens alone, so its links to other chapters and to the book's pages are written as
#: absolute links to the published site; on the site, _static/course.js turns them back into
#: relative links, so a local build stays local.
SITE_URL = "https://paged-attention-course.github.io/paged-attention-from-scratch/"


def site_url(page: str, anchor: str = "") -> str:
    """The published address of a course page given by its source path: ``"book/references.md"``
    or ``"notebooks/03_fragmentation.ipynb"`` (``anchor`` without its ``#``)."""
    stem, dot, ext = page.rpartition(".")
    if not dot or ext not in ("md", "ipynb"):
        raise ValueError(f"page must be a book/*.md or notebooks/*.ipynb path, got {page!r}")
    return f"{SITE_URL}{stem}.html" + (f"#{anchor}" if anchor else "")


@dataclass(frozen=True)
class Fact:
    """One statement about a production engine, where it comes from and how old it is."""

    key: str                 # a short name, unique
    engine: str              # "vLLM", "SGLang", ...
    version: str             # the version, commit or pull request the statement holds for
    text: str                # the statement in Markdown, one or more sentences
    source: str              # the URL it was checked in
    source_name: str         # the link's words
    checked: str             # ISO date it was last checked against the source
    used_in: tuple[str, ...] = ()          # chapters ("10") whose prose states it, word for word
    contradicted_by: tuple[str, ...] = ()  # regexes: wrong or dated versions of it, found nowhere
    also: tuple[tuple[str, str], ...] = ()  # more sources, (URL, the link's words), of a merged fact

    def links(self) -> str:
        """The Markdown links to its sources, the main one first."""
        return "; ".join(f"[{name}]({url})" for url, name in ((self.source, self.source_name), *self.also))

    def cite(self) -> str:
        """The short citation shown after the statement: sources, version, date."""
        return f"({self.links()}; {self.version}; checked {self.checked})"


VLLM = "https://github.com/vllm-project/vllm/blob/main/"
SGLANG_ARGS = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py"
TRTLLM_FLAGS = ("https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/"
                "useful-runtime-flags.html")
TRTLLM_KVCONFIG = "https://nvidia.github.io/TensorRT-LLM/llm-api/reference/KvCacheConfig.html"

_OLD = "2026-12-02"   # facts carried over from the boxes as last reviewed (round two), not re-checked since
_NOW = "2026-12-04"   # facts checked again for issue 34
_RADIX = "2026-12-05"  # chapter 7's radix tree and scheduling facts (issue 35)
_TODAY = "2026-12-05"  # facts checked for issue 40 (admission policies)
_LATE = "2026-12-05"  # facts added for issue 35 (chapter 12's deployments of 2026)

FACTS: tuple[Fact, ...] = (
    # ---- chapter 0: kernels
    Fact("vllm_backends", "vLLM", "v1 engine, main",
         "Serving engines run attention kernels written in CUDA or in Triton. **vLLM v1** picks an "
         "attention backend for the GPU and the model: FlashAttention, FlashInfer, or its own Triton "
         "attention kernel.",
         "https://github.com/vllm-project/vllm/tree/main/vllm/v1/attention", "vllm/v1/attention", _OLD),
    Fact("kernel_libraries", "SGLang, FlashInfer, TensorRT-LLM", "main",
         "**SGLang** ships Triton attention kernels next to FlashInfer ones; **FlashInfer** is a library "
         "of CUDA kernels for serving, and **TensorRT-LLM** runs NVIDIA's own CUDA kernels. Triton's "
         "interpreter, which this course uses on a CPU, is a tool for learning and debugging; no engine "
         "serves through it.",
         "https://docs.flashinfer.ai", "docs.flashinfer.ai", _OLD),
    # ---- chapter 1: the KV cache
    Fact("vllm_hybrid_cache", "vLLM", "v1 engine, main",
         "**vLLM** reads a model's shape from its `config.json` the way `ModelSpec` does, and gives each "
         "kind of layer its own cache group: its hybrid KV cache manager keeps only the blocks inside a "
         "sliding window, stores an MLA layer's single latent, and keeps Mamba or linear-attention state "
         "per request.",
         "https://docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/", "hybrid KV cache manager", _OLD),
    Fact("kv_cache_dtype", "vLLM, SGLang", "main",
         "The cache's element size is its own setting: vLLM's `kv_cache_dtype=\"fp8\"` halves it, and "
         "SGLang's `--kv-cache-dtype` likewise.",
         "https://docs.vllm.ai/en/latest/configuration/engine_args.html", "vLLM engine arguments", _OLD),
    Fact("vllm_gpu_memory_utilization", "vLLM", "v0.21 and later (0.9 before)",
         "vLLM sizes the cache inside `gpu_memory_utilization` of the GPU, 0.92 by default since v0.21 "
         "(0.9 before), and its start-up log says what came of it: \"GPU KV cache size: N tokens\" and "
         "the maximum concurrency at the model's full length.",
         VLLM + "vllm/config/cache.py", "vllm/config/cache.py", _NOW,
         contradicted_by=(r"gpu_memory_utilization[^.]{0,60}0\.9 by default",)),
    # ---- chapter 2: reserve the maximum
    Fact("allocation_paged", "vLLM, SGLang, TensorRT-LLM", "main",
         "Reserving the maximum is two decisions, and engines now make them apart. *Allocation* is paged "
         "everywhere: vLLM v1, SGLang and TensorRT-LLM hand out KV blocks as a request grows (chapter 4).",
         "https://nvidia.github.io/TensorRT-LLM/features/kvcache.html", "TensorRT-LLM KV cache system", _OLD),
    Fact("trtllm_admission", "TensorRT-LLM", "1.x",
         "*Admission* can still count the maximum: TensorRT-LLM's default capacity scheduler, "
         "`GUARANTEED_NO_EVICT`, starts a request only if the blocks for its prompt plus its maximum new "
         "tokens can be guaranteed, so a started request is never paused (`MAX_UTILIZATION` admits more "
         "and may pause some).",
         TRTLLM_FLAGS, "useful runtime options", _OLD),
    Fact("vllm_sglang_admission", "vLLM, SGLang", "v1 engine; SGLang main",
         "vLLM admits on demand (blocks for the tokens it schedules now) and preempts when it runs short; "
         "SGLang admits by an estimate of the tokens still to come (`new_token_ratio`, chapter 11).",
         VLLM + "vllm/v1/core/sched/scheduler.py", "scheduler.py", _OLD),
    Fact("llamacpp_slots", "llama.cpp",
         "llama-server since ggml-org/llama.cpp#17450 and #17997 (December 2025)",
         "The contiguous layout survives where simplicity wins. llama.cpp's server splits its context "
         "(`-c`) into `-np` equal per-sequence slots when you fix `-np`; by default `-np` is chosen "
         "automatically and the KV cache is unified (`--kv-unified`, one buffer shared by all sequences).",
         "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md", "llama-server README",
         _NOW,
         contradicted_by=(r"-np` equal per-sequence\s+slots unless its KV cache is unified",)),
    Fact("hf_static_cache", "transformers", "main",
         "Hugging Face transformers' `StaticCache` preallocates `max_cache_len` tokens per sequence so "
         "that the shapes stay fixed for compiled graphs.",
         "https://huggingface.co/docs/transformers/kv_cache", "transformers KV cache docs", _OLD),
    # ---- chapter 3: fragmentation
    Fact("physical_blocks", "vLLM, SGLang, TensorRT-LLM", "main",
         "The engines keep *physical* memory in fixed-size blocks, so no free block is ever too small: "
         "vLLM v1 hands out blocks from its `BlockPool`'s free queue, SGLang's token pool hands out slots "
         "one token at a time by default, and TensorRT-LLM keeps one block pool per attention window size.",
         VLLM + "vllm/v1/core/block_pool.py", "vllm/v1/core/block_pool.py", _OLD),
    Fact("vattention", "vAttention", "the paper (ASPLOS 2025)",
         "Where contiguity is wanted, it comes from virtual memory instead of copies: vAttention reserves "
         "each request's range of virtual addresses and maps physical pages into it on demand with CUDA's "
         "`cuMemMap`, so the attention kernel needs no page table.",
         "https://arxiv.org/abs/2405.04437", "arXiv:2405.04437", _OLD),
    # ---- chapter 4: pages
    Fact("vllm_block_size", "vLLM", "main (`CacheConfig.DEFAULT_BLOCK_SIZE`)",
         "The page size is a per-kernel choice. vLLM's default `block_size` is 16, but its attention "
         "backends may ask for others, and hybrid models get larger blocks (1,024 tokens and more) so "
         "that every layer group's page has the same size in bytes; its `hash_block_size` (unset by "
         "default) then hashes prefixes at a finer granularity than the physical blocks, as long as every "
         "group's `block_size` is a multiple of it.",
         "https://docs.vllm.ai/en/stable/api/vllm/config/cache/", "vllm.config.cache", _NOW,
         contradicted_by=(r"prefix_match_unit",)),
    Fact("sglang_page_size", "SGLang", "main (`server_args.py`)",
         "SGLang's `--page-size` defaults to 1 on its FlashAttention-3, FlashInfer and Triton paths, "
         "while its TensorRT-LLM (`trtllm_mha`) backend takes 16, 32 or 64 (and turns 1 into 64) and its "
         "MLA backends use 64, as FlashMLA requires.",
         SGLANG_ARGS, "python/sglang/srt/server_args.py", _NOW,
         contradicted_by=(r"Blackwell `trtllm_mha`", r"its Blackwell and MLA")),
    Fact("trtllm_tokens_per_block", "TensorRT-LLM", "1.3 and 1.4",
         "TensorRT-LLM's `tokens_per_block` is 32 by default (a power of two).",
         TRTLLM_KVCONFIG, "KvCacheConfig", _NOW),
    Fact("fa3_paged_tma", "FlashAttention 3", "main",
         "FlashAttention 3 on Hopper copies a paged cache with the TMA engine only when the page size is "
         "a multiple of its key tile (`page_size % kBlockN == 0`, with `kBlockN` 128 or 176 at head_dim "
         "128) and the query rows of a tile exceed `kBlockM` (`seqlen_q` x the GQA group), so decode "
         "always gathers rows with asynchronous copies, whatever the page size.",
         "https://github.com/Dao-AILab/flash-attention/blob/main/hopper/flash_api.cpp",
         "hopper/flash_api.cpp (`get_pagedkv_tma`)", _NOW,
         used_in=("09",),
         contradicted_by=(r"prefer (?:pages of )?32[- ](?:to )?128[- ]token", r"prefer pages of 32 to 128")),
    Fact("vllm_startup_log", "vLLM", "v1 engine, main",
         "vLLM reports the resulting pool at start-up as \"GPU KV cache size: N tokens\" with the maximum "
         "concurrency at the model's length.",
         VLLM + "vllm/v1/core/kv_cache_utils.py", "vllm/v1/core/kv_cache_utils.py", _OLD),
    # ---- chapter 5: attention through a page table
    Fact("vllm_kv_layout", "vLLM", "v1 engine, main",
         "**vLLM v1**'s KV shape per layer belongs to the attention backend: FlashAttention's is "
         "`[2, num_blocks, block_size, num_kv_heads, head_dim]`, FlashInfer's and Triton's "
         "`(num_blocks, 2, block_size, num_kv_heads, head_dim)`, and `get_kv_cache_stride_order` lets a "
         "backend store it HND. New tokens are written through a `slot_mapping` in which -1 means "
         "\"skip\". The v0 paged CUDA kernels and their layout are legacy.",
         "https://docs.vllm.ai/en/latest/design/", "docs.vllm.ai, design", _OLD),
    Fact("vllm_null_block", "vLLM", "v1 engine, main",
         "vLLM's `BlockPool` takes block 0 out of the free queue at start-up as a **null block**, a "
         "placeholder id that no request owns. Its Triton kernel loads block-table entries without a "
         "mask, but masks the K/V loads of positions past a sequence's length (`other=0.0`), so what a "
         "padded entry points at is never read.",
         VLLM + "vllm/v1/attention/ops/triton_unified_attention.py", "triton_unified_attention.py", _NOW,
         used_in=("05",),
         contradicted_by=(r"null block[^.]{0,80}whose K/V nobody needs",
                          r"makes that safe by reserving block 0")),
    Fact("flashinfer_csr", "FlashInfer", "main",
         "**FlashInfer** takes the CSR page table of chapter 5 (`kv_indptr`, `kv_indices`, "
         "`kv_last_page_len`, int32) over pages in NHD (`[pages, page_size, heads, dim]`, the default) or "
         "HND (`[pages, heads, page_size, dim]`) layout.",
         "https://docs.flashinfer.ai/tutorials/kv_layout.html", "FlashInfer KV layout", _OLD),
    Fact("sglang_req_to_token", "SGLang", "main",
         "**SGLang** uses pages of one token by default on its FlashAttention-3, FlashInfer and Triton "
         "paths, so its `req_to_token` table maps every token straight to a slot of the pool.",
         SGLANG_ARGS, "python/sglang/srt/server_args.py", _OLD),
    # ---- chapter 6: sharing
    Fact("vllm_parallel_sampling", "vLLM", "v1 engine, main",
         "**vLLM v1** fans `n > 1` out into child requests that share full prompt blocks through its "
         "prefix cache; it has no block-level copy-on-write, and beam search runs outside the engine core "
         "(on top of the engine's requests), not as forks inside it. Fork and copy-on-write, as built in "
         "chapter 6, are the PagedAttention paper's design and vLLM v0's.",
         VLLM + "vllm/v1/engine/parallel_sampling.py", "parallel_sampling.py", _OLD),
    Fact("sglang_radix_sharing", "SGLang", "main",
         "**SGLang** shares K/V between requests through its radix tree of cached prefixes "
         "(RadixAttention), which also covers the samples of one prompt.",
         "https://github.com/sgl-project/sglang", "github.com/sgl-project/sglang", _OLD),
    Fact("trtllm_block_reuse", "TensorRT-LLM", "1.x (`KvCacheConfig.enable_block_reuse=True`)",
         "**TensorRT-LLM** reuses KV blocks across requests (block reuse, on by default): filled blocks "
         "are entered in a search tree that later requests walk, eviction can be prioritised, and blocks "
         "can be offloaded to host memory. Its runtime also supports beam search.",
         TRTLLM_KVCONFIG, "KvCacheConfig", _NOW),
    Fact("flashinfer_cascade", "FlashInfer", "main",
         "**FlashInfer** is a kernel library: it reads whatever page tables the engine gives it, shared "
         "pages included, and offers cascade attention for batches whose requests share a long prefix.",
         "https://docs.flashinfer.ai", "docs.flashinfer.ai", _OLD),
    # ---- chapter 7: prefix caching
    Fact("vllm_prefix_caching", "vLLM", "v1 engine, main",
         "**vLLM v1** turns automatic prefix caching on by default (`enable_prefix_caching`). It hashes "
         "full blocks only, each hash chained on its parent's plus the block's token ids (and extra keys "
         "that change the K/V, such as LoRA adapters or the images of a request), with `sha256` by "
         "default (`prefix_caching_hash_algo`); a per-request `cache_salt` keeps tenants from hitting "
         "each other's blocks. A hit never covers the last prompt token. Freed blocks keep their hash in "
         "a single LRU free queue, a request's tail first, and are evicted lazily.",
         VLLM + "vllm/config/cache.py", "vllm/config/cache.py", _OLD),
    Fact("kv_offload", "vLLM, SGLang", "main",
         "**Offload** turns eviction into a copy: vLLM can keep evicted blocks in CPU memory (natively or "
         "through LMCache) and SGLang's HiCache extends its radix tree to host memory and storage, so a "
         "later hit reloads K/V instead of recomputing it.",
         "https://docs.vllm.ai/en/latest/configuration/engine_args.html", "vLLM engine arguments", _OLD),
    Fact("sglang_radix_cache", "SGLang", "main",
         "**SGLang** (RadixAttention) keeps cached prefixes in a radix tree (a tree whose edges hold runs "
         "of token ids, so shared prefixes share a path); with page size 1, a shared prefix of any length "
         "can hit, not only whole blocks. A running request locks the nodes of its prefix (`lock_ref`); "
         "when memory runs short, whole unlocked leaves are evicted, the least recently used first by "
         "default (`--radix-eviction-policy`). A match never covers a prompt's last token.",
         "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/mem_cache/radix_cache.py",
         "python/sglang/srt/mem_cache/radix_cache.py", _RADIX),
    Fact("sglang_lpm", "SGLang", "main (`server_args.py`, `schedule_policy.py`)",
         "**SGLang**'s `--schedule-policy` defaults to `fcfs`; `lpm` sorts the waiting requests by the "
         "length of their cached prefix, longest first, and falls back to arrival order when more than "
         "128 requests wait.",
         "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/managers/schedule_policy.py",
         "python/sglang/srt/managers/schedule_policy.py", _RADIX),
    Fact("cascade_attention", "FlashInfer, vLLM", "main",
         "**Cascade attention** reads a prefix that the whole batch shares once, not once per request: "
         "FlashInfer provides the kernels, and vLLM's FlashAttention backend switches to it when the "
         "requests of a step share a long enough common prefix.",
         "https://docs.flashinfer.ai", "docs.flashinfer.ai", _OLD),
    # ---- chapter 8: a Triton kernel
    Fact("vllm_unified_attention", "vLLM", "v1 engine, main",
         "**vLLM v1** runs attention through pluggable backends, among them a Triton \"unified "
         "attention\" kernel that handles the prefill and decode tokens of a mixed batch in one launch "
         "over the layout of chapter 8, `[num_blocks, block_size, num_kv_heads, head_dim]`. The paged "
         "CUDA kernels of the paper (vLLM v0) are legacy.",
         VLLM + "vllm/v1/attention/ops/triton_unified_attention.py", "triton_unified_attention.py", _OLD),
    Fact("sglang_backends", "SGLang", "main",
         "**SGLang** also offers several attention backends: FlashInfer, FlashAttention and its own Triton "
         "kernels, whose decode runs in two stages like chapter 9's split-K, with the query heads of a "
         "GQA group packed into one program in its grouped variant.",
         "https://github.com/sgl-project/sglang", "github.com/sgl-project/sglang", _OLD),
    Fact("flashinfer_kernels", "FlashInfer", "main",
         "**FlashInfer** is a kernel library: decode and prefill attention over a paged cache described "
         "by a CSR page table (chapter 5), used by SGLang and vLLM. It plans each batch before it runs: "
         "whether to split long requests' KV and how to spread the work over the SMs.",
         "https://docs.flashinfer.ai", "docs.flashinfer.ai", _OLD),
    Fact("trtllm_kernels", "TensorRT-LLM", "1.x",
         "**TensorRT-LLM** keeps its KV cache in blocks too, with its own fused kernels for the "
         "generation phase, among them XQA kernels specialised for MQA and GQA, and a multi-block mode "
         "that splits one long sequence over several thread blocks.",
         "https://nvidia.github.io/TensorRT-LLM/", "nvidia.github.io/TensorRT-LLM", _OLD),
    # ---- chapter 9: faster kernels
    Fact("vllm_write_and_step", "vLLM", "v1 engine, main",
         "**vLLM v1** does not use the paper's CUDA kernels. New K/V are written by a slot-mapping kernel "
         "like `write_kv` (slot -1 skips a padding token), and the prefill chunks and decode tokens of "
         "one step go through each attention layer in the same forward pass.",
         VLLM + "vllm/v1/attention/ops/triton_unified_attention.py", "triton_unified_attention.py", _OLD),
    Fact("vllm_unified_grid", "vLLM", "v1 engine, main",
         "vLLM's Triton backend serves every step with one kernel, `unified_attention`: each program owns "
         "a tile of `BLOCK_Q` tokens x the GQA group (`BLOCK_M = 16` rows for groups up to 16), over a "
         "grid of `total_q // BLOCK_Q + num_seqs` tiles per K/V head, an upper bound computed so that no "
         "query length is read back to the CPU. Its split (3D) variant cuts the keys into segments and "
         "reduces them by log-sum-exp, but only for decode-only batches of few sequences, and never in "
         "its batch-invariant mode; pagedlib splits the decode rows of mixed steps too.",
         VLLM + "vllm/v1/attention/ops/triton_unified_attention.py", "triton_unified_attention.py", _OLD),
    Fact("fa3_varlen", "FlashAttention 3", "main",
         "**FlashAttention 3** (Hopper) takes the whole batch as variable-length queries with a page table, "
         "packs a GQA group into the query tile (`pack_gqa`) and splits the keys (`num_splits`, by a "
         "heuristic on the SMs, dynamically per sequence for variable lengths), merging the splits in a "
         "second kernel.",
         "https://github.com/Dao-AILab/flash-attention/blob/main/hopper/flash_api.cpp", "hopper/flash_api.cpp",
         _OLD),
    Fact("flashinfer_pod", "FlashInfer", "main",
         "**FlashInfer**'s POD attention runs a prefill kernel and a batch-decode kernel concurrently in "
         "one launch, for steps that overlap a chunked prefill with ongoing decodes.",
         "https://docs.flashinfer.ai", "docs.flashinfer.ai", _OLD),
    # ---- chapters 10 and 11: engines and scheduling
    Fact("vllm_v1_step", "vLLM", "v1 engine, main",
         "**vLLM v1**'s engine core is a scheduler and **one forward pass per step** over a flat batch, "
         "under a token budget (`max_num_batched_tokens`). It has no decode or prefill phase: it walks "
         "the running requests in admission order, each asking for `num_tokens_with_spec - "
         "num_computed_tokens` tokens (with speculative decoding, the draft tokens to verify count too, "
         "so a \"decode\" can be several tokens), then admits waiting requests on demand with what is "
         "left. Chunked prefill and prefix caching are on by default. Preemption is by **recompute only** "
         "(v0 also swapped to CPU memory), and a recomputed request often finds its own full blocks still "
         "in the prefix cache.",
         VLLM + "vllm/v1/core/sched/scheduler.py", "scheduler.py", _OLD),
    Fact("vllm_async_scheduling", "vLLM",
         "default since [vllm-project/vllm#27614](https://github.com/vllm-project/vllm/pull/27614); "
         "with speculative decoding since #31998 (January 2026)",
         "vLLM schedules asynchronously by default: it plans step n + 1 while the GPU runs step n "
         "(`async_scheduling`; turn it off with `--no-async-scheduling`), so scheduling hides behind the "
         "forward pass, which is captured as **CUDA graphs** for a set of batch sizes and replayed.",
         "https://github.com/vllm-project/vllm/pull/31998", "vllm-project/vllm#31998", _NOW,
         contradicted_by=(r"With\s+`--async-scheduling` it plans",)),
    Fact("vllm_cudagraph_sizes", "vLLM", "main (`VllmConfig._set_cudagraph_sizes`)",
         "vLLM captures CUDA graphs by default for the batch sizes 1, 2, 4, every multiple of 8 below 256 "
         "and every multiple of 16 from 256 up to `max_cudagraph_capture_size` (by default "
         "min(2 x `max_num_seqs`, 512)); a step runs in the smallest captured graph that holds its "
         "tokens, padded up to that size.",
         VLLM + "vllm/config/vllm.py", "vllm/config/vllm.py", "2026-12-05"),
    Fact("sglang_scheduling", "SGLang", "main",
         "**SGLang** cuts prompts at `--chunked-prefill-size` and runs a prefill (extend) batch or a "
         "decode batch per step, mixing them only with `--enable-mixed-chunk`; it admits by an estimate "
         "of the tokens still to come (`new_token_ratio`) and retracts requests when the estimate falls "
         "short, and its overlap scheduler prepares the next batch on the CPU during the current one.",
         SGLANG_ARGS, "python/sglang/srt/server_args.py", _OLD),
    Fact("trtllm_inflight", "TensorRT-LLM", "1.x",
         "**TensorRT-LLM** calls continuous batching **in-flight batching**: requests join and leave the "
         "batch at every iteration, with a paged KV cache and chunked context (prefill); its default "
         "admission (`GUARANTEED_NO_EVICT`) reserves for each request's maximum output.",
         TRTLLM_FLAGS, "useful runtime options", _OLD),
    Fact("sglang_new_token_ratio", "SGLang", "main (with `environ.py`)",
         "**SGLang's admission** charges each running request `new_token_ratio` times the tokens it may "
         "still generate, at most 4,096 (`SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`); the ratio starts at "
         "0.7 and decays to 0.7 x 0.14 over 600 decode steps without a retraction.",
         "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/managers/schedule_policy.py",
         "schedule_policy.py", _TODAY),
    Fact("sglang_retract_decode", "SGLang", "main, since sgl-project/sglang#9989 (September 2025)",
         "**SGLang's retraction** (`retract_decode`) sends back the requests with the fewest generated "
         "tokens first until the next decode step of the rest fits (before #9989: until 20 tokens per "
         "survivor were free).",
         "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/managers/schedule_batch.py",
         "schedule_batch.py", _TODAY),
    Fact("trtllm_guaranteed_no_evict", "TensorRT-LLM", "main",
         "**TensorRT-LLM's `GUARANTEED_NO_EVICT`** capacity scheduler subtracts from the free blocks "
         "what every request in progress still needs to reach its `maxNewTokens`, and starts a new "
         "request only if all of its own blocks to completion fit in the rest.",
         "https://github.com/NVIDIA/TensorRT-LLM/blob/main/cpp/tensorrt_llm/batch_manager/"
         "capacityScheduler.cpp", "capacityScheduler.cpp", _TODAY),
    Fact("flashinfer_mixed", "FlashInfer", "main",
         "**FlashInfer** provides the kernels such engines call for a mixed batch: its batch prefill and "
         "decode attention read the same paged cache through a page table.",
         "https://docs.flashinfer.ai", "docs.flashinfer.ai", _OLD),
    Fact("disaggregated", "DistServe, Mooncake", "the papers (OSDI 2024, FAST 2025)",
         "Engines serving very large models run prefill and decode on different GPUs (*disaggregated* "
         "serving, as in DistServe and Mooncake), so the two kinds of work stop competing for the same "
         "steps.",
         "https://arxiv.org/abs/2401.09670", "DistServe, arXiv:2401.09670", _OLD),
    Fact("vllm_v0_history", "vLLM", "v0.1 (June 2023) and vllm-project/vllm#658 (August 2023)",
         "vLLM v0.1, its first release, put new prompts into the same step as the running "
         "requests' decodes; weeks later, before the paper appeared, "
         "[vllm-project/vllm#658](https://github.com/vllm-project/vllm/pull/658) made each v0 step run "
         "new prompts or decodes, never both, prompts first.",
         "https://github.com/vllm-project/vllm/pull/658", "vllm-project/vllm#658", _OLD,
         used_in=("10", "11", "12"),
         contradicted_by=(r"vLLM v0,? as released,? ran", r"as released ran prefill-only")),
    Fact("vllm_default_sampling", "vLLM", "main (`LLM.get_default_sampling_params`)",
         "`vllm.LLM.generate` without sampling parameters takes the model's `generation_config` "
         "(`get_default_sampling_params`), and samples with temperature 1.0 only where the model gives none.",
         VLLM + "vllm/entrypoints/llm.py", "vllm/entrypoints/llm.py", _NOW,
         used_in=("10b",),
         contradicted_by=(r"vLLM samples by default \(temperature 1\.0\)",)),
    # ---- chapter 12: capacity at scale
    Fact("vllm_sizing", "vLLM", "v0.21 and later",
         "vLLM v1 sizes its cache the way chapter 4b does, after a profiling run: the blocks are what is "
         "left of `gpu_memory_utilization` of the GPU (0.92 by default since v0.21, 0.9 before) once the "
         "weights, the peak activations, the non-torch memory that grew during the run and, since v0.21, "
         "the profiled CUDA-graph memory are subtracted; the CUDA context and NCCL exist before its "
         "baseline snapshot and sit in the headroom. It reports \"GPU KV cache size: N tokens\" and "
         "\"Maximum concurrency for L tokens per request: Xx\" at start-up, and for hybrid models it "
         "counts per layer group, so a windowed layer's blocks stop at its window.",
         VLLM + "vllm/v1/core/kv_cache_utils.py", "vllm/v1/core/kv_cache_utils.py", _OLD),
    Fact("fp8_and_disagg", "vLLM, SGLang, TensorRT-LLM", "main",
         "Two levers chapter 12's simulator leaves out: an fp8 cache (`kv_cache_dtype=\"fp8\"`; SGLang and "
         "TensorRT-LLM have the same), which doubles the slots, and disaggregated prefill, which moves the "
         "prompts' memory to other GPUs.",
         "https://docs.vllm.ai/en/latest/configuration/engine_args.html", "vLLM engine arguments", _OLD),
    # ---- chapter 13: blocks that move
    Fact("vllm_kv_connectors", "vLLM", "main (docs: disaggregated prefilling, connector guides)",
         "**vLLM** moves K/V between engines through a *KV connector* named in `--kv-transfer-config`, "
         "for example `{\"kv_connector\":\"MooncakeConnector\",\"kv_role\":\"kv_producer\"}` on the "
         "prefill instance and `kv_consumer` on the decode one; its connectors include NIXL, LMCache and "
         "Mooncake. Its documentation says disaggregated prefill controls the tail of inter-token latency "
         "but does not improve throughput.",
         "https://docs.vllm.ai/en/latest/features/disagg_prefill/", "vLLM: disaggregated prefilling", _NOW),
    Fact("vllm_offloading_connector", "vLLM, SGLang", "main (`OffloadingConnector`, vllm.v1.kv_offload)",
         "**Offload** turns eviction into a copy. **vLLM**'s `OffloadingConnector` "
         "(`kv_role=\"kv_both\"`) adds a CPU block pool under the GPU pool: blocks move to host memory, "
         "and a prefix that the GPU no longer caches but the host does is loaded back instead of "
         "recomputed; LMCache plugs in the same way with more storage tiers. **SGLang**'s HiCache "
         "extends its radix tree to host memory and storage the same way.",
         "https://docs.vllm.ai/projects/ascend/en/latest/user_guide/feature_guide/kv_cache_cpu_offload/",
         "vLLM docs: KV cache CPU offload (OffloadingConnector)", _NOW,
         also=(("https://docs.vllm.ai/en/latest/configuration/engine_args.html", "vLLM engine arguments"),)),
    Fact("sglang_router", "SGLang", "0.1.5",
         "**SGLang**'s router (`sglang-router`, a Rust process in front of SGLang workers) picks a worker "
         "per request by a cache-aware, power-of-two, random or round-robin policy, and load-balances "
         "prefill/decode disaggregated deployments too.",
         "https://pypi.org/project/sglang-router/0.1.5/", "sglang-router on PyPI", _NOW),
    Fact("vllm_stack_load_aware", "vLLM production stack", "latest docs",
         "The **vLLM production stack**'s load-aware router scores each engine by "
         "`matched_tokens / prompt_tokens - beta * relative_load` (the matched tokens come from its LMCache "
         "controller) and sends the request to the best score: the same trade as chapter 13's "
         "prefix-aware router.",
         "https://docs.vllm.ai/projects/production-stack/en/latest/use_cases/loadaware-routing.html",
         "vLLM production stack: load aware routing", _NOW),
    Fact("llmd_paths", "llm-d", "docs (well-lit paths)",
         "**llm-d**'s deployment guides include precise prefix-cache routing on the cache state the model "
         "servers publish, a tiered prefix cache that offloads to CPU RAM, NVMe or network storage, and "
         "prefill/decode disaggregation.",
         "https://llm-d.ai/docs/guides", "llm-d: well-lit paths", _NOW),
    Fact("dynamo_parts", "NVIDIA Dynamo", "ai-dynamo (GitHub organization)",
         "**NVIDIA Dynamo** serves LLMs across GPU nodes with disaggregated prefill and decode, prefix- and "
         "load-aware request routing and distributed KV cache management; its transfer library NIXL moves "
         "the K/V between GPUs, CPU memory and storage.",
         "https://github.com/ai-dynamo", "github.com/ai-dynamo", _NOW),
    # the links a K/V block crosses (chapter 13's break-even: pagedlib.sim.tiers.LINK_BANDWIDTH_GBS)
    Fact("pcie_links", "PCI Express", "PCIe 4.0 and 5.0 base specifications (PCI-SIG, 2017 and 2019)",
         "A **PCIe 5.0** x16 link runs at 32 GT/s a lane, up to 128 GB/s in both directions together "
         "(PCI-SIG), so about 64 GB/s each way; **PCIe 4.0** x16 half that, about 32 GB/s each way. A "
         "GPU's copies to and from host memory cross it.",
         "https://www.computing.co.uk/ctg/news/3076591/pcie-5-spec-pci-sig-pcie-4",
         "PCI-SIG's PCIe 5.0 release, as reported by Computing (May 2019)", "2026-12-05"),
    Fact("nvlink_c2c", "NVIDIA Grace Hopper", "GH200 (NVLink-C2C)",
         "On a **GH200** Grace Hopper superchip the CPU and the GPU share **NVLink-C2C**, a coherent link "
         "of 900 GB/s in both directions together (450 GB/s each way), 7x PCIe 5.0 x16.",
         "https://developer.nvidia.com/blog/nvidia-grace-hopper-superchip-architecture-in-depth/",
         "NVIDIA Technical Blog: Grace Hopper Superchip Architecture In-Depth", "2026-12-05"),
    Fact("mooncake", "Mooncake", "kvcache-ai/Mooncake README",
         "**Mooncake**, the serving platform of Moonshot AI's Kimi, is a KVCache-centric disaggregated "
         "architecture (FAST 2025); its Transfer Engine moves K/V over (GPUDirect) RDMA, and vLLM and "
         "SGLang use it for disaggregated prefill.",
         "https://github.com/kvcache-ai/Mooncake", "github.com/kvcache-ai/Mooncake", _NOW),
    Fact("trtllm_memory_fraction", "TensorRT-LLM", "1.3 and 1.4",
         "TensorRT-LLM's paged cache takes a share of the memory left free after the weights "
         "(`free_gpu_memory_fraction`, 0.9 by default), one pool per attention window size.",
         TRTLLM_KVCONFIG, "KvCacheConfig", _NOW),
    # ---- chapter 12: deployments of 2026
    Fact("sglang_dp_attention", "SGLang", "v0.4 and later (`--enable-dp-attention`)",
         "**SGLang** serves DeepSeek's MLA models with data-parallel attention (`--enable-dp-attention`, "
         "usually with `--dp` equal to `--tp`): each GPU runs attention for its own requests and keeps "
         "only their latent cache, while the MoE layers stay split over the GPUs. Under plain tensor "
         "parallelism every GPU would keep a copy of the same latent cache, since MLA has a single KV "
         "head.",
         "https://lmsys.org/blog/2024-12-04-sglang-v0-4/", "SGLang v0.4 release blog (LMSYS)", _LATE),
    Fact("blackwell_gpus", "NVIDIA Blackwell", "datasheets: DGX B200, GB200 NVL72, HGX B300",
         "NVIDIA's Blackwell GPUs serve most new deployments: a **B200** has 180 GB of HBM3e (a DGX "
         "B200: 1,440 GB and 64 TB/s over 8 GPUs), a **GB200** 186 GB (a GB200 NVL72 rack: 13.4 TB "
         "and 576 TB/s over 72 GPUs) and a Blackwell Ultra **B300** 288 GB (HGX B300: 2.3 TB over 8), "
         "each about 8 TB/s, against an H200's 141 GB and 4.8 TB/s.",
         "https://www.nvidia.com/en-us/data-center/gb200-nvl72/", "NVIDIA GB200 NVL72, DGX B200 and "
         "HGX B300 pages", _LATE),
)

#: The facts each chapter's "In production today" box shows, in order (chapter number -> keys; a
#: notebook's chapter is its name up to the first underscore: "10b" for 10b_beside_other_engines).
BOXES: dict[str, tuple[str, ...]] = {
    "00": ("vllm_backends", "kernel_libraries"),
    "01": ("vllm_hybrid_cache", "kv_cache_dtype", "vllm_gpu_memory_utilization"),
    "02": ("allocation_paged", "trtllm_admission", "vllm_sglang_admission", "llamacpp_slots",
           "hf_static_cache"),
    "03": ("physical_blocks", "vattention"),
    "04": ("physical_blocks", "vllm_block_size"),
    "04b": ("vllm_block_size", "sglang_page_size", "trtllm_tokens_per_block", "fa3_paged_tma",
            "vllm_startup_log"),
    # vllm_null_block: chapter 5 states it in its prose (used_in), once is enough
    "05": ("vllm_kv_layout", "flashinfer_csr", "sglang_req_to_token"),
    # trtllm_block_reuse: block reuse is prefix caching, in chapter 7's box only
    "06": ("vllm_parallel_sampling", "sglang_radix_sharing", "flashinfer_cascade"),
    "07": ("vllm_prefix_caching", "sglang_radix_cache", "sglang_lpm", "kv_offload", "trtllm_block_reuse",
           "cascade_attention"),
    "08": ("vllm_unified_attention", "sglang_backends", "flashinfer_kernels", "trtllm_kernels"),
    "09": ("vllm_write_and_step", "vllm_unified_grid", "fa3_varlen", "flashinfer_pod"),
    # each fact of chapters 10 and 10b in one of their boxes: the step in 10, what surrounds it in 10b
    "10": ("vllm_v1_step", "sglang_scheduling", "trtllm_inflight", "flashinfer_mixed"),
    "10b": ("vllm_async_scheduling", "vllm_cudagraph_sizes"),
    "11": ("sglang_new_token_ratio", "sglang_retract_decode", "trtllm_guaranteed_no_evict",
           "disaggregated"),
    "12": ("vllm_sizing", "fp8_and_disagg", "trtllm_memory_fraction", "sglang_dp_attention",
           "blackwell_gpus"),
    "13": ("vllm_offloading_connector", "vllm_kv_connectors", "mooncake", "sglang_router",
           "vllm_stack_load_aware", "llmd_paths", "dynamo_parts", "pcie_links", "nvlink_c2c"),
}

#: Each chapter's section of book/references.md (its other sources).
REFERENCES: dict[str, str] = {
    **{ch: "chapters-0-to-4-kernels-the-kv-cache-reservations-fragmentation-and-pages"
       for ch in ("00", "01", "02", "03", "04", "04b")},
    **{ch: "chapters-5-to-7-page-tables-sharing-prefix-caching" for ch in ("05", "06", "07")},
    **{ch: "the-gpu-primer-and-chapters-8-9-kernels" for ch in ("08", "09")},
    **{ch: "chapter-10-a-serving-engine" for ch in ("10", "10b")},
    **{ch: "chapters-11-and-12-scheduling-and-capacity-at-scale" for ch in ("11", "12")},
    "13": "chapter-13-beyond-one-engine",
}

_BY_KEY = {f.key: f for f in FACTS}


def fact(key: str) -> Fact:
    """The registered fact ``key``; a KeyError names the keys there are."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"no fact {key!r} in pagedlib.facts; known: {', '.join(sorted(_BY_KEY))}") from None


def in_chapter(text: str, chapter: str) -> str:
    """A fact's ``text`` as chapter ``chapter`` shows it: "chapter 13's router" reads "this chapter's
    router", "the table of chapter 5" "the table of this chapter", inside that chapter (the list in
    book/references.md keeps the chapter's number)."""
    number = re.escape(chapter.lstrip("0") or "0")
    text = re.sub(rf"\b[Cc]hapter {number}'s\b", "this chapter's", text)
    return re.sub(rf"\b(of|in) chapter {number}\b(?!')", r"\1 this chapter", text)


def render_box(chapter: str) -> str:
    """The Markdown of chapter ``chapter``'s "In production today" box, between its markers.

    Plain HTML around Markdown, so it reads the same in JupyterLab, on Colab (which shows a MyST
    directive as a raw code fence) and on the site (the theme styles ``div.admonition``).
    """
    items = "\n".join(f"- {in_chapter(fact(key).text, chapter)} {fact(key).cite()}"
                      for key in BOXES[chapter])
    return (f"{BOX_START}\n<div class=\"admonition note\">\n"
            f"<p class=\"admonition-title\"><strong>{BOX_TITLE}</strong></p>\n\n"
            f"{items}\n\nEvery fact about another engine, with its source and date: "
            f"[facts about production engines]"
            f"({site_url('book/references.md', 'facts-about-production-engines')}); "
            f"this chapter's other sources: "
            f"[references]({site_url('book/references.md', REFERENCES[chapter])})."
            f"\n\n</div>\n{BOX_END}")


#: The list in book/references.md: a heading per engine, in this order (then any other engine, then a
#: fact about several engines, then the hardware). Each fact is listed once, under its engine's heading.
LIST_ORDER = ("vLLM", "SGLang", "TensorRT-LLM", "FlashInfer", "FlashAttention 3", "llama.cpp",
              "Hugging Face transformers", "vAttention", "Mooncake", "llm-d", "NVIDIA Dynamo")
SEVERAL, HARDWARE = "Several engines", "GPUs and links"
LIST_HEADING = {"vLLM production stack": "vLLM", "transformers": "Hugging Face transformers",
                "NVIDIA Blackwell": HARDWARE, "NVIDIA Grace Hopper": HARDWARE, "PCI Express": HARDWARE}
#: Facts the list folds into another's entry. A fact that opens with the same words as another goes
#: on in that one's entry, the shared opening said once:
LIST_CONTINUES = {"flashinfer_cascade": "flashinfer_kernels"}     # "FlashInfer is a kernel library:"
#: and a fact whose whole statement another makes (for another chapter's box) adds only its source:
LIST_RESTATED_BY = {"vllm_gpu_memory_utilization": "vllm_sizing", "vllm_startup_log": "vllm_sizing",
                    "kv_offload": "vllm_offloading_connector"}


def list_heading(f: Fact) -> str:
    """The heading of book/references.md's list that ``f`` is listed under."""
    if "," in f.engine:
        return SEVERAL
    return LIST_HEADING.get(f.engine, f.engine)


def _first_chapter(f: Fact) -> int:
    """Where the course states ``f`` first, as an index in the reading order (BOXES' order)."""
    chapters = list(BOXES)
    seen = [i for i, ch in enumerate(chapters) if f.key in BOXES[ch] or ch in f.used_in]
    return min(seen, default=len(chapters))


def _words(text: str) -> list[str]:
    return [re.sub(r"[*_`]", "", w).strip(".,:;").lower() for w in text.split()]


def _after_opening(text: str, lead: str) -> str:
    """``text`` without the words it opens with in common with ``lead``, its new first word capitalised."""
    mine, theirs, n = text.split(), _words(lead), 0
    while n < min(len(mine), len(theirs)) and _words(mine[n])[0] == theirs[n]:
        n += 1
    rest = " ".join(mine[n:])
    return rest[:1].upper() + rest[1:]


def render_list() -> str:
    """Every fact for book/references.md (between ``<!-- facts -->`` markers): under a heading per
    engine, each statement followed by its sources, version and date, in the order the chapters
    state them. A fact about several engines names them in its citation."""
    folded = {**LIST_CONTINUES, **LIST_RESTATED_BY}
    groups: dict[str, list[Fact]] = {}
    for f in sorted(FACTS, key=lambda f: (_first_chapter(f), f.key)):
        if f.key not in folded:
            groups.setdefault(list_heading(f), []).append(f)
    order = {h: i for i, h in enumerate(LIST_ORDER)}
    last = {SEVERAL: len(order) + 1, HARDWARE: len(order) + 2}
    headings = sorted(groups, key=lambda h: (order.get(h, last.get(h, len(order))), h.lower()))

    def cite(f: Fact, several: bool) -> str:
        links = [f.links()] + [fact(k).links() for k, lead in LIST_RESTATED_BY.items()
                               if lead == f.key and fact(k).source not in f.links()]
        engines = f"{f.engine}; " if several else ""
        return f"({engines}{'; '.join(links)}; {f.version}; checked {f.checked})"

    lines = []
    for heading in headings:
        lines += ["", f"### {heading}", ""]
        for f in groups[heading]:
            several = heading in (SEVERAL, HARDWARE)
            parts = [(f.text, cite(f, several))] + [
                (_after_opening(fact(k).text, f.text), cite(fact(k), several))
                for k, lead in LIST_CONTINUES.items() if lead == f.key]
            # a citation said once where the statements that follow each other share it
            lines.append("- " + " ".join(text + ("" if i + 1 < len(parts) and parts[i + 1][1] == source
                                                 else f" {source}")
                                         for i, (text, source) in enumerate(parts)))
    return "\n".join(lines[1:])


def normalise(text: str) -> str:
    """Text with its runs of white space made one space (a Markdown line break is a space)."""
    return re.sub(r"\s+", " ", text).strip()
