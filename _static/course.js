/*
 * Site-wide fixes for the theme pair that Jupyter Book 1.0.4 installs (sphinx-book-theme 1.3.0 with
 * pydata-sphinx-theme 0.17.1). Jupyter Book loads every .js file in _static on every page.
 * tests/test_site.py checks the result in a real browser at 400 and 1400 px.
 *
 * The sidebar buttons. Each page has two "open the chapter list" buttons (.primary-toggle) and two
 * "on this page" buttons (.secondary-toggle): pydata-sphinx-theme's, in its top navbar, which
 * sphinx-book-theme hides, and sphinx-book-theme's, in the bar above the article, which the reader
 * sees. Both themes bind their click handlers with document.querySelector(), i.e. to the FIRST
 * match: the hidden navbar button, so the visible ones did nothing (upstream sphinx-book-theme issues
 * 865 and 917, pydata-sphinx-theme 2067). Taking the two classes off the hidden navbar buttons,
 * after the page is parsed but before the themes' scripts bind (pydata's script is deferred and runs
 * once readyState is "interactive"; sphinx-book-theme's waits for DOMContentLoaded), binds both
 * themes' handlers to the visible buttons. The navbar itself (an almost empty bar with a lone
 * search box) is hidden by course.css; the article bar has its own search button.
 */
(function () {
  "use strict";

  function retireNavbarToggles() {
    document.querySelectorAll("#pst-header .primary-toggle, #pst-header .secondary-toggle")
      .forEach(function (button) {
        button.classList.remove("primary-toggle", "secondary-toggle");
        button.classList.add("course-retired-toggle");
      });
  }

  if (document.readyState === "loading") {
    document.addEventListener("readystatechange", function onReady() {
      if (document.readyState !== "loading") {
        document.removeEventListener("readystatechange", onReady);
        retireNavbarToggles();
      }
    });
  } else {
    retireNavbarToggles();
  }
})();

/*
 * Figure numbers per chapter. Sphinx numbers figures across the whole book ("Fig. 30" in chapter 8);
 * a reader of one chapter expects its figures to count from 1. No page refers to a figure by its
 * number, so the numbers are rewritten in page order: "Fig. 1", "Fig. 2", ...
 */
