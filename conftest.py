"""The test session's set-up, before any test runs (this file sits at the root, so it is loaded for
``pytest tests``, ``pytest notebooks`` and a single notebook alike)."""


def pytest_configure(config):
    prepare_real_model(config)


def prepare_real_model(config) -> bool:
    """Convert SmolLM2 into its cache folder once, before the notebooks run (chapters 7, 10 and 11
    load it). Done by the controlling process alone (``pytest-xdist``'s workers start after it), so
    two workers never race to convert it, and silently, so no notebook's stored output depends on
    whether the cache already existed. Only a session that runs notebooks (``--nbval``) needs it.
    Returns whether it converted."""
    if hasattr(config, "workerinput") or not (config.getoption("nbval", False)
                                              or config.getoption("nbval_lax", False)):
        return False
    import pytest
    from pagedlib.models import smollm2
    folder = smollm2.cache_dir()
    if smollm2.is_converted(folder):
        return False
    try:
        smollm2.convert(folder)
    except (ModuleNotFoundError, FileNotFoundError) as error:
        raise pytest.UsageError(f"the notebooks need the real model: {error}") from error
    return True
