"""``python -m pagedlib.bench engine --against transformers``: pagedlib's ``LLM`` against the engine
a Python user reaches for first, ``transformers``' own continuous batching.

``transformers`` 5 ships a paged KV cache with its own block allocator and scheduler
(``ContinuousBatchingManager``, behind ``model.generate_batch``). Both engines serve the same
random-initialised model (a GPT-2 and a Llama with grouped-query attention) and the same
ShareGPT-like requests, each with its own ``max_new_tokens``, greedy. Runs alternate in one process
(pagedlib, transformers, pagedlib, ...) so that a machine shared with other work slows both alike;
each engine's warm-up runs outside the clock. Printed: generated tokens per second of each, per
second of wall clock (best run) and per second of the process's CPU time (which other work on a
shared machine does not inflate), their ratios for each pair of runs, time to first token (TTFT)
and time per output token (TPOT) percentiles (wall clock), and how many requests got identical
tokens from both. ``--save FILE`` adds the figures, with the command and machine, to a JSON record;
chapter 10 prints the course's (``pagedlib/data/peer_cpu.json``, read by :func:`measured`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import runtime
from ..engine.llm import LLM, SamplingParams
from ..output import TableView

MODELS = ("gpt2", "llama")        # random-initialised (the default); "smollm2": the real chat model


@dataclass
class Run:
    """One engine's run over the workload: outputs, wall time, and per-request latencies (seconds)."""

    outputs: list[list[int]]
    seconds: float         # wall clock
    cpu_seconds: float     # CPU time of the whole process (every thread): what the work cost
    ttft: list[float]      # request submitted -> its first token
    tpot: list[float]      # mean time between its later tokens (requests with >= 2 tokens)

    @property
    def tokens_per_s(self) -> float:
        return sum(map(len, self.outputs)) / self.seconds

    @property
    def tokens_per_cpu_s(self) -> float:
        return sum(map(len, self.outputs)) / self.cpu_seconds


def build_hf(kind: str, args):
    """A random-initialised transformers model of the kind asked for, in fp32 on the runtime's device.

    ``initializer_range`` is far above the usual 0.02 so logits are spread out (few near-ties for
    greedy decoding to break differently, :data:`NEAR_TIE`) and depend on every cached K/V row.
    """
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(args.seed)
    common = dict(vocab_size=args.vocab, initializer_range=0.3, attn_implementation=args.hf_attn)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=args.layers, n_head=args.heads, n_embd=args.embd,
                                         n_positions=args.max_len, **common)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                          num_key_value_heads=max(1, args.heads // 2),     # GQA
                                          hidden_size=args.embd, intermediate_size=3 * args.embd,
                                          max_position_embeddings=args.max_len, **common)
        model = transformers.LlamaForCausalLM(config)
    return model.eval().to(device=runtime.DEVICE, dtype=torch.float32)


def run_pagedlib(llm: LLM, prompts, budgets) -> Run:
    """Every request submitted at once, then steps until all are done; latencies from step ends."""
    start, cpu = time.perf_counter(), time.process_time()
    ids = [llm.add_request(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts, budgets)]
    first, done, waiting_first = {}, {}, set(ids)
    while llm.scheduler.has_unfinished():
        finished = llm.step()
        now = time.perf_counter()
        for rid in [r for r in waiting_first if llm._requests[r].samples[0].output]:
            first[rid] = now
            waiting_first.discard(rid)
        for rid in finished:
            done[rid] = now
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    outputs = [llm.pop_result(i) for i in ids]
    return Run(outputs, seconds, cpu, [first[i] - start for i in ids],
               [(done[i] - first[i]) / (n - 1) for i, n in zip(ids, budgets) if n > 1])


