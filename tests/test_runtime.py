"""The runtime choice: CPU + Triton interpreter here, with the right defaults and warnings."""
import os
import subprocess
import sys

import pytest
import torch

import pagedlib
from pagedlib import runtime


def test_runtime_matches_this_machine():
    if torch.cuda.is_available():
        assert not runtime.INTERPRET and runtime.DEVICE.type == "cuda" and runtime.DTYPE == torch.float16
    else:
        assert os.environ["TRITON_INTERPRET"] == "1"
        assert runtime.INTERPRET and runtime.DEVICE.type == "cpu" and runtime.DTYPE == torch.float32


def _choice(tmp_path, cuda: bool) -> list[str]:
    """The runtime's choice in a fresh process where torch reports `cuda` as available or not."""
    code = ("import os, torch\n"
            f"torch.cuda.is_available = lambda: {cuda}\n"
            "torch.cuda.get_device_name = lambda i=0: 'Tesla T4'\n"
            "torch.cuda.get_device_capability = lambda i=0: (7, 5)\n"
            "from pagedlib import runtime\n"
            "print(os.environ.get('TRITON_INTERPRET', 'unset'), runtime.DEVICE.type,\n"
            "      str(runtime.DTYPE).replace('torch.', ''), runtime.supports_bf16(),\n"
            "      'T4' in runtime.env_report(), any('no bf16' in t for t in runtime.traps()))")
    return _run_script(tmp_path, code).split()


@pytest.mark.slow
def test_with_a_gpu_triton_compiles_and_fp16_is_the_default(tmp_path):
    assert _choice(tmp_path, cuda=True) == ["unset", "cuda", "float16", "False", "True", "True"]


@pytest.mark.slow
def test_without_a_gpu_the_interpreter_runs_on_cpu_in_fp32(tmp_path):
    assert _choice(tmp_path, cuda=False) == ["1", "cpu", "float32", "False", "False", "False"]


def _run_script(tmp_path, code: str) -> str:
    """Run `code` as a file (Triton needs kernels defined in files) without TRITON_INTERPRET set."""
    script = tmp_path / "script.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          check=True).stdout


@pytest.mark.slow
def test_interpreter_is_set_before_any_kernel_is_defined(tmp_path):
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "import pagedlib, triton, triton.language as tl\n"
            "@triton.jit\n"
            "def k(x): pass\n"
            "from pagedlib.runtime import kernel_is_interpreted\n"
            "print(os.environ['TRITON_INTERPRET'], kernel_is_interpreted(k))")
    assert _run_script(tmp_path, code).split() == ["1", "True"]


@pytest.mark.slow
def test_late_interpreter_variable_is_reported_with_the_fix(tmp_path):
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "import sys, types, triton\n"
            "@triton.jit\n"
            "def early(x): pass\n"
            "mod = types.ModuleType('pagedlib.fake'); mod.early = early; sys.modules['pagedlib.fake'] = mod\n"
            "from pagedlib import runtime\n"
            "print('\\n'.join(runtime.traps()))")
    out = _run_script(tmp_path, code)
    assert "pagedlib.fake.early" in out and "restart" in out


def test_env_report_names_versions_and_device():
    report = pagedlib.env_report()
    device = runtime.gpu_name() if runtime.DEVICE.type == "cuda" else "CPU, Triton interpreter"
    for word in ("Python", "torch", "triton", device, str(runtime.DTYPE).replace("torch.", "")):
        assert word in report


def test_print_env_prints_the_report(capsys):
    pagedlib.print_env()
    assert "device" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's bf16 trap; the GPU case is tested above")
def test_bf16_is_refused_on_the_cpu_with_the_fix():
    assert not runtime.supports_bf16()
    with pytest.raises(ValueError, match="float32"):
        runtime.check_dtype(torch.bfloat16)
    runtime.check_dtype(torch.float16)
    runtime.check_dtype(torch.float32)
    assert any("bf16" in t for t in runtime.traps())


def test_lazy_exports_resolve():
    for name in pagedlib._EXPORTS:
        assert getattr(pagedlib, name) is not None, name
    assert "BlockManager" in dir(pagedlib)
    with pytest.raises(AttributeError):
        _ = pagedlib.not_a_name


# ---- the version rules, with faked versions ---------------------------------------------------
def _versions(triton, numpy, gpu=None):
    """Versions as the rules see them: the interpreter when `gpu` (a compute capability) is None."""
    return runtime.Versions(torch="2.13.0", triton=triton, numpy=numpy, interpret=gpu is None,
                            capability=gpu)


