/*
 * Steppers: step-by-step views that run in the page, no kernel, no network.
 *
 *   <div class="pagedlib-stepper" data-stepper="online-softmax" data-scores="[...]" data-values="[...]"
 *        data-tile="4">   chapter 8: m, alpha, l, acc and out after each tile of scores
 *   <div class="pagedlib-stepper" data-stepper="refcount" data-blocks="8" data-block-size="4"
 *        data-script='[["allocate", "a", 6], ["fork", "a", "b"], ["append", "b"], ...]'>
 *                         chapter 6: block tables, ref counts, the free list and the copies after each
 *                         operation of a fork / copy-on-write script
 *
 * The numbers follow the course's Python exactly: onlineSoftmax is
 * pagedlib.attention.reference.online_softmax_steps (float64), RefcountPool is
 * pagedlib.exercises.ch06.SharingPool (the reference of the chapter's exercise). tests/test_steppers.py
 * compares them in Chromium, and steps the widgets at 400 and 1400 px. Inside a Jupyter markdown cell
 * the div shows its fallback text (no script runs there).
 */
(function (root) {
  "use strict";

  // ---- the online softmax (pagedlib.attention.reference.online_softmax_steps) --------------------
  function onlineSoftmax(scores, values, tile) {
    if (!(tile >= 1)) throw new Error(`tile must be at least 1; got ${tile}`);
    let m = -Infinity, l = 0, acc = 0;
    const steps = [];
    for (let start = 0; start < scores.length; start += tile) {
      const s = scores.slice(start, start + tile), v = values.slice(start, start + tile);
      const tileMax = Math.max(...s);
      const mNew = Math.max(m, tileMax);
      const alpha = Math.exp(m - mNew);          // exp(-inf) = 0 on the first tile
      const p = s.map((x) => Math.exp(x - mNew));
      l = l * alpha + p.reduce((a, b) => a + b, 0);
      acc = acc * alpha + p.reduce((a, x, i) => a + x * v[i], 0);
      m = mNew;
      steps.push({ start, end: start + s.length, tile_max: tileMax, m, alpha, l, acc, out: acc / l });
    }
    return steps;
  }

  function exactSoftmax(scores, values) {
    const top = Math.max(...scores);
    const w = scores.map((s) => Math.exp(s - top));
    const total = w.reduce((a, b) => a + b, 0);
    return w.reduce((a, x, i) => a + x * values[i], 0) / total;
  }

  // ---- ref counts (pagedlib.exercises.ch06.SharingPool) -------------------------------------------
  class RefcountPool {
    constructor(numBlocks, blockSize) {
      this.blockSize = blockSize;
      this.free = Array.from({ length: numBlocks }, (_, i) => i);   // handed out from the left
      this.ref = new Array(numBlocks).fill(0);
      this.tables = {};
      this.lens = {};
    }
    newBlock() {
      if (!this.free.length) throw new Error("out of blocks");
      const b = this.free.shift();
      this.ref[b] = 1;
      return b;
    }
    release(b) {
      this.ref[b] -= 1;
      if (this.ref[b] === 0) this.free.push(b);
    }
    allocate(seq, n) {
      const blocks = Math.ceil(n / this.blockSize);
      this.tables[seq] = Array.from({ length: blocks }, () => this.newBlock());
      this.lens[seq] = n;
      return [];
    }
    free_(seq) {
      for (const b of this.tables[seq].slice().reverse()) this.release(b);
      delete this.tables[seq];
      delete this.lens[seq];
      return [];
    }
    fork(parent, child) {
      this.tables[child] = this.tables[parent].slice();
      this.lens[child] = this.lens[parent];
      for (const b of this.tables[child]) this.ref[b] += 1;
      return [];
    }
    append(seq) {
      const table = this.tables[seq], n = this.lens[seq], copies = [];
      if (n % this.blockSize === 0) table.push(this.newBlock());
      else if (this.ref[table[table.length - 1]] > 1) {
        const src = table[table.length - 1], dst = this.newBlock();
        this.release(src);
        table[table.length - 1] = dst;
        copies.push([src, dst]);
      }
      this.lens[seq] = n + 1;
      return copies;
    }
    apply([op, ...args]) {
      if (op === "allocate") return this.allocate(args[0], args[1]);
      if (op === "fork") return this.fork(args[0], args[1]);
      if (op === "append") return this.append(args[0]);
      if (op === "free") return this.free_(args[0]);
      throw new Error(`unknown operation ${op}`);
    }
    state(copies) {
      return { tables: JSON.parse(JSON.stringify(this.tables)), lens: { ...this.lens }, ref: this.ref.slice(),
        free: this.free.slice(), copies };
    }
  }

  function refcountSteps(numBlocks, blockSize, script) {
    const pool = new RefcountPool(numBlocks, blockSize);
    const out = [pool.state([])];
    for (const step of script) out.push(pool.state(pool.apply(step)));
    return out;
  }

  // ---- drawing ------------------------------------------------------------------------------------
  const fmt = (x) => {
    if (x === -Infinity) return "−∞";
    if (x === 0) return "0";
    const a = Math.abs(x);
    const text = a >= 1e4 || a < 1e-3 ? x.toExponential(3) : String(parseFloat(x.toPrecision(4)));
    return text.replace("-", "−");
  };

  function el(tag, attrs = {}, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function controls(box, onStep) {
    const bar = el("div", { class: "pagedlib-stepper-controls" });
    const back = el("button", { type: "button", "data-testid": "stepper-back" }, "◀ Back");
    const next = el("button", { type: "button", "data-testid": "stepper-next" }, "Next ▶");
    const reset = el("button", { type: "button", "data-testid": "stepper-reset" }, "Start over");
    const where = el("span", { class: "pagedlib-stepper-where", "data-testid": "stepper-where" });
    bar.append(back, next, reset, where);
    back.addEventListener("click", () => onStep(-1));
    next.addEventListener("click", () => onStep(+1));
    reset.addEventListener("click", () => onStep(0));
    box.append(bar);
    return { back, next, where };
  }

  function mountOnlineSoftmax(box) {
    const scores = JSON.parse(box.dataset.scores), values = JSON.parse(box.dataset.values);
    let tile = parseInt(box.dataset.tile || "4", 10), at = 0, steps;
    box.replaceChildren();
    box.append(el("p", { class: "pagedlib-stepper-title" },
      `One query's ${scores.length} scores and values, read one tile at a time: after each tile the ` +
      "kernel holds only m, ℓ and acc."));
    const tileBar = el("div", { class: "pagedlib-stepper-controls" });
    const label = el("label", {}, "Tile size: ");
    const select = el("select", { "data-testid": "stepper-tile" });
    label.append(select);
    for (const t of [1, 2, 3, 4, 6, scores.length]) {
      const o = el("option", { value: String(t) }, String(t));
      if (t === tile) o.selected = true;
      select.append(o);
    }
    tileBar.append(label);
    box.append(tileBar);
    const ui = controls(box, (d) => { at = d === 0 ? 0 : Math.min(Math.max(at + d, 0), steps.length); draw(); });
    const wrap = el("div", { class: "pagedlib-stepper-table" });
    const table = el("table", { "data-testid": "stepper-table" });
    wrap.append(table);
    box.append(wrap);
    const note = el("p", { class: "pagedlib-stepper-note", "data-testid": "stepper-note" });
    box.append(note);
    const exact = exactSoftmax(scores, values);
    select.addEventListener("change", () => { tile = parseInt(select.value, 10); at = 0; steps = onlineSoftmax(scores, values, tile); draw(); });
    steps = onlineSoftmax(scores, values, tile);

    function draw() {
      table.replaceChildren();
      const head = el("tr");
      // data-col names each column: on a phone (exercises.css) only tile, m, α, ℓ and acc are
      // shown, the state the kernel keeps; the note under the table gives out
      const cols = ["tile", "scores", "tile-max", "m", "alpha", "l", "acc", "out"];
      ["tile: tokens", "scores", "tile max", "m", "α = e^(m_old − m)", "ℓ", "acc", "out = acc / ℓ"]
        .forEach((h, c) => head.append(el("th", { "data-col": cols[c] }, h)));
      table.append(head);
      steps.slice(0, at).forEach((st, i) => {
        const row = el("tr", { class: i === at - 1 ? "pagedlib-current" : "", "data-step": String(i) });
        const cells = [`${i + 1}: ${st.start}–${st.end - 1}`,
          scores.slice(st.start, st.end).map(fmt).join(", "), fmt(st.tile_max), fmt(st.m),
          i === 0 ? "0 (nothing yet)" : fmt(st.alpha), fmt(st.l), fmt(st.acc), fmt(st.out)];
        cells.forEach((c, k) => row.append(el("td", { "data-col": cols[k] }, c)));
        table.append(row);
      });
      ui.back.disabled = at === 0;
      ui.next.disabled = at === steps.length;
      ui.where.textContent = `tile ${at} of ${steps.length}`;
      if (at === 0) {
        note.textContent = "Start: m = −∞, ℓ = 0, acc = 0. Press Next to read the first tile.";
      } else {
        const st = steps[at - 1];
        const rose = at > 1 && st.m > steps[at - 2].m;
        note.textContent = (rose ? `This tile raised the max to ${fmt(st.m)}: ℓ and acc were multiplied by ` +
          `α = ${fmt(st.alpha)} before its scores were added. ` : at > 1 ? "The max did not change: α = 1. " : "") +
          `Out so far: ${fmt(st.out)}; softmax(scores) @ values over all tokens: ${fmt(exact)}` +
          (at === steps.length ? " (the same: done)." : ".");
      }
      box.pagedlibSteps = steps;
      box.dataset.at = String(at);
    }
    draw();
  }

  function mountRefcount(box) {
    const script = JSON.parse(box.dataset.script);
    const numBlocks = parseInt(box.dataset.blocks, 10), blockSize = parseInt(box.dataset.blockSize, 10);
    const states = refcountSteps(numBlocks, blockSize, script);
    let at = 0;
    box.replaceChildren();
    box.append(el("p", { class: "pagedlib-stepper-title" },
      `A pool of ${numBlocks} blocks of ${blockSize} tokens; step through the script one operation at a time.`));
    const ui = controls(box, (d) => { at = d === 0 ? 0 : Math.min(Math.max(at + d, 0), script.length); draw(); });
    const op = el("p", { class: "pagedlib-stepper-note", "data-testid": "stepper-op" });
    box.append(op);
    const wrap = el("div", { class: "pagedlib-stepper-table" });
    const tables = el("table", { "data-testid": "stepper-table" });
    const refs = el("table", { "data-testid": "stepper-refs" });
    wrap.append(tables, el("br"), refs);
    box.append(wrap);
    const free = el("p", { class: "pagedlib-stepper-note", "data-testid": "stepper-free" });
    box.append(free);
    const say = ([o, a, b]) => o === "allocate" ? `allocate ${a} with ${b} tokens` : o === "fork" ?
      `fork ${a} into ${b}` : o === "append" ? `append one token to ${a}` : `free ${a}`;

    function appendNote(seq) {
      const before = states[at - 1].tables[seq], after = states[at].tables[seq];
      return after.length > before.length ?
        `No copy: ${seq}'s last block was full, so a new block, ${after[after.length - 1]}, is added.` :
        `No copy: ${seq} alone holds its last block, block ${after[after.length - 1]}, and writes into it in place.`;
    }

    function draw() {
      const st = states[at];
      op.textContent = at === 0 ? "Start: every block is free." :
        `Step ${at}: ${say(script[at - 1])}. ` + (st.copies.length ? st.copies.map(([s, d]) =>
          `Copy on write: block ${s} was shared and partly filled, so its rows are copied to block ${d}.`).join(" ") :
          script[at - 1][0] === "append" ? appendNote(script[at - 1][1]) : "");
      tables.replaceChildren();
      const h = el("tr");
      h.append(el("th", {}, "sequence"), el("th", {}, "tokens"), el("th", {}, "block table"));
      tables.append(h);
      for (const [seq, table] of Object.entries(st.tables)) {
        const row = el("tr", { "data-seq": seq });
        row.append(el("td", {}, seq), el("td", {}, String(st.lens[seq])), el("td", {}, "[" + table.join(", ") + "]"));
        tables.append(row);
      }
      refs.replaceChildren();
      const r1 = el("tr"), r2 = el("tr");
      r1.append(el("th", {}, "block"));
      r2.append(el("th", {}, "ref count"));
      st.ref.forEach((r, b) => {
        r1.append(el("td", {}, String(b)));
        r2.append(el("td", { class: r > 1 ? "pagedlib-current" : "", title: r ? "" : "free" }, r ? String(r) : "·"));
      });
      refs.append(r1, r2);
      free.textContent = `Free list, handed out from the left: [${st.free.join(", ")}] (· marks a free block; ` +
        "a ref count above 1 is highlighted: that block is shared).";
      ui.back.disabled = at === 0;
      ui.next.disabled = at === script.length;
      ui.where.textContent = `step ${at} of ${script.length}`;
      box.pagedlibStates = states;
      box.dataset.at = String(at);
    }
    draw();
  }

  const MOUNT = { "online-softmax": mountOnlineSoftmax, refcount: mountRefcount };
  const api = { onlineSoftmax, exactSoftmax, RefcountPool, refcountSteps };
  if (typeof module !== "undefined" && module.exports) {
    module.exports = api;
  } else {
    root.pagedlibSteppers = api;
    const start = () => document.querySelectorAll(".pagedlib-stepper[data-stepper]").forEach((box) => {
      const mount = MOUNT[box.dataset.stepper];
      if (mount) { mount(box); box.classList.add("pagedlib-stepper-ready"); }
    });
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
    else start();
  }
})(typeof window !== "undefined" ? window : globalThis);