class HFEngine:
    """transformers' ``ContinuousBatchingManager`` over ``hf_model``, warmed up once (off the clock)."""

    def __init__(self, hf_model, num_blocks: int, page_size: int, max_batch_tokens: int,
                 prefix_sharing: bool = False, timeout_s: float = 60):
        self.timeout_s = timeout_s      # the longest wait for one result (a real model's step is slow)
        from transformers import ContinuousBatchingConfig, GenerationConfig
        self.model = hf_model
        self.generation_config = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                                                  max_new_tokens=16)
        # transformers names the page size `page_size` (5.24) or `block_size` (5.17)
        fields = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
        page_key = "page_size" if "page_size" in fields else "block_size"
        self.cb_config = ContinuousBatchingConfig(num_blocks=num_blocks, max_batch_tokens=max_batch_tokens,
                                                  allow_block_sharing=prefix_sharing, **{page_key: page_size})
        manager = self._manager()
        manager.warmup()
        self._keep(manager)

    def _manager(self):
        return self.model.init_continuous_batching(generation_config=self.generation_config,
                                                   continuous_batching_config=self.cb_config)

    def _keep(self, manager) -> None:
        """Stop the manager's thread but keep it (and its warm cache) for the next run."""
        if manager.is_running():
            manager.stop(block=True, keep_for_next_session=True)
        else:
            self.model._cached_continuous_batching_manager = manager

    def forget_prefixes(self, manager) -> None:
        """Drop the blocks an earlier run left cached for prefix sharing: each run starts cold."""
        processor = getattr(manager, "batch_processor", None)
        evict = getattr(getattr(processor, "cache", None), "evict_cached_blocks", None)
        if evict is not None:           # transformers 5.24 (5.17 has no prefix sharing to forget)
            evict()     # back to the pool, their hashes forgotten

    def run(self, prompts, budgets) -> Run:
        manager = self._manager()
        self.forget_prefixes(manager)
        start, cpu = time.perf_counter(), time.process_time()
        manager.start()
        ids = [manager.add_request(p, max_new_tokens=n, record_timestamps=True, eos_token_id=-1)
               for p, n in zip(prompts, budgets)]
        results = {}
        while len(results) < len(ids):
            result = manager.get_result(timeout=self.timeout_s)
            if result is None:
                raise RuntimeError(f"transformers' continuous batching returned nothing for {self.timeout_s} s "
                                   f"(its thread {'runs' if manager.is_running() else 'has stopped'})")
            if result.is_finished():
                results[result.request_id] = result
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        self._keep(manager)
        outs = [results[i] for i in ids]
        return Run([o.generated_tokens for o in outs], seconds, cpu,
                   [o.timestamps[0] - start for o in outs],
                   [(o.timestamps[-1] - o.timestamps[0]) / (len(o.timestamps) - 1)
                    for o in outs if len(o.timestamps) > 1])

    def close(self) -> None:
        self.model.destroy_cached_continuous_batching_manager()


def percentiles(values: list[float]) -> str:
    p50, p90, p99 = np.percentile(values, [50, 90, 99]) * 1e3
    return f"{p50:.1f} {p90:.1f} {p99:.1f}"