@pytest.mark.parametrize("triton, numpy, gpu, fix", [
    ("3.0.0", "2.0.0", None, 'pip install "numpy<2"'),          # wrong results: refused
    ("3.1.0", "2.3.5", None, 'pip install "numpy<2"'),
    ("3.1.0", "2.4.6", None, 'pip install "numpy<2"'),
    ("3.1.0", "1.26.4", None, None),
    ("3.1.0", "2.3.5", (8, 0), None),                             # compiled, not interpreted
    ("3.2.0", "2.3.5", None, None),
    ("3.2.0", "2.4.0", None, 'pip install "numpy<2.4"'),          # fails loudly: warned
    ("3.6.0+git9f8e7d", "2.4.6", None, 'pip install "numpy<2.4"'),
    ("3.6.0", "2.4.6", (8, 0), None),
    ("3.7.0", "2.4.6", None, None),
    ("3.9.0", "2.4.6", None, None),
    ("3.3.1", "2.3.5", None, None),
    ("3.3.0", "2.4.6", (7, 5), 'pip install "triton>=3.4"'),      # a T4
    ("3.3.1", "2.3.5", (8, 0), None),
    ("3.4.0", "2.3.5", (7, 5), None),
    ("3.2.0", "2.4.6", (7, 5), None),
    (None, "2.4.6", None, None),                                  # no triton: no kernel, no rule
])
def test_rules_name_the_one_fix_for_each_known_bad_combination(triton, numpy, gpu, fix):
    found = runtime.problems(_versions(triton, numpy, gpu))
    assert [rule.fix for rule in found] == ([fix] if fix else [])


def test_a_silently_wrong_combination_is_refused_with_the_pip_fix():
    with pytest.raises(runtime.UnsupportedVersions) as refused:
        runtime.check_versions(_versions("3.1.0", "2.3.5"))
    message = str(refused.value)
    assert 'pip install "numpy<2"' in message and "triton 3.1.0" in message and "numpy 2.3.5" in message
    assert "restart" in message and refused.value.fix == 'pip install "numpy<2"'


def test_a_loud_failure_is_warned_with_the_fix():
    with pytest.warns(runtime.VersionWarning, match=r'triton 3\.6\.0 with numpy 2\.4\.6.*numpy<2\.4'):
        runtime.check_versions(_versions("3.6.0", "2.4.6"))
    with pytest.warns(runtime.VersionWarning, match=r"compute capability 7\.5.*triton>=3\.4"):
        runtime.check_versions(_versions("3.3.1", "2.4.6", gpu=(7, 5)))


def test_a_good_combination_passes_silently(recwarn):
    runtime.check_versions(_versions("3.7.1", "2.4.6"))
    assert not [w for w in recwarn if issubclass(w.category, runtime.VersionWarning)]


def test_the_bypass_turns_the_refusal_into_a_warning(monkeypatch):
    monkeypatch.setenv(runtime.IGNORE_RULES_VAR, "1")
    with pytest.warns(runtime.VersionWarning, match="numpy<2"):
        runtime.check_versions(_versions("3.1.0", "2.3.5"))


def test_verdict_says_ok_or_names_each_problem():
    assert runtime.verdict(_versions("3.9.0", "2.4.6")).startswith("ok")
    both = runtime.verdict(_versions("3.3.1", "2.4.6", gpu=(7, 5)))
    assert both.startswith("warning: ") and "triton>=3.4" in both
    assert runtime.verdict(_versions("3.1.0", "2.3.5")).startswith("refused: ")


def test_env_report_ends_with_the_verdict_for_this_machine():
    report = pagedlib.env_report().splitlines()
    assert report[-1] == "verdict " + runtime.verdict() and any(l.startswith("numpy ") for l in report)


@pytest.mark.parametrize("text, release", [("3.7.1", (3, 7, 1)), ("3.6.0+git9f8e7d", (3, 6, 0)),
                                           ("2.4.0rc1", (2, 4, 0)), ("1.26.4", (1, 26, 4))])
def test_release_reads_the_numeric_part(text, release):
    assert runtime.release(text) == release


def test_release_refuses_a_version_without_digits():
    with pytest.raises(ValueError, match="version must start with digits"):
        runtime.release("main")


def test_a_loaded_module_version_wins_over_the_installed_one(monkeypatch):
    """After `pip install numpy<2.4` in a running notebook, the old numpy is still the one in use."""
    import types
    monkeypatch.setitem(sys.modules, "numpy", types.SimpleNamespace(__version__="2.4.1"))
    assert runtime.current_versions().numpy == "2.4.1"


def test_every_rule_cites_its_measurement_and_gives_one_pip_command():
    for rule in runtime.RULES:
        assert rule.fix.startswith("pip install ") and rule.fix.count("pip") == 1
        assert "drift check" in rule.measured and rule.where in ("interpreter", "sm_75")
        for low, high in (rule.triton, rule.numpy):
            assert low is None or high is None or low < high


def _fake_versions_then_import(triton: str, numpy: str) -> str:
    """A script that makes triton and numpy report other versions, then imports pagedlib."""
    return ("import warnings; warnings.simplefilter('always')\n"
            "import numpy, triton, sys\n"
            f"triton.__version__, numpy.__version__ = {triton!r}, {numpy!r}\n"
            "try:\n"
            "    import pagedlib\n"
            "except Exception as error:\n"
            "    print(type(error).__name__, error.fix)\n"
            "print('kernels loaded:', any(m.startswith('pagedlib.attention.kernels') for m in sys.modules))\n")