(function () {
  "use strict";
  function renumber() {
    document.querySelectorAll(".bd-article figcaption .caption-number").forEach(function (span, i) {
      span.textContent = "Fig. " + (i + 1) + " ";
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", renumber);
  } else {
    renumber();
  }
})();

/*
 * Search snippets. Sphinx's search shows, under each hit, text from the start of the page's main
 * block, which in this theme begins with a print-only table of contents (hidden on screen): every
 * snippet read "Contents ...". Drop the print-only parts before Sphinx picks the snippet.
 */
(function () {
  "use strict";
  function patchSearch() {
    // searchtools.js declares `const Search` at the top level: a global name, not a window property
    var search = typeof Search !== "undefined" ? Search : null;   // eslint-disable-line no-undef
    if (!search || typeof search.htmlToText !== "function" || search._coursePatched) {
      return;
    }
    var htmlToText = search.htmlToText;
    search.htmlToText = function (htmlString, anchor) {
      var doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(".onlyprint, #jb-print-docs-body, #jb-print-toc").forEach(function (node) {
        node.remove();
      });
      return htmlToText.call(this, doc.documentElement.outerHTML, anchor);
    };
    search._coursePatched = true;
  }
  patchSearch();
  document.addEventListener("DOMContentLoaded", patchSearch);
  window.addEventListener("load", patchSearch);
})();

/*
 * Links between chapters. A notebook on Colab opens alone, so the notebooks link to other chapters
 * and to the book's pages at their published address (pagedlib.facts.SITE_URL, which
 * tests/test_links.py keeps equal to SITE below). On the site those links are turned back into
 * relative ones, so that a local build (`make book`, `make serve`) stays local and the published
 * site never reloads itself through an absolute address.
 */
(function () {
  "use strict";
  var SITE = "https://paged-attention-course.github.io/paged-attention-from-scratch/";

  function localiseLinks() {
    var root = document.documentElement.getAttribute("data-content_root");
    if (root === null) {
      return;
    }
    document.querySelectorAll('a[href^="' + SITE + '"]').forEach(function (a) {
      a.setAttribute("href", root + a.getAttribute("href").slice(SITE.length));
      a.classList.remove("external");
      a.classList.add("internal");
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", localiseLinks);
  } else {
    localiseLinks();
  }
})();

/*
 * A phone (tests/test_site_phone.py). Three things CSS alone cannot do:
 * - Printed outputs keep their lines (at most 60 characters, the course's rule): a block whose
 *   longest line is wider than its box gets a smaller font, just enough for it to fit, down to
 *   OUTPUT_MIN_PX (at which 60 characters fit a 400 px screen); never wrapped, never cut.
 * - On a phone (the width of course.css's PHONE query) a table wider than its box is stacked
 *   (course.css, table.course-stacked): each row a card, its first cell bold as the row's title,
 *   every other cell "header: value", so the column the prose quotes is on the screen. A table
 *   that fits keeps its columns; so do the steppers, which lay out their own tables. Each table
 *   is measured in its normal form, so turning the phone or widening the window unstacks it.
 * - A table still wider than its box (a desktop column, or a table without headings) scrolls
 *   inside it, with its first column kept in place (course.css, .course-scrolls): what a row is
 *   stays on the screen, the shadow at its edge and a fade at the box's right edge (until it is
 *   scrolled to the end) say that the rest scrolls; code cells and display equations wider than
 *   the column get the same fade.
 * - A table inside a ``{container} course-stack`` (the Try-it page's arithmetic) is always stacked on
 *   a phone: each cell is labelled with its column's heading (data-label, shown by course.css).
 * Redone when the window changes size (a phone turned sideways too) and when a collapsed output is
 * opened.
 */
(function () {
  "use strict";
  var OUTPUT_MIN_PX = 9;
  var PHONE = window.matchMedia("(max-width: 600px)");   // course.css's phone query

  function fitOutputs(root) {
    (root || document).querySelectorAll(".bd-article .cell_output pre, .bd-article .output pre")
      .forEach(function (pre) {
        pre.style.fontSize = "";
        if (!pre.clientWidth || pre.scrollWidth <= pre.clientWidth + 1) return;
        var cs = getComputedStyle(pre);
        var pad = parseFloat(cs.paddingLeft) + parseFloat(cs.paddingRight);
        var size = parseFloat(cs.fontSize) * (pre.clientWidth - pad) / (pre.scrollWidth - pad);
        pre.style.fontSize = Math.max(OUTPUT_MIN_PX, Math.floor(size * 10) / 10) + "px";
      });
  }

  function markWideTables(root) {
    (root || document).querySelectorAll(".bd-article table").forEach(function (table) {
      if (table.closest(".pagedlib-stepper, .course-stack")) return;
      var box = table.parentElement;
      while (box && !box.classList.contains("bd-article") &&
             ["auto", "scroll"].indexOf(getComputedStyle(box).overflowX) < 0) box = box.parentElement;
      if (!box || box.classList.contains("bd-article")) return;
      markScrolls(box);
    });
    // code cells and display equations scroll inside their own boxes: the same cue
    (root || document).querySelectorAll(SCROLLERS).forEach(markScrolls);
  }
  var SCROLLERS = '.bd-article div.highlight pre, .bd-article mjx-container[display="true"]';

  function markScrolls(box) {
    box.classList.toggle("course-scrolls", box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1);
    markEnd(box);
    if (!box.dataset.courseScrollWatch) {
      box.dataset.courseScrollWatch = "1";
      box.addEventListener("scroll", function () { markEnd(box); }, {passive: true});
    }
  }

  // Scrolled to its right end: the fade at the box's right edge (course.css) goes.
  function markEnd(box) {
    box.classList.toggle("course-scrolled-end", box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
  }

  // The column headings of a table (its last heading row), or null where it has none.
  function headings(table) {
    var row = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!row) return null;
    var heads = [];
    Array.prototype.forEach.call(row.cells, function (cell) {
      for (var n = 0; n < (cell.colSpan || 1); n++) heads.push(cell.textContent.trim());
    });
    return heads;
  }

  // A row whose first cell is a number ("16", "3.1%", "none") is not named by it: a card titled "16"
  // needs its column's heading too ("budget: 16").
  var BARE_VALUE = /^([-+~]?[\d.,]+\s*(%|x|k|K|M|G|KiB|MiB|GiB|ms|s)?|none|n\/a|-)$/;

  // Each body cell gets its column's heading as data-label (course.css shows it before the value);
  // a table whose first column holds only numbers gets course-titled, so its titles show theirs.
  function label(table) {
    var heads = headings(table);
    if (!heads) return false;
    var bare = true;
    Array.prototype.forEach.call(table.tBodies, function (body) {
      Array.prototype.forEach.call(body.rows, function (row) {
        if (row.cells.length && !BARE_VALUE.test(row.cells[0].textContent.trim())) bare = false;
      });
    });
    table.classList.toggle("course-titled", bare && !!heads[0]);
    Array.prototype.forEach.call(table.tBodies, function (body) {
      Array.prototype.forEach.call(body.rows, function (row) {
        var column = 0;
        Array.prototype.forEach.call(row.cells, function (cell) {
          if (heads[column]) cell.setAttribute("data-label", heads[column]);
          column += cell.colSpan || 1;
        });
      });
    });
    return true;
  }

  function labelStacked() {
    document.querySelectorAll(".bd-article .course-stack table").forEach(label);
  }

  // On a phone, a table wider than its box is stacked; any other table gets its columns back.
  function stackWideTables(root) {
    (root || document).querySelectorAll(".bd-article table").forEach(function (table) {
      if (table.closest(".pagedlib-stepper, .course-stack")) return;
      table.classList.remove("course-stacked");                  // measured in its normal form
      if (!PHONE.matches || !table.getClientRects().length) return;
      var box = table.parentElement, cs = getComputedStyle(box);
      var room = box.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      // wider than the room, or squeezed to it with its cells' content overflowing the box
      var wide = table.getBoundingClientRect().width > room + 1 || box.scrollWidth > box.clientWidth + 1;
      if (wide && label(table)) table.classList.add("course-stacked");
    });
  }

  function layout(root) { stackWideTables(root); fitOutputs(root); markWideTables(root); }

  // Colab's badge comes from colab.research.google.com; where it cannot load (an offline copy of
  // the site) the course's own stand-in takes its place, so no broken image heads a chapter.
  function localBadges() {
    var local = (document.documentElement.dataset.content_root || "") + "_static/colab-badge.svg";
    document.querySelectorAll('img[src*="colab-badge.svg"]').forEach(function (img) {
      if (img.src.indexOf("_static/colab-badge.svg") >= 0) return;
      var swap = function () { img.src = local; };
      if (img.complete && img.naturalWidth === 0) swap();
      else img.addEventListener("error", swap, {once: true});
    });
  }

  // A results table's caption goes below its box, as a paragraph: inside a box that scrolls
  // sideways a <caption> is as wide as the table, and a phone cut it off mid-word.
  function captionsOutside() {
    document.querySelectorAll(".bd-article .pagedlib-table > table > caption").forEach(function (cap) {
      var box = cap.parentElement.parentElement;
      var text = document.createElement("div");
      text.className = "pagedlib-table-caption";
      text.innerHTML = cap.innerHTML;
      box.parentElement.insertBefore(text, box.nextSibling);
      cap.remove();
    });
  }

  function start() {
    localBadges();
    captionsOutside();
    labelStacked();
    layout();
    var timer = null;
    window.addEventListener("resize", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { layout(); }, 100);
    });
    document.addEventListener("toggle", function (event) {
      if (event.target.open) layout(event.target);
    }, true);
    // display equations get their width when MathJax has typeset them, after this runs
    window.addEventListener("load", function () {
      var mj = window.MathJax;
      if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(function () { layout(); });
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
  window.courseLayout = layout;
})();