def compare(kind: str, args, prompts, budgets, hf=None, decode=None) -> dict:
    """Alternate ``args.runs`` runs of each engine on one model kind (``hf``: its transformers model,
    default a random one of ``kind``); print and return the figures. With ``args.prefix_caching``
    both engines share cached prefix blocks between requests (pagedlib's prefix cache, transformers'
    block sharing), each run starting with an empty cache. ``decode`` (token ids -> text), if given,
    prints the first two replies of each engine."""
    from ..models.loading import from_hf
    hf = build_hf(kind, args) if hf is None else hf
    model = from_hf(hf, backend=args.backend, dtype=torch.float32)
    num_usable_blocks = args.kv_slots // args.block_size
    caching = bool(getattr(args, "prefix_caching", False))
    fresh = lambda: LLM(model, num_usable_blocks, args.block_size, max_num_seqs=args.max_num_seqs,  # noqa: E731
                        enable_prefix_caching=caching)
    fresh().generate(prompts[:4], max_new_tokens=4, use_tqdm=False)                # warm-up
    peer = HFEngine(hf, num_blocks=max(1, args.kv_slots // args.hf_page_size), page_size=args.hf_page_size,
                    max_batch_tokens=args.hf_max_batch_tokens, prefix_sharing=caching,
                    timeout_s=600 if kind == "smollm2" else 60)
    peer.run(prompts[:4], [4] * min(4, len(prompts)))                               # warm-up
    ours, theirs, hits = [], [], 0
    for _ in range(args.runs):
        llm = fresh()                       # an empty prefix cache: no run reuses an earlier one's blocks
        ours.append(run_pagedlib(llm, prompts, budgets))
        hits = llm.metrics["prefix_hit_tokens"]
        theirs.append(peer.run(prompts, budgets))
    peer.close()
    same = sum(x == y for x, y in zip(ours[-1].outputs, theirs[-1].outputs))
    print(f"\n{kind}: {model.describe()}")
    runs_of = {"pagedlib": ours, "transformers": theirs}
    best = {name: max(runs, key=lambda r: r.tokens_per_cpu_s) for name, runs in runs_of.items()}
    print(TableView([[label, f"{max(r.tokens_per_s for r in runs_of[name]):.0f}",
                      f"{best[name].tokens_per_cpu_s:.0f}", percentiles(best[name].ttft),
                      percentiles(best[name].tpot)]
                     for name, label in (("pagedlib", "pagedlib LLM"),
                                         ("transformers", "transformers ContinuousBatching"))],
                    ["engine", "tokens/s wall", "tokens/CPU-s", "TTFT ms p50 p90 p99",
                     "TPOT ms p50 p90 p99"]).text())
    wall = [x.tokens_per_s / y.tokens_per_s for x, y in zip(ours, theirs)]
    cpu = [x.tokens_per_cpu_s / y.tokens_per_cpu_s for x, y in zip(ours, theirs)]
    print(f"ratio pagedlib / transformers, each pair of runs: wall {' '.join(f'{r:.2f}x' for r in wall)}; "
          f"CPU time {' '.join(f'{r:.2f}x' for r in cpu)} (median {np.median(cpu):.2f}x)")
    print(f"same tokens from both engines (last run): {same}/{len(prompts)} requests")
    for i in range(min(2, len(prompts)) if decode else 0):
        print(f"reply {i}, pagedlib:     {decode(ours[-1].outputs[i])!r}\n"
              f"reply {i}, transformers: {decode(theirs[-1].outputs[i])!r}")
    if caching:
        print(f"pagedlib's prefix cache: {hits} of {sum(map(len, prompts))} prompt tokens found cached")
    ours_right, ties = same, 0
    for i, (x, y) in enumerate(zip(ours[-1].outputs, theirs[-1].outputs)):
        if x != y:      # ask transformers' generate, one request alone, and how close the call was
            want = hf_generate_alone(hf, prompts[i], budgets[i])
            ours_right += x == want
            note = ""
            if x != want:
                at, gap = tie_gap(hf, prompts[i], x, want)
                ties += gap < NEAR_TIE
                note = (f"; pagedlib's token {at} is {'a near-tie' if gap < NEAR_TIE else 'NOT a near-tie'} "
                        f"(the two tokens' logits {gap:.1e} apart)")
            print(f"  request {i}: transformers' generate alone agrees with "
                  f"{'pagedlib' if x == want else 'continuous batching' if y == want else 'neither'}{note}")
    print(f"pagedlib's tokens equal transformers' generate: {ours_right}/{len(prompts)} requests"
          + (f", {ties} more a near-tie" if ties else ""))
    return {"model": kind, "requests": len(prompts), "setup": setup(args), "ratio": float(np.median(cpu)),
            "ratios": [round(r, 2) for r in cpu], "identical": ours_right, "near_ties": ties,
            "same_tokens": same, **({"prefix_hit_tokens": hits, "prompt_tokens": sum(map(len, prompts))}
                                    if caching else {}),
            "tokens_per_cpu_s": {k: round(r.tokens_per_cpu_s) for k, r in best.items()},
            "tpot_ms_p50": {k: round(float(np.median(r.tpot)) * 1e3, 1) for k, r in best.items()}}


# The comparison as measured on the course's 2-core CPU (written by ``--save``, printed in chapter 10).
MEASURED = Path(__file__).resolve().parent.parent / "data" / "peer_cpu.json"


# What a stored figure was measured with; two figures of the same model and setup replace each other.
SETUP = ("requests", "layers", "heads", "embd", "vocab", "max_len", "kv_slots", "block_size", "seed",
         "runs", "threads", "hf_attn", "hf_page_size", "hf_max_batch_tokens")
# The real model's chats: no shape to choose, a workload of real text instead.
SMOLLM2_SETUP = ("requests", "system", "new_tokens", "prefix_caching", "kv_slots", "block_size", "runs",
                 "threads", "hf_attn", "hf_page_size", "hf_max_batch_tokens")


def setup(args) -> dict:
    """The settings of a comparison (:data:`SETUP`, or :data:`SMOLLM2_SETUP` for the real model), as
    run (defaults filled in)."""
    names = SMOLLM2_SETUP if getattr(args, "models", None) == "smollm2" else SETUP
    if getattr(args, "workload", "sharegpt") == "equal" and names is SETUP:
        names = SETUP + ("workload", "prompt_len", "new_tokens")
    return {name: getattr(args, name, None) for name in names}


def command_of(args) -> str:
    """The command that repeats a comparison, every setting spelled out (defaults may change)."""
    options = [f"--{name.replace('_', '-')}" + ("" if value is True else f" {value}")
               for name, value in setup(args).items() if value is not None and value is not False]
    return " ".join(["python -m pagedlib.bench engine --against transformers", f"--models {args.models}",
                     *options] + ([f"--save {args.save}"] if args.save else []))


def _same_figure(result: dict) -> tuple:
    """Which stored figure a result replaces: the same model, measured with the same setup."""
    return result["model"], json.dumps(result["setup"], sort_keys=True)


def save(path: Path, results: list[dict], command: str) -> None:
    """Add ``results`` (each with the command that measured it) to the JSON record at ``path``
    (made if missing), replacing an earlier figure of the same model and setup."""
    import platform
    import transformers
    path.parent.mkdir(parents=True, exist_ok=True)
    record = json.loads(path.read_text()) if path.exists() else {"results": []}
    machine = (f"{platform.machine()} CPU, {os.cpu_count()} cores, torch {torch.__version__}, "
               f"transformers {transformers.__version__}, {torch.get_num_threads()} thread(s)")
    new = {_same_figure(r): {**r, "command": command, "machine": machine} for r in results}
    kept = [r for r in record["results"] if _same_figure(r) not in new]
    record["results"] = sorted(kept + list(new.values()), key=lambda r: (r["requests"], r["model"]))
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"saved to {path} (read it with pagedlib.bench.peer.measured({str(path)!r}))")


