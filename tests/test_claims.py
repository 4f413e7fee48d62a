"""pagedlib.claims: a claim fails loudly on the chapter's settings and explains itself on changed ones."""
import pytest

from pagedlib.claims import ClaimFailed, claim

DEFAULTS = {"lengths": [512, 37, 1900, 128, 4], "block_size": 16}


def test_a_claim_that_holds_is_quiet(capsys):
    assert claim(True, "waste is 74.8%", settings=DEFAULTS, defaults=DEFAULTS) is True
    assert capsys.readouterr().out == ""


def test_a_failing_claim_on_the_chapters_settings_raises():
    with pytest.raises(ClaimFailed, match="waste is 74.8%"):
        claim(False, "waste is 74.8%", settings=dict(DEFAULTS), defaults=DEFAULTS)
    assert issubclass(ClaimFailed, AssertionError)      # nbval and pytest see a failed assertion


def test_a_failing_claim_on_changed_settings_names_the_change(capsys):
    mine = {**DEFAULTS, "block_size": 64}
    assert claim(False, "waste is 1.0%", settings=mine, defaults=DEFAULTS) is False
    out = capsys.readouterr().out
    assert "waste is 1.0%" in out and "block_size = 64 (the chapter uses 16)" in out
    assert "lengths" not in out                         # only what changed is named


def test_every_setting_needs_a_default_and_the_claim_needs_words():
    with pytest.raises(ValueError, match="no default"):
        claim(True, "x", settings={"seed": 1}, defaults={})
    with pytest.raises(ValueError, match="in words"):
        claim(True, "", settings={}, defaults={})
