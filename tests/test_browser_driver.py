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

