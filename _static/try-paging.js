/*
 * "Try it": reserve-max vs paged KV-cache layouts, computed in the browser.
 *
 * The published book has no Python kernel, so this page redoes the capacity math of
 * pagedlib/memory/capacity.py (reserve_max_plan, paged_plan, Plan.capacity) in plain JavaScript and
 * draws it. tests/test_try_paging.py opens the page in headless Chromium and checks every number
 * against pagedlib itself. No framework and no network: the file works from file:// as well as
 * from the website.
 *
 * Jupyter Book loads every script in _static/ on every page, so this one does nothing unless the
 * page holds a <div data-widget="try-paging"> (see book/try-paging.md for the markup).
 */
(function () {
  "use strict";

  var SEED_LENGTHS = [512, 37, 1900, 128, 4];   // the seed lesson's five requests (tokens)
  var MAX_REQUESTS = 64;                         // more rows than this would not be readable
  var MAX_SLOTS = 1048576;                       // a sane upper bound for max length and pool size

  // ---------------------------------------------------------------------------------------------
  // The capacity math (the same formulas as pagedlib.memory.capacity)
  // ---------------------------------------------------------------------------------------------

  /** Whole blocks (pages) needed to hold `length` tokens: ceil(length / blockSize), as blocks_for. */
  function blocksFor(length, blockSize) {
    return Math.floor((length + blockSize - 1) / blockSize);
  }

  function sum(values) {
    return values.reduce(function (a, b) { return a + b; }, 0);
  }

  /** Every request gets a slot of maxLen tokens, however short it turns out to be. */
  function reserveMaxPlan(lengths, maxLen) {
    var perRequest = lengths.map(function () { return maxLen; });
    return { lengths: lengths, perRequest: perRequest, used: sum(lengths), allocated: sum(perRequest) };
  }

  /** Every request gets just enough whole pages: the last page's unused tail is the only waste. */
  function pagedPlan(lengths, blockSize) {
    var perRequest = lengths.map(function (n) { return blocksFor(n, blockSize) * blockSize; });
    return { lengths: lengths, perRequest: perRequest, used: sum(lengths), allocated: sum(perRequest) };
  }

  /** Share of the allocated slots that hold no K/V (0 to 1). */
  function wasteOf(plan) {
    return 1 - plan.used / plan.allocated;
  }

  /**
   * Requests of this mix that fit a pool of poolSlots: floor(poolSlots / (allocated / n)),
   * computed in whole numbers so that no rounding can push it across an integer.
   */
  function capacityOf(plan, poolSlots) {
    var n = plan.lengths.length;
    var q = Math.floor((poolSlots * n) / plan.allocated);
    if (q * plan.allocated > poolSlots * n) { q -= 1; }
    if ((q + 1) * plan.allocated <= poolSlots * n) { q += 1; }
    return q;
  }

  // ---------------------------------------------------------------------------------------------
  // Reading the inputs: every check returns {value} or {error}, and never touches the page
  // ---------------------------------------------------------------------------------------------

  function parseWholeNumber(text, what) {
    var t = String(text).trim().replace(/[_\u00a0\u202f]/g, "");
    if (t === "") { return { error: "Enter the " + what + " as a whole number of tokens." }; }
    if (/^-\s*\d/.test(t)) { return { error: "The " + what + " cannot be negative (got " + t + ")." }; }
    if (!/^\d+$/.test(t)) {
      return { error: "The " + what + " must be a whole number of tokens (got \u201c" + t + "\u201d)." };
    }
    var v = Number(t);
    if (v < 1) { return { error: "The " + what + " must be at least 1 token (got " + t + ")." }; }
    if (v > MAX_SLOTS) {
      return { error: "The " + what + " must be at most " + fmt(MAX_SLOTS) + " tokens (got " + fmt(v) + ")." };
    }
    return { value: v };
  }

  /** "512, 37, 1900" -> {value: [512, 37, 1900]}, or {error: "..."} naming the bad entry. */
  function parseLengths(text, maxLen) {
    var parts = String(text).split(",").map(function (p) { return p.trim(); });
    if (parts.length === 1 && parts[0] === "") {
      return { error: "Enter at least one request length, for example: 512, 37, 1900." };
    }
    if (parts.length > MAX_REQUESTS) {
      return { error: "Enter at most " + MAX_REQUESTS + " request lengths (got " + parts.length + ")." };
    }
    var lengths = [];
    for (var i = 0; i < parts.length; i++) {
      var p = parts[i];
      var where = "Request " + (i + 1);
      if (p === "") {
        return { error: where + " is empty: separate the lengths with single commas, e.g. 512, 37, 1900." };
      }
      var c = p.replace(/[_\u00a0\u202f]/g, "");
      if (/^-\s*\d+(\.\d*)?$/.test(c)) {
        return { error: where + " is " + p + ": a length cannot be negative. Use whole numbers of tokens, at least 1." };
      }
      if (!/^\d+$/.test(c)) {
        return { error: where + " is \u201c" + p + "\u201d, which is not a whole number of tokens. Use whole numbers separated by commas, e.g. 512, 37, 1900." };
      }
      var n = Number(c);
      if (n < 1) {
        return { error: where + " is 0 tokens: a request holds at least 1 token." };
      }
      if (n > maxLen) {
        return { error: where + " is " + fmt(n) + " tokens, longer than the max length (" + fmt(maxLen) + "). Shorten it or raise the max length." };
      }
      lengths.push(n);
    }
    return { value: lengths };
  }

  /** A random mix of chat-like requests: lengths spread evenly on a log scale from 1 to maxLen. */
  function randomLengths(maxLen) {
    var count = 3 + Math.floor(Math.random() * 6);   // 3 to 8 requests
    var out = [];
    for (var i = 0; i < count; i++) {
      out.push(Math.max(1, Math.min(maxLen, Math.round(Math.exp(Math.random() * Math.log(maxLen))))));
    }
    return out;
  }

  // ---------------------------------------------------------------------------------------------
  // Formatting
  // ---------------------------------------------------------------------------------------------

  function fmt(n) {
    return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  /** "1 token", "2,048 tokens": a count with its noun, singular for one. */
  function count(n, noun) {
    return fmt(n) + " " + noun + (Math.round(n) === 1 ? "" : "s");
  }

  function percent(fraction) {
    return (fraction * 100).toFixed(1) + "%";
  }

  function times(ratio) {
    return isFinite(ratio) ? ratio.toFixed(1) + "\u00d7" : "n/a";
  }

  // ---------------------------------------------------------------------------------------------
  // One widget: state, validation and drawing
  // ---------------------------------------------------------------------------------------------

  function TryPaging(root) {
    this.root = root;
    this.el = {};
    var self = this;
    root.querySelectorAll("[data-testid]").forEach(function (node) {
      self.el[node.getAttribute("data-testid")] = node;
    });
    this.state = {
      mode: "reserve",
      blockSize: 16,
      lengths: SEED_LENGTHS.slice(),
      maxLen: 2048,
      pool: 40960
    };
    this.errors = {};   // input testid -> message, for the inputs that hold bad text right now
    this.readInitialControls();
    this.bind();
    this.render();
    root.classList.add("tp-ready");
  }

  /** Start from what the markup says (so the defaults live in one place: book/try-paging.md). */
  TryPaging.prototype.readInitialControls = function () {
    var el = this.el;
    this.state.mode = el["mode-paged"].checked ? "paged" : "reserve";
    this.state.blockSize = Math.pow(2, Number(el["page-size"].value));
    var maxLen = parseWholeNumber(el["max-len"].value, "max length");
    if (maxLen.value) { this.state.maxLen = maxLen.value; }
    var pool = parseWholeNumber(el["pool-size"].value, "pool size");
    if (pool.value) { this.state.pool = pool.value; }
    var lengths = parseLengths(el["lengths"].value, this.state.maxLen);
    if (lengths.value) { this.state.lengths = lengths.value; }
  };

  TryPaging.prototype.bind = function () {
    var self = this, el = this.el;
    function onMode() { self.update({ mode: el["mode-paged"].checked ? "paged" : "reserve" }); }
    el["mode-reserve"].addEventListener("change", onMode);
    el["mode-paged"].addEventListener("change", onMode);
    el["page-size"].addEventListener("input", function () {
      self.update({ blockSize: Math.pow(2, Number(el["page-size"].value)) });
    });
    el["lengths"].addEventListener("change", function () { self.applyLengths(); });
    el["lengths"].addEventListener("keydown", function (e) {
      if (e.key === "Enter") { e.preventDefault(); self.applyLengths(); }
    });
    el["apply"].addEventListener("click", function () { self.applyLengths(); });
    el["random"].addEventListener("click", function () {
      el["lengths"].value = randomLengths(self.state.maxLen).join(", ");
      self.applyLengths();
    });
    el["reset"].addEventListener("click", function () {
      el["lengths"].value = SEED_LENGTHS.join(", ");
      el["max-len"].value = "2048";
      el["pool-size"].value = "40960";
      // the page size and the layout go back to the page's own starting values too
      el["page-size"].value = el["page-size"].defaultValue;
      el["mode-paged"].checked = el["mode-paged"].defaultChecked;
      el["mode-reserve"].checked = el["mode-reserve"].defaultChecked;
      // every field now holds good text: clear each one's error, message and red border
      ["lengths", "max-len", "pool-size"].forEach(function (testid) { self.accept(testid); });
      self.update({ lengths: SEED_LENGTHS.slice(), maxLen: 2048, pool: 40960,
                    blockSize: Math.pow(2, Number(el["page-size"].value)),
                    mode: el["mode-paged"].checked ? "paged" : "reserve" });
    });
    el["max-len"].addEventListener("change", function () { self.applyNumber("max-len", "max length", "maxLen"); });
    el["pool-size"].addEventListener("change", function () { self.applyNumber("pool-size", "pool size", "pool"); });
    var resizeTimer = null;
    window.addEventListener("resize", function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () { self.render(); }, 100);
    });
  };

  TryPaging.prototype.applyLengths = function () {
    if (this.tryLengths()) { this.recheckOthers("lengths"); }
  };

  TryPaging.prototype.applyNumber = function (testid, what, key) {
    if (this.tryNumber(testid, what, key)) { this.recheckOthers(testid); }
  };

  /** Apply the lengths box if its text is valid now; return whether it was. */
  TryPaging.prototype.tryLengths = function () {
    var parsed = parseLengths(this.el["lengths"].value, this.state.maxLen);
    if (parsed.error) { this.reject("lengths", parsed.error); return false; }
    this.accept("lengths");
    this.update({ lengths: parsed.value });
    return true;
  };

  /** Apply a number field if its text is valid now; return whether it was. */
  TryPaging.prototype.tryNumber = function (testid, what, key) {
    var parsed = parseWholeNumber(this.el[testid].value, what);
    if (parsed.error) { this.reject(testid, parsed.error); return false; }
    if (key === "maxLen") {
      var longest = Math.max.apply(null, this.state.lengths);
      if (parsed.value < longest) {
        this.reject(testid, "The max length (" + fmt(parsed.value) + ") is shorter than the longest request (" +
          fmt(longest) + " tokens). Raise it, or shorten that request first.");
        return false;
      }
    }
    this.accept(testid);
    var change = {};
    change[key] = parsed.value;
    this.update(change);
    return true;
  };

  /**
   * A good change in one field can make another field's rejected text valid (shorter requests
   * make a small max length fit; a larger max length admits longer requests). Re-check each field
   * still marked bad, so no red border or message outlives its reason.
   */
  TryPaging.prototype.recheckOthers = function (changed) {
    var self = this;
    var fields = { "lengths": null, "max-len": ["max length", "maxLen"], "pool-size": ["pool size", "pool"] };
    Object.keys(this.errors).forEach(function (testid) {
      if (testid === changed || !(testid in self.errors)) { return; }
      if (testid === "lengths") { self.tryLengths(); } else {
        self.tryNumber(testid, fields[testid][0], fields[testid][1]);
      }
    });
  };

  /** Bad input: say what is wrong and keep the last good state (nothing is recomputed). */
  TryPaging.prototype.reject = function (testid, message) {
    this.errors[testid] = message;
    this.el[testid].setAttribute("aria-invalid", "true");
    this.showMessage();
  };

  TryPaging.prototype.accept = function (testid) {
    delete this.errors[testid];
    this.el[testid].removeAttribute("aria-invalid");
    this.showMessage();
  };

  TryPaging.prototype.showMessage = function () {
    var keys = Object.keys(this.errors);
    var box = this.el["message"];
    if (keys.length === 0) {
      box.textContent = "";
      box.hidden = true;
    } else {
      box.textContent = this.errors[keys[keys.length - 1]] + " The numbers below still show the last valid input.";
      box.hidden = false;
    }
  };

  TryPaging.prototype.update = function (change) {
    for (var key in change) { this.state[key] = change[key]; }
    this.render();
  };

  /** Both plans for the current state, and the numbers the page shows. */
  TryPaging.prototype.compute = function () {
    var s = this.state;
    var reserve = reserveMaxPlan(s.lengths, s.maxLen);
    var paged = pagedPlan(s.lengths, s.blockSize);
    var plan = s.mode === "paged" ? paged : reserve;
    var reserveCapacity = capacityOf(reserve, s.pool);
    var capacity = capacityOf(plan, s.pool);
    return {
      plan: plan,
      waste: wasteOf(plan),
      capacity: capacity,
      ratio: reserveCapacity > 0 ? capacity / reserveCapacity : Infinity
    };
  };

  TryPaging.prototype.render = function () {
    var s = this.state, el = this.el, r = this.compute();
    var paged = s.mode === "paged";

    el["page-size"].disabled = !paged;
    el["page-size"].setAttribute("aria-valuetext", count(s.blockSize, "token"));
    el["page-size-value"].textContent = fmt(s.blockSize);
    if (el["page-size-unit"]) { el["page-size-unit"].textContent = s.blockSize === 1 ? "token" : "tokens"; }
    this.root.setAttribute("data-mode", s.mode);

    setNumber(el["used"], r.plan.used, fmt(r.plan.used));
    setNumber(el["allocated"], r.plan.allocated, fmt(r.plan.allocated));
    setNumber(el["waste"], r.waste, percent(r.waste));
    setNumber(el["capacity"], r.capacity, fmt(r.capacity));
    setNumber(el["ratio"], r.ratio, times(r.ratio));

    var layout = paged ? "Paged, " + fmt(s.blockSize) + "-token pages" : "Reserve-max, " + fmt(s.maxLen) + "-token slots";
    var fit = fmt(r.capacity) + (r.capacity === 1 ? " request fits" : " requests fit") + " the pool";
    // the capacity is the pool over the AVERAGE allocation: say so when one request alone is too big
    var largest = Math.max.apply(null, r.plan.perRequest);
    if (largest > s.pool) {
      fit = (r.capacity === 0 ? "no request fits the pool" : fit + " on average") +
        ", but the longest request alone needs " + count(largest, "slot") + ", more than the pool's " + fmt(s.pool);
    }
    var against = isFinite(r.ratio)
      ? (paged ? " (" + times(r.ratio) + " reserve-max)." : ".")
      : "; reserve-max fits none: the pool is smaller than one " + fmt(s.maxLen) + "-token reservation.";
    el["summary"].textContent = layout + ": " + fmt(r.plan.allocated) + " slots allocated for " +
      count(r.plan.used, "token") + " of K/V, waste " + percent(r.waste) + ", " + fit + against;

    this.drawRows(r.plan);
    this.drawPool(r);
  };

  function setNumber(node, value, text) {
    node.textContent = text;
    node.setAttribute("data-value", String(value));
  }

  /** One bar of `total` slots made of segments [{kind, slots}], widths in percent of the bar. */
  function bar(className, total, segments) {
    var div = document.createElement("div");
    div.className = className;
    segments.forEach(function (seg) {
      if (seg.slots <= 0) { return; }
      var part = document.createElement("span");
      part.className = "tp-seg tp-" + seg.kind;
      if (seg.kind === "free") {
        part.style.flex = "1 1 0";
      } else {
        part.style.width = (100 * seg.slots / total) + "%";
      }
      part.setAttribute("data-slots", String(seg.slots));
      div.appendChild(part);
    });
    return div;
  }

  TryPaging.prototype.drawRows = function (plan) {
    var s = this.state, paged = s.mode === "paged";
    var rows = this.el["rows"];
    var width = Math.max(s.maxLen, Math.max.apply(null, plan.perRequest));   // slots across one row
    var barPixels = Math.max(0, rows.clientWidth - 100);                      // rows minus their labels
    var fragment = document.createDocumentFragment();
    plan.lengths.forEach(function (n, i) {
      var alloc = plan.perRequest[i];
      var row = document.createElement("div");
      row.className = "tp-row";
      row.setAttribute("role", "listitem");
      var label = document.createElement("span");
      label.className = "tp-row-label";
      label.textContent = "r" + (i + 1) + " \u00b7 " + fmt(n);
      row.appendChild(label);
      var waste = alloc - n;
      var wasteKind = paged ? "tail" : "padding";
      var segs = [{ kind: "kv", slots: n }, { kind: wasteKind, slots: waste }, { kind: "free", slots: width - alloc }];
      var b = bar("tp-bar", width, segs);
      var words = "Request " + (i + 1) + ": " + count(n, "token") + " of K/V in " + fmt(alloc) + " allocated " +
        (alloc === 1 ? "slot" : "slots") +
        (paged ? " (" + fmt(blocksFor(n, s.blockSize)) + " pages of " + s.blockSize + ", tail " + fmt(waste) + ")"
          : " (padding " + fmt(waste) + ")");
      b.setAttribute("role", "img");
      b.setAttribute("aria-label", words);
      b.title = words;
      if (paged) { addPageLines(b, alloc, width, s.blockSize, barPixels); }
      row.appendChild(b);
      fragment.appendChild(row);
    });
    rows.replaceChildren(fragment);
  };

  /** Thin lines at page boundaries, where pages are at least 4 pixels wide. */
  function addPageLines(barNode, alloc, width, blockSize, barPixels) {
    if (barPixels * blockSize / width < 4 || alloc === 0) { return; }
    var grid = document.createElement("span");
    grid.className = "tp-pages";
    grid.style.width = (100 * alloc / width) + "%";
    grid.style.backgroundSize = (100 * blockSize / alloc) + "% 100%";
    barNode.appendChild(grid);
  }

  TryPaging.prototype.drawPool = function (r) {
    var s = this.state, paged = s.mode === "paged", plan = r.plan;
    var total = Math.max(s.pool, plan.allocated);
    var segs = [];
    plan.lengths.forEach(function (n, i) {
      segs.push({ kind: "kv", slots: n });
      segs.push({ kind: paged ? "tail" : "padding", slots: plan.perRequest[i] - n });
    });
    segs.push({ kind: "free", slots: total - plan.allocated });
    var b = bar("tp-bar tp-pool-bar", total, segs);
    var n = plan.lengths.length;
    var words;
    if (plan.allocated <= s.pool) {
      words = (n === 1 ? "This request takes " : "These " + fmt(n) + " requests take ") + fmt(plan.allocated) + " of the pool's " + fmt(s.pool) +
        " slots (" + percent(plan.allocated / s.pool) + "); the rest is free. At " +
        fmt(plan.allocated / n) + " slots per request on average, the pool fits " + fmt(r.capacity) + " requests like these.";
    } else {
      words = (n === 1 ? "This request needs " : "These " + fmt(n) + " requests need ") + fmt(plan.allocated) + " slots, more than the pool's " + fmt(s.pool) +
        ". At " + fmt(plan.allocated / n) + " slots per request on average, it fits " + fmt(r.capacity) + ".";
    }
    var largest = Math.max.apply(null, plan.perRequest);
    if (largest > s.pool) {
      words += " The longest request alone needs " + count(largest, "slot") + ": it does not fit the pool at all.";
    }
    b.setAttribute("role", "img");
    b.setAttribute("aria-label", "The pool: " + words);
    this.el["pool"].replaceChildren(b);
    this.el["pool-caption"].textContent = words;
  };

  // ---------------------------------------------------------------------------------------------
  // Start every widget on the page
  // ---------------------------------------------------------------------------------------------

  function start() {
    document.querySelectorAll('[data-widget="try-paging"]').forEach(function (root) {
      if (!root.tryPaging) { root.tryPaging = new TryPaging(root); }
    });
  }

  // The math, for the console and for anyone curious: tryPaging.pagedPlan([512, 37], 16)
  window.tryPaging = {
    blocksFor: blocksFor, reserveMaxPlan: reserveMaxPlan, pagedPlan: pagedPlan,
    wasteOf: wasteOf, capacityOf: capacityOf, parseLengths: parseLengths
  };

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
