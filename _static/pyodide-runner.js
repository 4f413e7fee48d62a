/* Run and Check for the write-a-function exercises, in the page (book/_ext/pyodide_runner.py writes
 * each code box). Nothing loads until a reader presses Run or Check: then a worker
 * (pyodide-worker.mjs) loads Pyodide and the course's pagedlib modules, served with the site, and
 * runs the code box as the notebook runs the exercise's cell; Check also judges the function with the
 * exercise's own checker, so the verdict is the notebook's. One worker serves every box of the page;
 * a run that takes longer than LIMIT_S stops it (the next run starts a new one).
 * Keyboard: Tab in the code box indents; Esc, then Tab, moves on. Status and verdict are announced.
 */
(function () {
  "use strict";
  const LIMIT_S = 60;
  const LABELS = { correct: "Correct", incorrect: "Incorrect", "not attempted": "Not attempted yet" };
  const script = document.currentScript;
  const staticBase = script ? new URL(".", script.src) : null;
  let worker = null, nextId = 1;
  const pending = new Map();

  // the messages' inline Markdown, as the value answers' box renders it (exercises.js)
  function inlineHtml(text) {
    if (window.pagedlibExercises) return window.pagedlibExercises.inlineHtml(text);
    const span = document.createElement("span");
    span.textContent = text;
    return span.innerHTML;
  }

  function available() {
    if (!staticBase || !/^https?:$/.test(location.protocol) || typeof Worker === "undefined") {
      return Promise.resolve(false);
    }
    return fetch(new URL("pyodide/pyodide-lock.json", staticBase))
      .then((r) => r.ok, () => false);
  }

  function getWorker() {
    if (!worker) {
      worker = new Worker(new URL("pyodide-worker.mjs", staticBase), { type: "module" });
      worker.onmessage = (event) => {
        const job = pending.get(event.data.id);
        if (job) job.on(event.data);
      };
      worker.onerror = () => {
        for (const job of pending.values()) job.on({ type: "unavailable", error: "the worker failed" });
      };
    }
    return worker;
  }

  function stopWorker() {
    if (worker) worker.terminate();
    worker = null;
    for (const job of [...pending.values()]) job.on({ type: "stopped" });    // other boxes' runs
  }

  let availability = null;

  function request(message, onStatus, limitS) {
    availability = availability || available();
    return availability.then((ok) => new Promise((resolve) => {
      if (!ok) { resolve({ type: "unavailable" }); return; }
      const id = nextId++;
      let timer = null;
      const finish = (data) => { clearTimeout(timer); pending.delete(id); resolve(data); };
      pending.set(id, { on: (data) => {
        if (data.type === "loading") onStatus("Loading Python (the first time takes a few seconds)...");
        else if (data.type === "running") {
          onStatus("Running...");
          timer = setTimeout(() => { finish({ type: "timeout" }); stopWorker(); }, limitS * 1000);
        } else finish(data);
      } });
      getWorker().postMessage({ id, ...message });
    }));
  }

  function wire(box) {
    const name = box.dataset.runnerFor;
    const answer = box.dataset.answerName;
    const code = box.querySelector('[data-testid="code"]');
    const run = box.querySelector('[data-testid="run"]');
    const check = box.querySelector('[data-testid="check-code"]');
    const reset = box.querySelector('[data-testid="reset"]');
    const status = box.querySelector('[data-testid="runner-status"]');
    const output = box.querySelector('[data-testid="output"]');
    const verdict = box.querySelector('[data-testid="verdict"]');
    const starter = code.value;
    const setupNode = box.querySelector("script.pagedlib-runner-setup");
    const setup = setupNode ? setupNode.textContent.replace(/<\\\//g, "</") : "";
    let escaped = false;

    const setVerdict = (state, message) => {
      verdict.className = "pagedlib-verdict pagedlib-verdict-" + state.replace(" ", "-");
      verdict.dataset.state = state;
      verdict.innerHTML = `<strong>${LABELS[state]}</strong> ${inlineHtml(message)}`;
    };
    const clear = () => {
      verdict.textContent = ""; delete verdict.dataset.state; verdict.className = "pagedlib-verdict";
      output.textContent = ""; output.hidden = true;
    };

    const go = (judge) => {
      clear();
      run.disabled = check.disabled = true;
      status.textContent = "Starting Python...";
      const limitS = Number(box.dataset.limitS) || LIMIT_S;     // a test may shorten it
      request({ exercise: name, code: code.value, answer: judge ? answer : null, setup },
              (text) => { status.textContent = text; }, limitS)
        .then((data) => {
          run.disabled = check.disabled = false;
          if (data.type === "unavailable") {
            status.dataset.error = data.error || "no Pyodide files on the site";
            status.textContent = "Python could not be loaded on this page: open the chapter in Colab " +
              "(the link above) to run this exercise.";
            return;
          }
          if (data.type === "stopped") {
            status.textContent = "Python restarted (code in another box ran too long): press Run or Check again.";
            return;
          }
          if (data.type === "timeout") {
            status.textContent = "";
            setVerdict("incorrect", `your code ran for more than ${limitS} s: is there a loop that ` +
              "never ends? (Python restarts at your next Run.)");
            return;
          }
          const r = data.result;
          const text = (r.output || "") + (r.error ? r.error + "\n" : "");
          output.textContent = text;
          output.hidden = !text;
          if (r.error) {
            status.textContent = "Your code stopped with an error (shown below).";
          } else if (r.state) {
            status.textContent = "";
            setVerdict(r.state, r.message || "");
          } else {
            status.textContent = text ? "Ran; its output is below." : "Ran, and printed nothing.";
          }
        });
    };

    run.addEventListener("click", () => go(false));
    check.addEventListener("click", () => go(true));
    reset.addEventListener("click", () => { code.value = starter; clear(); status.textContent = "The starter code is back."; });
    code.addEventListener("keydown", (event) => {
      if (event.key === "Escape") { escaped = true; return; }
      if (event.key === "Tab" && !event.shiftKey && !escaped && !event.ctrlKey && !event.altKey && !event.metaKey) {
        event.preventDefault();
        const { selectionStart: s, selectionEnd: e } = code;
        code.setRangeText("    ", s, e, "end");
        return;
      }
      if ((event.ctrlKey || event.metaKey) && event.key === "Enter") { event.preventDefault(); go(true); return; }
      escaped = false;
    });
    // the code box takes the place of the starter cell it copies
    const cell = box.previousElementSibling;
    if (cell && cell.classList.contains("cell")) cell.classList.add("pagedlib-runner-replaced");
    box.hidden = false;
    box.classList.add("pagedlib-runner-ready");
  }

  const start = () => document.querySelectorAll(".pagedlib-runner[data-runner-for]").forEach(wire);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
