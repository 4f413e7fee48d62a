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


def test_with_a_gpu_triton_compiles_and_fp16_is_the_default(tmp_path):
    assert _choice(tmp_path, cuda=True) == ["unset", "cuda", "float16", "False", "True", "True"]


def test_without_a_gpu_the_interpreter_runs_on_cpu_in_fp32(tmp_path):
    assert _choice(tmp_path, cuda=False) == ["1", "cpu", "float32", "False", "False", "False"]


def _run_script(tmp_path, code: str) -> str:
    """Run `code` as a file (Triton needs kernels defined in files) without TRITON_INTERPRET set."""
    script = tmp_path / "script.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          check=True).stdout


def test_interpreter_is_set_before_any_kernel_is_defined(tmp_path):
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None)\n"
            "import pagedlib, triton, triton.language as tl\n"
            "@triton.jit\n"
            "def k(x): pass\n"
            "from pagedlib.runtime import kernel_is_interpreted\n"
            "print(os.environ['TRITON_INTERPRET'], kernel_is_interpreted(k))")
    assert _run_script(tmp_path, code).split() == ["1", "True"]


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
        pagedlib.not_a_name
