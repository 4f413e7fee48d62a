// The site's Python (a module worker, started by pyodide-runner.js when a reader first presses Run or
// Check): Pyodide from ./pyodide/ (served with the site, never a CDN), then the course's own pagedlib
// modules from ./pyodide/pagedlib.zip (made from the checkout at build time), then each request runs
// pagedlib.exercises.in_browser.run, the notebook's checker, and posts its result back.
const base = new URL("./pyodide/", import.meta.url);
let ready = null;

async function start() {
  const { loadPyodide } = await import(new URL("pyodide.mjs", base).href);
  const pyodide = await loadPyodide({ indexURL: base.href, stdout: () => {}, stderr: () => {} });
  const response = await fetch(new URL("pagedlib.zip", base));
  if (!response.ok) throw new Error(`pagedlib.zip: HTTP ${response.status}`);
  pyodide.unpackArchive(await response.arrayBuffer(), "zip", { extractDir: "/home/pyodide/course" });
  pyodide.runPython(`
import sys
sys.path.insert(0, "/home/pyodide/course")
from pagedlib.exercises import in_browser
`);
  return pyodide;
}

self.onmessage = async (event) => {
  const { id, exercise, code, answer, setup } = event.data;
  try {
    if (!ready) {
      ready = start();
      self.postMessage({ id, type: "loading" });
    }
    const pyodide = await ready;
    self.postMessage({ id, type: "running" });
    const run = pyodide.globals.get("in_browser").run;
    const result = run(exercise, code, answer || undefined, setup || "");   // JS null is not None in Pyodide
    const out = result.toJs({ dict_converter: Object.fromEntries });
    result.destroy();
    run.destroy();
    self.postMessage({ id, type: "result", result: out });
  } catch (error) {
    ready = null;
    self.postMessage({ id, type: "unavailable", error: String(error && error.message || error) });
  }
};
