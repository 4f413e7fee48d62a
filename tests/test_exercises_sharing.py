"""The targeted messages of chapters 5-7's exercises: each names the mistake it is written for."""
from pagedlib.exercises import CORRECT, INCORRECT, ch05, ch06, ch07


def test_an_aliased_fork_table_is_named_in_one_line():
    result = ch06.fork_and_copy_on_write.check(ch06._AliasingPool)
    assert result.state == INCORRECT
    assert result.message == ch06.ALIAS_MESSAGE and "\n" not in result.message


def test_a_fork_that_does_not_count_its_references_is_named():
    """Issue 37: such a fork was told about copy-on-write; the slip is the missing ref += 1."""
    result = ch06.fork_and_copy_on_write.check(ch06._ForgetsRefCountsPool)
    assert result.state == INCORRECT and ch06.FORK_REFS_MESSAGE in result.message
    assert "copied before the write" not in result.message
    assert ch06.FORK_REFS_MESSAGE not in ch06.fork_and_copy_on_write.check(ch06._NoCopyPool).message


def test_a_pool_that_copies_its_tables_is_not_called_aliased():
    result = ch06.fork_and_copy_on_write.check(ch06._NoCopyPool)
    assert result.state == INCORRECT and result.message != ch06.ALIAS_MESSAGE


def test_predicted_blocks_and_copies_agree_with_the_block_manager():
    from pagedlib import BlockManager
    bm = BlockManager(num_blocks=32, block_size=ch06.PREDICT_BLOCK_SIZE)
    for op, *args in ch06.PREDICT_SCRIPT:
        if op == "allocate":
            bm.allocate(args[0], list(range(args[1])))
        elif op == "fork":
            bm.fork(*args)
        else:
            bm.append(args[0])
    assert (bm.num_used_blocks, bm.num_copies) == ch06.predict_blocks_and_copies.reference


def test_a_zero_last_page_len_is_named():
    ref = ch05.predict_csr.reference
    result = ch05.predict_csr.check((ref[0], [n % 4 for n in ch05.PREDICT_SEQ_LENS]))
    assert result.state == INCORRECT and "n % block_size" in result.message


def test_csr_with_n_mod_p_is_named_on_the_function_exercise():
    def modulo(block_tables, seq_lens, p):
        indptr, indices, _ = ch05.block_table_to_csr.reference(block_tables, seq_lens, p)
        return indptr, indices, [n % p for n in seq_lens]
    result = ch05.block_table_to_csr.check(modulo)
    assert result.state == INCORRECT and "full" in result.message


def test_a_reshape_without_permute_is_named():
    result = ch05.legacy_key_to_nhd.check(ch05.legacy_key_to_nhd.wrong[0])
    assert result.state == INCORRECT and "permute" in result.message


def test_hit_count_names_the_prompt_that_is_off():
    ref = list(ch07.hit_count.reference)
    repeat_whole = ref[:2] + [12] + ref[3:]
    assert "Prompt 3" in ch07.hit_count.check(repeat_whole).message
    assert "blocks" in ch07.hit_count.check([h // 4 for h in ref]).message
    assert ch07.hit_count.check(ref).state == CORRECT


def test_evicted_prefix_matches_the_replay():
    assert ch07.evict_replay() == {"A": 0, "B": 0, "C": 0, "A again": ch07.evicted_prefix.reference}


def test_the_chapters_loop_with_its_fixed_block_size_is_told_to_read_the_cache():
    import torch

    def chapter_gather(cache, table, seq_len, BLOCK_SIZE=4):
        return torch.stack([cache[table[t // BLOCK_SIZE], t % BLOCK_SIZE] for t in range(seq_len)])
    result = ch05.gather_keys.check(chapter_gather)
    assert result.state == INCORRECT and "key_cache.shape[1]" in result.message