@pytest.mark.slow
def test_import_refuses_a_silently_wrong_combination_before_any_kernel(tmp_path):
    out = _run_script(tmp_path, _fake_versions_then_import("3.1.0", "2.3.5"))
    assert out.splitlines() == ['UnsupportedVersions pip install "numpy<2"', "kernels loaded: False"]


@pytest.mark.slow
def test_import_warns_about_a_loud_failure(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(_fake_versions_then_import("3.5.1", "2.4.0"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    assert "VersionWarning" in done.stderr and 'pip install "numpy<2.4"' in done.stderr
    assert "UnsupportedVersions" not in done.stdout


# ---- traps a learner meets: triton imported first; a known version failure at launch -------------
@pytest.mark.slow   # a fresh Python process, like the other import-order tests above
def test_triton_imported_before_pagedlib_is_named_in_the_verdict_and_the_checker(tmp_path):
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "import warnings; warnings.simplefilter('ignore')\n"
            "import triton, triton.language as tl\n"           # the trap: triton before pagedlib
            "import pagedlib\n"
            "from pagedlib.exercises import ch08\n"
            "print(pagedlib.runtime.verdict())\n"
            "print('CHECK', ch08.page_scores.check(ch08.page_scores_kernel))\n")
    out = _run_script(tmp_path, code)
    verdict = out.split("CHECK")[0]
    assert not verdict.startswith("ok") and "triton was imported before TRITON_INTERPRET" in verdict
    assert "import pagedlib` before" in verdict and "restart" in verdict.lower()
    check = out.split("CHECK")[1]
    assert "not because of its code" in check and "import pagedlib` before" in check


@pytest.mark.slow   # a fresh Python process, like the other import-order tests above
def test_triton_imported_first_with_the_variable_set_is_fine(tmp_path):
    code = ("import os; os.environ['TRITON_INTERPRET'] = '1'\n"
            "import triton\n"
            "import pagedlib\n"
            "print(pagedlib.runtime.verdict().split(':')[0], pagedlib.runtime.import_order_problem())\n")
    assert _run_script(tmp_path, code).split() == ["ok", "None"]


_NUMPY_24_ERROR = "only 0-dimensional arrays can be converted to Python scalars"


class _FailingKernel:
    """Stands for a kernel under triton 3.6 + numpy 2.4: every launch fails as the drift check saw."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton.runtime.errors import InterpreterError
            try:
                raise TypeError(_NUMPY_24_ERROR)
            except TypeError as exc:
                raise InterpreterError(repr(exc)) from exc
        return launch


def _old_triton(monkeypatch):
    versions = runtime.Versions(torch="2.13.0", triton="3.6.0", numpy="2.4.6", interpret=True,
                                capability=None)
    monkeypatch.setattr(runtime, "current_versions", lambda: versions)


def test_a_launch_that_fails_as_a_known_rule_says_is_reraised_with_the_fix(monkeypatch):
    import pagedlib.attention.triton_backend as attention
    from pagedlib.attention.inputs import random_paged_inputs
    _old_triton(monkeypatch)
    monkeypatch.setattr(attention, "decode_kernel", _FailingKernel())
    x = random_paged_inputs([5, 9], num_heads=2, num_kv_heads=2, head_dim=16, block_size=4)
    with pytest.raises(runtime.KnownVersionFailure, match=r'pip install "numpy<2.4"') as info:
        pagedlib.paged_attention(*x.args(), num_splits=1)
    assert "triton 3.6.0 with numpy 2.4.6" in str(info.value) and info.value.fix == 'pip install "numpy<2.4"'
    assert _NUMPY_24_ERROR in repr(info.value.__cause__.__cause__)


def test_the_same_error_under_good_versions_passes_unchanged(monkeypatch):
    import pagedlib.attention.triton_backend as attention
    from pagedlib.attention.inputs import random_paged_inputs
    from triton.runtime.errors import InterpreterError
    monkeypatch.setattr(attention, "decode_kernel", _FailingKernel())
    x = random_paged_inputs([5], num_heads=2, num_kv_heads=2, head_dim=16, block_size=4)
    if runtime.problems():
        pytest.skip("this machine's versions break a rule")
    with pytest.raises(InterpreterError):
        pagedlib.paged_attention(*x.args(), num_splits=1)


def test_the_kernel_checker_gives_the_rules_fix_for_a_known_failure(monkeypatch):
    from pagedlib.exercises import ch08
    from pagedlib.exercises.kernel_checks import KernelExercise
    _old_triton(monkeypatch)
    ex = KernelExercise("test.numpy24", "q", ch08.load_page_kernel,
                        launch=lambda kernel, **inputs: _FailingKernel()[(1,)](),
                        cases=ch08.load_page.kernel_cases[:1], wrong=[ch08.load_page_kernel])
    message = ex.check(ch08.load_page_kernel).message
    assert "not because of its code" in message and 'pip install "numpy<2.4"' in message
