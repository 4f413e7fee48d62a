"""Chapter 7's radix-tree exercise: its answer is the library's RadixCache, and its messages name the
mistake (the hash chain's answer, a repeat counted whole, a shifted prompt)."""
from pagedlib.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, ch07


def test_reference_is_the_radix_cache_and_differs_from_the_hash_chain():
    assert ch07.radix_hit_count.reference == [0, 10, 11, 5, 2, 0, 12]
    assert ch07.radix_hits(ch07.PROMPT_MIX) == ch07.radix_hit_count.reference
    assert ch07.radix_hit_count.reference != ch07.hit_count.reference
    # with pages of 4 the tree hits what the hash chain hits
    assert ch07.radix_hits(ch07.PROMPT_MIX, page_size=4) == ch07.hit_count.reference


def test_messages_name_the_mistake():
    ex = ch07.radix_hit_count
    assert ex.check(ex.reference).state == CORRECT
    assert ex.check(...).state == NOT_ATTEMPTED
    assert "hash chain" in ex.check(list(ch07.hit_count.reference)).message
    whole_repeat = [0, 10, 12, 6, 3, 0, 12]
    assert "Prompt 3" in ex.check(whole_repeat).message and "last" in ex.check(whole_repeat).message
    assert "shifted" in ex.check([0, 10, 11, 5, 2, 1, 12]).message
    for wrong in ex.wrong:
        assert ex.check(wrong).state == INCORRECT
