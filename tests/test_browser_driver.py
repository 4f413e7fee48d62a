"""tests/browser.py: without Chromium the browser tests are skipped with the line that installs it,
never passed silently; in CI (PAGEDLIB_REQUIRE_BROWSER=1) a missing Chromium fails them."""
import browser
import pytest


def test_without_chromium_the_browser_tests_skip_saying_how_to_install_it(monkeypatch):
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    monkeypatch.delenv("PAGEDLIB_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        with browser.open_browser():
            pytest.fail("a browser opened without Chromium")


def test_in_ci_a_missing_chromium_fails(monkeypatch):
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    monkeypatch.setenv("PAGEDLIB_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        with browser.open_browser():
            pytest.fail("a browser opened without Chromium")



PAGE = """<!doctype html><html><body>
<p id="shown">waiting</p>
<img src="missing.png" alt="a picture that is not there">
<script>
console.error("boom");
setTimeout(() => { const b = document.createElement("button"); b.id = "late"; b.textContent = "late";
    b.style.width = "120px"; b.onclick = () => { document.querySelector("#shown").textContent = "clicked"; };
    document.body.appendChild(b); }, 300);
</script></body></html>"""


@pytest.mark.slow
def test_the_driver_sees_console_errors_failed_loads_and_waits_for_late_elements(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    with browser.open_browser() as b:
        b.viewport(400, 600, mobile=True)
        b.open(page.as_uri())
        b.click("#late")                          # not there yet: the locator waits for it
        assert b.js("document.querySelector('#shown').textContent") == "clicked"
        problems = b.problems()
        assert any("boom" in p for p in problems), problems
        assert any(p.startswith("failed load") and "missing.png" in p for p in problems), problems
        assert b.requested_urls()[0] == page.as_uri()
        b.screenshot(tmp_path / "button.png", selector="#late")
        png = (tmp_path / "button.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and abs(int.from_bytes(png[16:20], "big") - 120) <= 1
