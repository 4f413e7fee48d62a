"""Chapter 1's exercise on cache shapes: each near miss gets its own named message."""
from pagedlib import MODELS
from pagedlib.exercises import ch01 as ex


_ref = ex.cache_bytes.reference      # the learner's spec has no kv_bytes: near misses build on this


def _message(fn):
    result = ex.cache_bytes.check(fn)
    assert result.state == "incorrect"
    return result.message


def test_the_reference_and_the_library_agree():
    for spec, n in ex._CACHE_CASES:
        assert ex.cache_bytes.reference(spec, n) == spec.kv_bytes(n), spec.name

def test_calling_the_answer_s_helper_is_refused_by_name():
    """The exercises say "do not call spec.kv_bytes / spec.kv_bytes_per_token": the checker holds
    them to it (issue 37: both were accepted as Correct)."""
    message = _message(lambda spec, n: spec.kv_bytes(n))
    assert "uses `spec.kv_bytes`" in message and "computes the answer itself" in message
    assert "uses `spec.tokens_held`" in _message(lambda spec, n: spec.tokens_held(n) * 2)
    assert "`spec.kv_bytes`" in _message(lambda spec, n: spec.replace(kv_dtype_bytes=1).kv_bytes(n))
    result = ex.kv_bytes_per_token.check(lambda s: s.kv_bytes_per_token)
    assert result.state == "incorrect" and "uses `spec.kv_bytes_per_token`" in result.message
    result = ex.kv_bytes_per_token.check(lambda s: s.kv_bytes_per_token_per_layer * s.num_layers)
    assert result.state == "incorrect" and "kv_bytes_per_token_per_layer" in result.message
    # the fields and the helpers the question names still work, and the reference passes
    assert ex.cache_bytes.check(_ref).correct and ex.kv_bytes_per_token.check(ex.kv_bytes_per_token.reference).correct


def test_a_forgotten_dtype_is_not_called_a_forgotten_k_and_v():
    """With a 2-byte dtype the two slips give the same number; the first case is fp32, so each
    gets its own diagnosis (issue 37)."""
    no_dtype = ex.kv_bytes_per_token.check(lambda s: 2 * s.num_layers * s.num_kv_heads * s.head_dim)
    assert "counts elements" in no_dtype.message and "dtype_bytes=4" in no_dtype.message
    assert "key AND a value" not in no_dtype.message
    no_v = ex.kv_bytes_per_token.check(lambda s: s.num_layers * s.num_kv_heads * s.head_dim * s.dtype_bytes)
    assert "key AND a value" in no_v.message and "counts elements" not in no_v.message


def test_ignoring_the_window_is_named():
    assert "windowed layers keep at most sliding_window=4096" in _message(ex._naive_cache_bytes)


def test_windowing_the_global_layers_is_named():
    def all_windowed(spec, n):
        if spec.sliding_window is None:
            return _ref(spec, n)
        return _ref(spec.replace(num_sliding_layers=spec.num_attention_layers), n)
    assert "num_global_layers=10 global ones keep every token" in _message(all_windowed)


def test_a_factor_two_on_the_latent_is_named():
    def doubled_latent(spec, n):
        return _ref(spec, n) * (2 if spec.kv_latent_dim is not None else 1)
    assert "no factor 2" in _message(doubled_latent)


def test_forgetting_the_state_is_named():
    assert "state_bytes_per_seq" in _message(lambda spec, n: _ref(spec, n) - spec.state_bytes_per_seq)


def test_state_layers_counted_as_attention_are_named():
    def no_state(spec, n):
        return _ref(spec.replace(num_state_layers=0, state_bytes_per_layer=0), n)
    message = _message(no_state)      # at 0 tokens this looks like a forgotten state; later, named
    assert "state layers" in message or "only num_attention_layers=12 layers cache K/V" in message
    spec = MODELS["qwen3-coder-next"]
    assert "only num_attention_layers=12 layers cache K/V" in ex._diagnose_cache(
        no_state(spec, 4096), spec.kv_bytes(4096), (spec, 4096))


def test_the_weights_dtype_for_the_cache_is_named():
    assert "kv_dtype_bytes=1" in _message(lambda spec, n: _ref(spec.replace(kv_dtype_bytes=None), n))


def test_the_old_memory_default_is_named():
    def old_default(spec, gpu_bytes, seq_len):
        return max(int(gpu_bytes * 0.9) - spec.weights_bytes, 0) // (seq_len * spec.kv_bytes_per_token)
    result = ex.requests_that_fit.check(old_default)
    assert result.state == "incorrect" and "before v0.21 (0.9)" in result.message
    assert MODELS["llama-3.1-8b"].is_uniform
