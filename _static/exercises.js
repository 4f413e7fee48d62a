/*
 * Exercises answered on the static page: every exercise whose answer is a value (a number, a list, a
 * pair...) has, in its box, an input that takes the answer as one types it in Python, Check and Hint
 * buttons and a verdict. The build (book/_ext/exercise_boxes.py) writes each exercise's declarative
 * form into its box as JSON (pagedlib.exercises.answers.answer_spec): the answer, the tolerance and
 * the mistakes table that Exercise.check uses in the notebook. This file holds only the generic rules,
 * the same as pagedlib/exercises/__init__.py and answers.py apply, so that a wrong answer gets the
 * same message here and on Colab. No kernel, no network. tests/test_exercise_boxes.py compares the two
 * on every mistake of every exercise, in Chromium.
 *
 * Values are tagged with their Python type ({int: 3}, {float: 0.5}, {str: "C"}, {bool: true},
 * {none: null}, {list: [...]}, {tuple: [...]}, and {ellipsis: true} for `...`).
 */
(function (root) {
  "use strict";

  // ---- reading a Python literal (with + - * / // % ** on numbers) -------------------------------
  function PySyntaxError(message) { this.message = message; }

  function tokenize(text) {
    const tokens = [];
    let i = 0;
    const re = {
      space: /^\s+/,
      number: /^(?:(?:\d[\d_]*)?\.\d[\d_]*|\d[\d_]*\.?)(?:[eE][+-]?\d+)?/,
      name: /^[A-Za-z_][A-Za-z_0-9]*/,
      op: /^(?:\.\.\.|\/\/|\*\*|[-+*\/%()\[\],])/,
    };
    while (i < text.length) {
      const rest = text.slice(i);
      let m;
      if ((m = re.space.exec(rest))) { i += m[0].length; continue; }
      if (rest[0] === "'" || rest[0] === '"') {
        const q = rest[0];
        let j = 1, s = "";
        while (j < rest.length && rest[j] !== q) {
          if (rest[j] === "\\" && j + 1 < rest.length) {
            const c = rest[j + 1];
            s += ({ n: "\n", t: "\t", "\\": "\\", "'": "'", '"': '"' })[c] ?? ("\\" + c);
            j += 2;
          } else { s += rest[j]; j += 1; }
        }
        if (j >= rest.length) throw new PySyntaxError("a string is not closed: add its closing quote");
        tokens.push({ t: "str", v: s });
        i += j + 1;
        continue;
      }
      if (/^\d/.test(rest) || /^\.\d/.test(rest)) {
        const raw = re.number.exec(rest)[0];
        if (/_$|__|_\.|\._|_[eE]/.test(raw)) throw new PySyntaxError(`${raw} is not a number`);
        const clean = raw.replace(/_/g, "");
        const isFloat = /[.eE]/.test(clean);
        tokens.push({ t: "num", v: isFloat ? { float: parseFloat(clean) } : { int: parseInt(clean, 10) } });
        i += raw.length;
        continue;
      }
      if ((m = re.op.exec(rest))) { tokens.push({ t: "op", v: m[0] }); i += m[0].length; continue; }
      if ((m = re.name.exec(rest))) { tokens.push({ t: "name", v: m[0] }); i += m[0].length; continue; }
      throw new PySyntaxError(`cannot read the character ${JSON.stringify(rest[0])}`);
    }
    return tokens;
  }

  function tokenText(tok) { return tok.t === "num" ? pyRepr(tok.v) : tok.t === "str" ? strRepr(tok.v) : tok.v; }

  function isNum(v) { return v && ("int" in v || "float" in v); }
  function numOf(v) { return "int" in v ? v.int : v.float; }
  function isInt(v) { return v && "int" in v; }

  function arith(op, a, b) {
    if (!isNum(a) || !isNum(b)) throw new PySyntaxError(`${op} works on numbers here`);
    const x = numOf(a), y = numOf(b), ints = isInt(a) && isInt(b);
    if ((op === "/" || op === "//" || op === "%") && y === 0) throw new PySyntaxError("division by zero");
    switch (op) {
      case "+": return ints ? { int: x + y } : { float: x + y };
      case "-": return ints ? { int: x - y } : { float: x - y };
      case "*": return ints ? { int: x * y } : { float: x * y };
      case "/": return { float: x / y };
      case "//": return ints ? { int: Math.floor(x / y) } : { float: Math.floor(x / y) };
      case "%": { const r = x - Math.floor(x / y) * y; return ints ? { int: r } : { float: r }; }
      case "**": return ints && y >= 0 ? { int: Math.pow(x, y) } : { float: Math.pow(x, y) };
    }
    throw new PySyntaxError(`unknown operator ${op}`);
  }

  function parsePython(text) {
    const tokens = tokenize(text);
    let k = 0;
    const peek = () => tokens[k];
    const isOp = (v) => tokens[k] && tokens[k].t === "op" && tokens[k].v === v;
    const expect = (v) => {
      if (!isOp(v)) throw new PySyntaxError(`expected ${v}`);
      k += 1;
    };
    function atom() {
      const tok = peek();
      if (!tok) throw new PySyntaxError("the answer ends too early");
      if (tok.t === "num") { k += 1; return tok.v; }
      if (tok.t === "str") {
        k += 1;
        let s = tok.v;
        while (peek() && peek().t === "str") { s += peek().v; k += 1; }   // 'a' 'b' is 'ab'
        return { str: s };
      }
      if (tok.t === "name") {
        k += 1;
        const names = { True: { bool: true }, False: { bool: false }, None: { none: null } };
        if (tok.v in names) return names[tok.v];
        throw new PySyntaxError(`the name ${tok.v} means nothing here: type the value itself`);
      }
      if (isOp("...")) { k += 1; return { ellipsis: true }; }
      if (isOp("[")) {
        k += 1;
        const items = [];
        while (!isOp("]")) {
          items.push(expr());
          if (!isOp(",")) break;
          k += 1;
        }
        expect("]");
        return { list: items };
      }
      if (isOp("(")) {
        k += 1;
        if (isOp(")")) { k += 1; return { tuple: [] }; }
        const first = expr();
        if (isOp(")")) { k += 1; return first; }            // (x) is x
        const items = [first];
        while (isOp(",")) {
          k += 1;
          if (isOp(")")) break;
          items.push(expr());
        }
        expect(")");
        return { tuple: items };
      }
      throw new PySyntaxError(`unexpected ${tokenText(tok)}`);
    }
    function power() {
      let base = atom();
      if (isOp("**")) { k += 1; base = arith("**", base, unary()); }
      return base;
    }
    function unary() {
      if (isOp("-") || isOp("+")) {
        const op = peek().v;
        k += 1;
        const v = unary();
        if (!isNum(v)) throw new PySyntaxError(`${op} works on numbers here`);
        if (op === "+") return v;
        return isInt(v) ? { int: -v.int } : { float: -v.float };
      }
      return power();
    }
    function term() {
      let v = unary();
      while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
        const op = peek().v;
        k += 1;
        v = arith(op, v, unary());
      }
      return v;
    }
    function expr() {
      let v = term();
      while (isOp("+") || isOp("-")) {
        const op = peek().v;
        k += 1;
        v = arith(op, v, term());
      }
      return v;
    }
    if (!tokens.length) return { ellipsis: true };
    const first = expr();
    let value = first;
    if (isOp(",")) {                                        // 'C', 3 is a tuple, as in Python
      const items = [first];
      while (isOp(",")) {
        k += 1;
        if (k >= tokens.length) break;
        items.push(expr());
      }
      value = { tuple: items };
    }
    if (k < tokens.length) throw new PySyntaxError(`unexpected ${tokenText(tokens[k])}`);
    return value;
  }

  // ---- repr, as Python writes it ----------------------------------------------------------------
  function floatRepr(x) {
    if (Number.isNaN(x)) return "nan";
    if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
    if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
    const [mant, expStr] = x.toExponential().split("e");   // the shortest digits that round-trip
    const exp = parseInt(expStr, 10);
    const neg = mant[0] === "-";
    const digits = mant.replace("-", "").replace(".", "");
    let out;
    if (exp >= -4 && exp < 16) {
      if (exp < 0) out = "0." + "0".repeat(-exp - 1) + digits;
      else if (digits.length <= exp + 1) out = digits + "0".repeat(exp + 1 - digits.length) + ".0";
      else out = digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
    } else {
      const m = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
      out = m + "e" + (exp < 0 ? "-" : "+") + String(Math.abs(exp)).padStart(2, "0");
    }
    return (neg ? "-" : "") + out;
  }

  function strRepr(s) {
    const q = s.includes("'") && !s.includes('"') ? '"' : "'";
    let out = "";
    for (const c of s) {
      if (c === "\\") out += "\\\\";
      else if (c === q) out += "\\" + q;
      else if (c === "\n") out += "\\n";
      else if (c === "\t") out += "\\t";
      else if (c === "\r") out += "\\r";
      else out += c;
    }
    return q + out + q;
  }

  function pyRepr(v) {
    if ("int" in v) return String(v.int);
    if ("float" in v) return floatRepr(v.float);
    if ("str" in v) return strRepr(v.str);
    if ("bool" in v) return v.bool ? "True" : "False";
    if ("none" in v) return "None";
    if ("ellipsis" in v) return "Ellipsis";
    if ("list" in v) return "[" + v.list.map(pyRepr).join(", ") + "]";
    if ("tuple" in v) {
      const inner = v.tuple.map(pyRepr).join(", ");
      return "(" + inner + (v.tuple.length === 1 ? "," : "") + ")";
    }
    return "?";
  }

  function typeName(v) {
    return ["int", "float", "str", "bool", "list", "tuple"].find((t) => t in v) ||
      ("none" in v ? "NoneType" : "ellipsis");
  }

  function oneLine(text, limit) {
    text = String(text).split(/\s+/).filter(Boolean).join(" ");
    return text.length <= limit ? text : text.slice(0, limit - 3) + "...";
  }

  const short = (v, limit = 80) => oneLine(pyRepr(v), limit);
  const article = (noun) => ("aeiou".includes(noun[0].toLowerCase()) ? "an " : "a ") + noun;

  // ---- equality and the rules (pagedlib/exercises/answers.py) -------------------------------------
  function isSeq(v) { return v && ("list" in v || "tuple" in v); }
  function items(v) { return "list" in v ? v.list : v.tuple; }
  function isBool(v) { return v && "bool" in v; }

  function pyLess(a, b) {            // Python's < for sorting, or throws (mixed types)
    if (isNum(a) && isNum(b)) return numOf(a) < numOf(b);
    if ("bool" in a && "bool" in b) return a.bool < b.bool;
    if ("str" in a && "str" in b) return a.str < b.str;
    if (isSeq(a) && isSeq(b) && ("list" in a) === ("list" in b)) {
      const x = items(a), y = items(b);
      for (let i = 0; i < Math.min(x.length, y.length); i++) {
        if (pyLess(x[i], y[i])) return true;
        if (pyLess(y[i], x[i])) return false;
      }
      return x.length < y.length;
    }
    throw new TypeError("not comparable");
  }

  function sorted(list) {
    return list.slice().sort((a, b) => (pyLess(a, b) ? -1 : pyLess(b, a) ? 1 : 0));
  }

  function valuesEqual(a, e, ctx) {
    if (isBool(a) || isBool(e)) return isBool(a) && isBool(e) && a.bool === e.bool;
    if (isNum(a) && isNum(e)) {
      const x = numOf(a), y = numOf(e);
      if (ctx.tolerance !== null && ctx.tolerance !== undefined) return Math.abs(x - y) <= ctx.tolerance;
      if (x === y) return true;
      if (!Number.isFinite(x) || !Number.isFinite(y)) return false;
      return Math.abs(x - y) <= Math.max(1e-6 * Math.max(Math.abs(x), Math.abs(y)), 1e-9);
    }
    if ("str" in a && "str" in e) {
      return ctx.ignore_case ? a.str.trim().toUpperCase() === e.str.trim().toUpperCase() : a.str === e.str;
    }
    if (isSeq(a) && isSeq(e)) {
      let x = items(a), y = items(e);
      if (x.length !== y.length) return false;
      if (ctx.unordered) {
        try { x = sorted(x); y = sorted(y); } catch (err) { return false; }
      }
      const inner = innerCtx(ctx);
      return x.every((v, i) => valuesEqual(v, y[i], inner));
    }
    if ("none" in a || "none" in e) return "none" in a && "none" in e;
    return false;
  }

  function innerCtx(ctx) {
    return { expected: null, tolerance: ctx.tolerance, unordered: false, ignore_case: ctx.ignore_case };
  }

  function realNumber(v) { return isNum(v); }                 // never a bool: bools are tagged apart
  const n = (tagged) => numOf(tagged);

  function match(matcher, answer, ctx) {
    if (matcher && typeof matcher === "object" && "op" in matcher) return RULES[matcher.op](matcher, answer, ctx);
    return valuesEqual(answer, matcher, ctx);
  }

  const RULES = {
    equals: (r, a, ctx) => valuesEqual(a, r.value, ctx),
    above: (r, a) => realNumber(a) && numOf(a) > n(r.value),
    below: (r, a) => realNumber(a) && numOf(a) < n(r.value),
    at_least: (r, a) => realNumber(a) && numOf(a) >= n(r.value),
    not_multiple_of: (r, a, ctx) => {
      if (isSeq(a)) return items(a).some((x) => RULES.not_multiple_of(r, x, ctx));
      if (!realNumber(a)) return false;
      const x = numOf(a), m = n(r.n);
      return x - Math.floor(x / m) * m !== 0;
    },
    length_not: (r, a) => isSeq(a) && items(a).length !== n(r.n),
    item: (r, a, ctx) => {
      if (!isSeq(a)) return false;
      const xs = items(a), i = n(r.index);
      if (!(-xs.length <= i && i < xs.length)) return false;
      return match(r.matcher, xs[i < 0 ? xs.length + i : i], innerCtx(ctx));
    },
    any_item: (r, a, ctx) => isSeq(a) && items(a).some((x) => match(r.matcher, x, innerCtx(ctx))),
    one_of: (r, a, ctx) => items(r.values).some((v) => valuesEqual(a, v, ctx)),
    all_of: (r, a, ctx) => r.matchers.every((m) => match(m, a, ctx)),
    not: (r, a, ctx) => !match(r.matcher, a, ctx),
    first_wrong: (r, a, ctx) => {
      const e = ctx.expected;
      if (!isSeq(a) || !e || !isSeq(e)) return false;
      const x = items(a), y = items(e), inner = innerCtx(ctx);
      for (let i = 0; i < Math.max(x.length, y.length); i++) {
        if (i >= x.length || i >= y.length || !valuesEqual(x[i], y[i], inner)) return i === n(r.index);
      }
      return false;
    },
    not_an_int: (r, a) => !isInt(a),
    otherwise: () => true,
  };

  // ---- the verdict (Exercise.check for a value) ---------------------------------------------------
  const SITE_NOT_ATTEMPTED = "Type your answer in the box as you would in Python, then press Check.";

  function allowedKinds(expected) {
    if ("bool" in expected) return ["bool"];
    if ("int" in expected) return ["int"];
    if ("float" in expected) return ["int", "float"];
    if (isSeq(expected)) return ["list", "tuple"];
    if ("str" in expected) return ["str"];
    return [typeName(expected)];
  }

  function hasKind(v, kinds) {
    const t = typeName(v);
    // a bool is an int in Python: isinstance(True, int)
    return kinds.includes(t) || (t === "bool" && (kinds.includes("int") || kinds.includes("float")));
  }

  function wrongType(v, kinds) {
    const what = "your answer is";
    const want = kinds.map(article).join(" or ");
    const got = typeName(v);
    const numberAsked = kinds.includes("int") || kinds.includes("float");
    if (kinds.includes("int") && !kinds.includes("float") && got === "float") {
      return `${what} ${short(v)}, a float; expected an int. \`/\` always gives a float: use \`//\` ` +
        "(which rounds down) or round the result yourself.";
    }
    if (numberAsked && got === "str" && v.str.trim().endsWith("%")) {
      const percent = percentOf(v.str);
      const share = !kinds.includes("float") ? "" : percent === null ? " (a share as a fraction: 25% is 0.25)"
        : ` (a share as a fraction: write ${floatRepr(percent / 100)})`;
      return `${what} the text ${short(v)}, a str; expected ${want}: write the number itself, without ` +
        `quotes or a % sign${share}.`;
    }
    if (numberAsked && got === "str") {
      return `${what} the text ${short(v)}, a str; expected ${want}: write the number itself, without quotes.`;
    }
    return `${what} ${short(v)}, ${article(got)}; expected ${want}.`;
  }

  /** The first item written as text where the answer has a number (pagedlib's _wrong_item_type). */
  function wrongItemType(a, e, path = "") {
    if (!(isSeq(a) && isSeq(e)) || items(a).length !== items(e).length) return null;
    const xs = items(a), ys = items(e);
    for (let i = 0; i < xs.length; i++) {
      const where = `${path}[${i}]`;
      if (isNum(ys[i]) && "str" in xs[i]) {
        return `item ${where} is the text ${short(xs[i], 40)}, a str; expected ` +
          `${isInt(ys[i]) ? "an int" : "a number"} there: write the number itself, without quotes.`;
      }
      const inner = wrongItemType(xs[i], ys[i], where);
      if (inner) return inner;
    }
    return null;
  }

  /** The number before the % of a text such as "37.6%", or null (pagedlib.exercises._percent). */
  function percentOf(text) {
    const m = /^\s*([-+]?(?:\d+\.?\d*|\.\d+))\s*%\s*$/.exec(text);
    return m ? parseFloat(m[1]) : null;
  }

  /** `text` as a sentence: its first letter a capital (pagedlib.exercises.sentence). */
  function sentence(text) {
    const first = text.slice(0, 1);
    return first !== first.toUpperCase() ? first.toUpperCase() + text.slice(1) : text;
  }

  /** {state, message} for `answer` (a tagged value) against `spec` (answers.answer_spec's JSON). */
  function judge(spec, answer, fallback = spec.fallback) {
    if ("ellipsis" in answer) return { state: "not attempted", message: SITE_NOT_ATTEMPTED };
    const ctx = { expected: spec.expected, tolerance: spec.tolerance, unordered: spec.unordered,
      ignore_case: spec.ignore_case };
    const kinds = allowedKinds(spec.expected);
    // In a notebook None is the untouched placeholder ("Not attempted yet"); typed in the box it
    // is an answer, and not one of the kinds asked for.
    if ("none" in answer) {
      return { state: "incorrect", message: `Your answer is None; expected ${kinds.map(article).join(" or ")}.` };
    }
    if (!hasKind(answer, kinds)) return { state: "incorrect", message: oneLine(wrongType(answer, kinds), 400) };
    const slip = wrongItemType(answer, spec.expected);
    if (slip) return { state: "incorrect", message: oneLine(`your answer is ${short(answer)}: ${slip}`, 400) };
    if (valuesEqual(answer, spec.expected, ctx)) return { state: "correct", message: oneLine(spec.why, 400) };
    const base = `${short(answer)} is not right.`;
    for (const [matcher, message] of spec.mistakes) {
      let hit = false;
      try { hit = match(matcher, answer, ctx); } catch (err) { hit = false; }
      if (hit) return { state: "incorrect", message: oneLine(`${base} ${sentence(message)}`, 400) };
    }
    return { state: "incorrect", message: oneLine(`${base} ${sentence(fallback)}`, 400) };
  }

  /** The verdict for the text a reader typed. */
  function checkText(spec, text, fallback) {
    let value;
    try {
      value = parsePython(text);
    } catch (err) {
      if (!(err instanceof PySyntaxError)) throw err;
      // 37.6% typed as it is written in prose: judged as the text "37.6%" is in Python
      if (percentOf(text) !== null) return judge(spec, { str: text.trim() }, fallback);
      return { state: "incorrect", message: `Python cannot read that: ${err.message}. Type a value such as ` +
        "`12`, `0.25`, `[1, 2]` or `('B', 4)`." };
    }
    return judge(spec, value, fallback);
  }

  // ---- the inline Markdown of the messages (pagedlib.exercises._inline_html) ----------------------
  function inlineHtml(text) {
    let out = text.split(/\s+/).filter(Boolean).join(" ")
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
    out = out.replace(/`([^`]+)`/g, "<code>$1</code>");
    return out.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
  }

  const LABELS = { correct: "Correct", incorrect: "Incorrect", "not attempted": "Not attempted yet" };

  // ---- the page -----------------------------------------------------------------------------------
  function wire(box) {
    const specNode = box.querySelector("script.pagedlib-answer-spec");
    const input = box.querySelector('[data-testid="answer"]');
    const check = box.querySelector('[data-testid="check"]');
    const hint = box.querySelector('[data-testid="hint"]');
    const verdict = box.querySelector('[data-testid="verdict"]');
    if (!specNode || !input || !check || !verdict) return;
    const spec = JSON.parse(specNode.textContent);
    const show = () => {
      const { state, message } = checkText(spec, input.value);
      verdict.className = "pagedlib-verdict pagedlib-verdict-" + state.replace(" ", "-");
      verdict.dataset.state = state;
      verdict.innerHTML = `<strong>${LABELS[state]}</strong> ${inlineHtml(message)}`;
    };
    check.addEventListener("click", show);
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") { event.preventDefault(); show(); }
    });
    if (hint) {
      hint.addEventListener("click", () => {
        const hints = [...box.querySelectorAll("details.pagedlib-hint")];
        const next = hints.find((d) => !d.open);
        if (next) {
          next.open = true;
          next.scrollIntoView({ block: "nearest" });
        }
        const left = hints.filter((d) => !d.open).length;
        hint.textContent = left ? "Next hint" : "All hints shown";
        hint.disabled = !left;
      });
    }
    box.classList.add("pagedlib-answer-ready");
  }

  const api = { parsePython, pyRepr, floatRepr, judge, checkText, inlineHtml, valuesEqual, PySyntaxError,
    SITE_NOT_ATTEMPTED };
  if (typeof module !== "undefined" && module.exports) {
    module.exports = api;
  } else {
    root.pagedlibExercises = api;
    const start = () => document.querySelectorAll("[data-answer-for]").forEach(wire);
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
    else start();
  }
})(typeof window !== "undefined" ? window : globalThis);