def measured(path: Path | str = MEASURED, models: tuple[str, ...] = MODELS,
             workload: str | None = None) -> list[dict]:
    """The stored figures of ``models`` (default: the random-initialised ones; ``("smollm2",)``: the
    real chat model): one dict per model and setup, as :func:`compare` returned it, with the command
    and machine that measured it. ``workload`` keeps only ``"sharegpt"`` (ShareGPT-like mixes) or
    ``"equal"`` (equal requests decoding together) figures. The default is the course's record,
    shipped with pagedlib."""
    return [r for r in json.loads(Path(path).read_text())["results"] if r["model"] in models
            and workload in (None, workload_of(r))]


def workload_of(result: dict) -> str:
    """``"equal"`` or ``"sharegpt"``: the workload a stored random-model figure was measured on."""
    return result["setup"].get("workload", "sharegpt")


PROGRAM = "python -m pagedlib.bench engine"


def _options(command: str) -> list[tuple[str, str | None]]:
    """A bench command's options after :data:`PROGRAM`, in order: (flag, value), None for a switch."""
    if not command.startswith(PROGRAM + " "):
        raise ValueError(f"command must start with {PROGRAM!r}; got {command[:40]!r}")
    words, options = command[len(PROGRAM):].split(), []
    for word in words:
        if word.startswith("--"):
            options.append((word, None))
        else:
            options[-1] = (options[-1][0], word)
    return options


