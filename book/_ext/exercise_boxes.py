"""Sphinx extension: one box per exercise on the site, made from the exercise registry at build time.

In a notebook an exercise is a statement (markdown, "**Exercise 2.** ..."), the starter cell that calls
``ex.NAME.check(...)``, a "# Uncomment for help" cell and the help cell that scripts/sync_notebooks.py
writes (``<div class="pagedlib-exercise-help" data-exercise="chNN.NAME">``). Jupyter and Colab show
those cells as they are. On the site this extension finds each help cell and puts, in ONE box:

- a head: "Exercise", its name and a link that opens the chapter in Colab at the starter cell;
- the statement once (the notebook's own; the registry's question only when the notebook has none);
- the starter cell, without its stored "Not attempted yet" output (nothing can run here);
- for an exercise whose answer is a value, an answer box: an input that takes the answer as typed in
  Python, Check and Hint buttons and a verdict, checked in the browser by _static/exercises.js with
  the exercise's declarative form (pagedlib.exercises.answers.answer_spec) written into the page;
- the hints and the solution in collapsed dropdowns, the solution as highlighted Python (with the
  theme's copy button) and its explanation as prose below it.

The "# Uncomment for help" cell is dropped on the site (the dropdowns do its job). Hints, messages and
the solution come from the registry, so the site never disagrees with ``.hint()`` and ``.check()``.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

from docutils import nodes

_HELP = re.compile(r'class="pagedlib-exercise-help" data-exercise="([^"]+)"')
_NOT_ATTEMPTED = ("Not attempted yet", "pagedlib-result")
_BLOCKS = (nodes.paragraph, nodes.bullet_list, nodes.enumerated_list, nodes.math_block, nodes.block_quote,
           nodes.literal_block, nodes.table, nodes.definition_list)


def _registry():
    from pagedlib.exercises import registry
    return registry()


def _is_code_cell(node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "cell_code"


def _cell_source(node) -> str:
    for child in node.findall(nodes.literal_block):
        return child.astext()
    return ""


def _starts_exercise(node) -> bool:
    """A paragraph that opens a statement: its first words, in bold, start with "Exercise" or
    "Predict" ("**Exercise 2.**", "**Predict first.**")."""
    if not isinstance(node, nodes.paragraph):
        return False
    children = [c for c in node.children if not (isinstance(c, nodes.Text) and not c.astext().strip())]
    return (bool(children) and isinstance(children[0], nodes.strong)
            and children[0].astext().strip().lower().startswith(("exercise", "predict")))


def _statement(siblings: list, end: int) -> list:
    """The statement's nodes: from the nearest "**Exercise ...**" paragraph before ``end``, or every
    block of a section whose title starts with "Exercise"; none when neither is there. A code cell
    between the statement and the starter cell (one that prints the exercise's inputs) comes with it;
    another exercise's cell never does."""
    i, cells = end - 1, 0
    while i >= 0:
        node = siblings[i]
        if _is_code_cell(node):
            source = _cell_source(node)
            cells += 1
            if cells > 2 or ".check(" in source or source.lstrip().startswith("# Uncomment for help"):
                return []
        elif not isinstance(node, _BLOCKS):
            break
        elif _starts_exercise(node):
            return siblings[i:end]
        i -= 1
    if (i >= 0 and isinstance(siblings[i], nodes.title)
            and siblings[i].astext().lower().startswith("exercise")):
        return siblings[i + 1:end]
    return []


def _inline(text: str) -> str:
    from pagedlib.exercises import _inline_html
    return _inline_html(text)


def _colab_url(app, docname: str, cell_id: str | None) -> str | None:
    options = app.config.html_theme_options or {}
    url = options.get("repository_url")
    if not url or "github.com/" not in url:
        return None
    branch = options.get("repository_branch") or "main"
    base = (options.get("path_to_docs") or "").strip("/")
    path = "/".join(p for p in (base, docname + ".ipynb") if p)
    link = f"https://colab.research.google.com/github/{url.split('github.com/', 1)[1].rstrip('/')}/blob/{branch}/{path}"
    # Colab keeps a notebook's cell ids and scrolls to one named after #scrollTo=
    return f"{link}#scrollTo={cell_id}" if cell_id else link


def _cell_ids(app, docname: str) -> list:
    try:
        import nbformat
        path = Path(app.env.doc2path(docname))
        if path.suffix != ".ipynb":
            return []
        return [c.get("id") for c in nbformat.read(path, as_version=4).cells]
    except Exception:  # noqa: BLE001 - a missing id only loses the link's anchor
        return []


def _answer_box(exercise) -> str:
    from pagedlib.exercises.answers import answer_spec
    spec = json.dumps(answer_spec(exercise), ensure_ascii=True).replace("</", "<\\/")
    slug = re.sub(r"[^a-z0-9]+", "-", exercise.name.lower())
    kind = type(exercise.reference).__name__
    example = {"int": "12", "float": "0.25", "list": "[1, 2]", "tuple": "(1, 2)", "str": "'A'"}.get(kind, "...")
    return (f'<div class="pagedlib-answer">'
            f'<label for="answer-{slug}">Your answer, as you would type it in Python:</label>'
            f'<div class="pagedlib-answer-row">'
            f'<input id="answer-{slug}" type="text" data-testid="answer" autocomplete="off" '
            f'autocapitalize="off" spellcheck="false" inputmode="text" placeholder="e.g. {example}">'
            f'<button type="button" class="pagedlib-check" data-testid="check">Check</button>'
            f'<button type="button" class="pagedlib-hint-button" data-testid="hint">Hint</button>'
            f'</div>'
            f'<div class="pagedlib-verdict" data-testid="verdict" role="status" aria-live="polite"></div>'
            f'<script type="application/json" class="pagedlib-answer-spec">{spec}</script>'
            f'</div>')


def _help_nodes(exercise) -> list:
    """The hints and the solution, collapsed; the solution's code as a highlighted Python block."""
    out = [nodes.raw("", f'<div class="pagedlib-exercise-help" data-exercise="{html.escape(exercise.name)}">',
                     format="html")]
    for n, text in enumerate(exercise.hints, 1):
        out.append(nodes.raw("", f'<details class="pagedlib-help pagedlib-hint"><summary>'
                                 f"{html.escape(exercise.hint_title(n))}</summary><p>{_inline(text)}</p>"
                                 f"</details>", format="html"))
    out.append(nodes.raw("", '<details class="pagedlib-help pagedlib-solution"><summary>Solution</summary>',
                         format="html"))
    code = exercise.solution_code()
    block = nodes.literal_block(code, code)
    block["language"] = "python"
    out.append(block)
    if exercise.explanation:
        out.append(nodes.raw("", f'<p class="pagedlib-solution-why">{_inline(exercise.explanation)}</p>',
                             format="html"))
    out.append(nodes.raw("", "</details></div>", format="html"))
    return out


def _drop_not_attempted(cell) -> None:
    """Remove the stored "Not attempted yet" output of a starter cell."""
    for output in list(cell.findall(nodes.container)):
        if output.get("nb_element") in ("cell_code_output",):
            for child in list(output.children):
                if any(mark in child.astext() or mark in str(child) for mark in _NOT_ATTEMPTED):
                    output.remove(child)
            if not output.children:
                output.parent.remove(output)


def build_boxes(app, doctree) -> None:
    docname = app.env.docname
    helps = [n for n in doctree.findall(nodes.raw) if _HELP.search(n.astext())]
    if not helps:
        return
    registry = _registry()
    ids = _cell_ids(app, docname)
    for raw in helps:
        name = _HELP.search(raw.astext()).group(1)
        exercise = registry.get(name)
        if exercise is None:
            continue
        parent = raw.parent
        siblings = list(parent.children)
        at = siblings.index(raw)
        attr = name.split(".", 1)[1]
        check_at, helpers = None, []
        for i in range(at - 1, -1, -1):
            node = siblings[i]
            if not _is_code_cell(node):
                break
            source = _cell_source(node)
            if f".{attr}.check(" in source:
                check_at = i
                break
            if source.lstrip().startswith("# Uncomment for help"):
                helpers.append(node)
                continue
            break
        if check_at is None:
            continue
        check = siblings[check_at]
        statement = _statement(siblings, check_at)
        for node in helpers:
            parent.remove(node)
        _drop_not_attempted(check)
        cell_index = check.get("cell_index")
        cell_id = ids[cell_index] if isinstance(cell_index, int) and cell_index < len(ids) else None
        colab = _colab_url(app, docname, cell_id)
        value = exercise.is_declarative
        attrs = f'class="pagedlib-exercise" data-exercise="{html.escape(name)}"'
        if value:
            attrs += f' data-answer-for="{html.escape(name)}"'
        head = (f"<div {attrs}><div class=\"pagedlib-exercise-head\"><span class=\"pagedlib-exercise-label\">"
                f"Exercise</span> <code>{html.escape(name)}</code>")
        if colab:
            head += (f' <a class="pagedlib-colab" href="{html.escape(colab)}" target="_blank" rel="noopener">'
                     f"Open in Colab</a>")
        head += "</div>"
        box = [nodes.raw("", head, format="html")]
        if statement:
            for node in statement:
                parent.remove(node)
            box += statement
        else:
            box.append(nodes.raw("", f'<p class="pagedlib-question">{_inline(exercise.question)}</p>',
                                 format="html"))
        parent.remove(check)
        box.append(check)
        if value:
            box.append(nodes.raw("", _answer_box(exercise), format="html"))
        box += _help_nodes(exercise)
        box.append(nodes.raw("", "</div>", format="html"))
        at = parent.index(raw)
        parent.remove(raw)
        for offset, node in enumerate(box):
            parent.insert(at + offset, node)
    # any other "# Uncomment for help" cell (one not next to its exercise's first check) goes too,
    # and so does the stored "Not attempted yet" of any later check cell
    for cell in [n for n in doctree.findall(nodes.container) if _is_code_cell(n)]:
        source = _cell_source(cell)
        if source.lstrip().startswith("# Uncomment for help") and cell.parent is not None:
            cell.parent.remove(cell)
        elif ".check(" in source:
            _drop_not_attempted(cell)


def setup(app):
    app.connect("doctree-read", build_boxes)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
