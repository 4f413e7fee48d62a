"""Sphinx extension: drop duplicate inline scripts from every page.

Sphinx 7.4 adds an inline script registered after the builder starts twice (sphinx-thebe's
``const THEBE_JS_URL = ...`` among them), and the second copy throws a SyntaxError in the browser
console on every page. This keeps the first copy of each (src, body) pair.
"""


def _dedupe(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = (getattr(script, "filename", None) or "", getattr(script, "attributes", {}).get("body", ""))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