def commands_apart(commands) -> tuple[str, list[str], list[list[str]]]:
    """Bench commands that differ only in some options' values, told once: the template (each varying
    value written as its option's name in capitals, as argparse's help does), the varying options, and
    each distinct command's values of them, in the order given. Commands with other options, or the
    same options in another order, raise ValueError: they do not share a template."""
    distinct = list(dict.fromkeys(commands))
    parsed = [_options(c) for c in distinct]
    flags = [flag for flag, _ in parsed[0]]
    for command, options in zip(distinct, parsed):
        if [flag for flag, _ in options] != flags:
            raise ValueError(f"the commands do not have the same options in the same order: "
                             f"{distinct[0]!r} and {command!r}")
    varying = [k for k in range(len(flags)) if len({options[k] for options in parsed}) > 1]
    words = [PROGRAM]
    for k, (flag, value) in enumerate(parsed[0]):
        value = flag[2:].upper().replace("-", "_") if k in varying else value
        words.append(flag if value is None else f"{flag} {value}")
    return (" ".join(words), [flags[k] for k in varying],
            [[options[k][1] for k in varying] for options in parsed])


def wrap_command(command: str, width: int = 48) -> str:
    """A bench command over lines of at most ``width`` characters, shell continuations included: the
    program on the first line, then as many ``--flag value`` pairs on each line as fit."""
    lines = [PROGRAM]
    for flag, value in _options(command):
        option = flag if value is None else f"{flag} {value}"
        if len(lines) > 1 and len(lines[-1]) + 1 + len(option) + 2 <= width:
            lines[-1] += " " + option
        else:
            lines.append("    " + option)
    return " \\\n".join(lines)


# Two fp32 engines may break a near-tie differently: matrix products over batches of different sizes
# round differently (about 1e-6 relative; logits here are about 10). Where pagedlib's token differs
# from transformers' generate, the two tokens' logits this close count as a tie, not a wrong token.
NEAR_TIE = 1e-4


def tie_gap(hf_model, prompt: list[int], ours: list[int], reference: list[int]) -> tuple[int, float]:
    """Where two greedy outputs first differ, and how far apart transformers' logits (on the reference's
    tokens up to there) put the two tokens chosen there."""
    at = next((k for k, (a, b) in enumerate(zip(ours, reference)) if a != b), None)
    if at is None:                   # one is a prefix of the other: a length, not a token, differs
        return min(len(ours), len(reference)), float("inf")
    ids = torch.tensor([prompt + reference[:at]], device=hf_model.device)
    with torch.inference_mode():
        logits = hf_model(ids).logits[0, -1].float()
    return at, abs(float(logits[reference[at]] - logits[ours[at]]))


def hf_generate_alone(hf_model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy ``generate`` for one request alone: the reference both engines must match."""
    ids = torch.tensor([prompt], device=hf_model.device)
    with torch.inference_mode():
        out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def add_arguments(parser) -> None:
    """The options of this comparison (the model and workload options are the engine bench's)."""
    parser.add_argument("--models", "--model", default=",".join(MODELS),
                        help=f"with --against: any of {MODELS} (random-initialised), comma-separated; or "
                             "smollm2, the real chat model (pagedlib.load_smollm2) on real chats")
    parser.add_argument("--workload", choices=("sharegpt", "equal"), default="sharegpt",
                        help="with --against on the random models: ShareGPT-like lengths (default), or equal "
                             "requests (--prompt-len tokens, --new-tokens each) that all decode together")
    parser.add_argument("--prompt-len", type=int, default=512, help="with --workload equal: tokens per prompt")
    parser.add_argument("--system", choices=("short", "long"), default="short",
                        help="with --model smollm2: the shared system prompt (long: a few hundred tokens)")
    parser.add_argument("--new-tokens", type=int, default=48,
                        help="with --model smollm2 or --workload equal: tokens each request generates "
                             "(end of turn ignored)")
    parser.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                        help="with --against: both engines share cached prefixes (pagedlib's prefix cache, "
                             "transformers' block sharing); default on for smollm2, off for the random models")
    parser.add_argument("--runs", type=int, default=3, help="with --against: alternating runs of each engine")
    parser.add_argument("--hf-attn", default="sdpa", choices=("sdpa", "eager"),
                        help="with --against: transformers' attention (eager becomes its paged|eager)")
    parser.add_argument("--hf-page-size", type=int, default=None,
                        help="with --against: transformers' page size (default 256; with --model smollm2 "
                             "--block-size, so that both engines share the same prefix blocks)")
    parser.add_argument("--hf-max-batch-tokens", type=int, default=None,
                        help="with --against: transformers' token budget per step (default: its own)")
    parser.add_argument("--save", default=None, metavar="JSON",
                        help=f"with --against: add the figures to this file (the course's: {MEASURED.name} "
                             "in pagedlib/data)")


def main(args, prompts, budgets) -> int:
    """The comparison for every model kind in ``args.models``; nonzero exit if any of pagedlib's
    outputs differs from transformers' own (continuous batching, or ``generate`` alone where the two
    disagree) other than by a near-tie (:data:`NEAR_TIE`). With ``args.save``, the figures are added
    to that JSON file."""
    print(f"transformers' continuous batching: attention {args.hf_attn!r}, page size {args.hf_page_size}, "
          f"max batch tokens {args.hf_max_batch_tokens}; {args.runs} alternating runs each, best shown")
    if args.models == "smollm2":
        results = [compare_smollm2(args)]
    else:
        results = [compare(kind, args, prompts, budgets) for kind in args.models.split(",")]
    if args.save:
        save(Path(args.save), results, command_of(args))
    return 0 if all(passes(r) for r in results) else 1


def passes(result: dict) -> bool:
    """Every pagedlib output equals transformers' ``generate``, or differs from it by a near-tie."""
    return result["identical"] + result["near_ties"] == result["requests"]


def smollm2_workload(args, tokenizer) -> tuple[list[list[int]], list[int]]:
    """``args.requests`` real chats (a shared system prompt, then one user's question, through the
    chat template) and each reply's length, ``args.new_tokens``."""
    from . import chats
    from ..models.smollm2 import chat_ids
    system = chats.LONG_SYSTEM if args.system == "long" else chats.SYSTEM
    prompts = [chat_ids(tokenizer, chats.chat(q, system)) for q in chats.questions(args.requests)]
    return prompts, [args.new_tokens] * len(prompts)


def compare_smollm2(args) -> dict:
    """The comparison on the real model, SmolLM2-135M-Instruct (fp32), over real chats."""
    from ..models.smollm2 import load_smollm2_hf
    hf, tokenizer = load_smollm2_hf()
    hf = hf.to(runtime.DEVICE)
    hf.config._attn_implementation = args.hf_attn
    prompts, budgets = smollm2_workload(args, tokenizer)
    print(f"workload: {len(prompts)} chats, {args.system} system prompt ({_shared(prompts)} tokens shared "
          f"by every prompt), prompts {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
          f"{args.new_tokens} new tokens each")
    return compare("smollm2", args, prompts, budgets, hf=hf, decode=tokenizer.decode)


def _shared(prompts) -> int:
    """Tokens at the start of every prompt (the system prompt and the template around it)."""
    first = prompts[0]
    return min(next((k for k, (a, b) in enumerate(zip(first, p)) if a != b), min(len(first), len(p)))
               for p in prompts[1:]) if len(prompts) > 1 else len(first)
