"""Tests for ``bandpo_lab.runtime.precision``: the precision setting (validation, CPU detection, resolution, the
contexts), and ``bf16`` refused in one line on a CPU without native bf16 before any model loads (training's
preflight, ``eval``, ``probe``; the CPU simulated through the ``/proc/cpuinfo`` the module reads)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

import bandpo_lab.runtime.precision as precision_module
from bandpo_lab.runtime import (
    BF16_MIN_PARAMS,
    GPU_REASON,
    PRECISIONS,
    Precision,
    bf16_problem,
    check_precision,
    cpu_bf16_flags,
    onednn_matmul_setting,
    precision_for,
    resolve_precision,
)
from helpers import CONFIGS, REPO
from helpers.cli import exit_status

AMX = "processor : 0\nflags : fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX2 = "processor : 0\nflags : fpu sse avx2 fma\n"


@pytest.mark.parametrize("value", PRECISIONS)
def test_valid_precisions(value: str) -> None:
    assert check_precision(value) == value


def test_bfloat16_reads_as_bf16() -> None:
    assert check_precision("bfloat16") == "bf16"


@pytest.mark.parametrize("value", ["fp16", "BF16", "", None, 32])
def test_unknown_precision_is_one_line_with_the_valid_values(value: object) -> None:
    with pytest.raises(ValueError) as err:
        check_precision(value, "model.precision")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("model.precision must be one of auto, float32, bf16, got ")
    assert repr(value) in message


def test_cpu_flags() -> None:
    assert cpu_bf16_flags(AMX) == ("amx_bf16", "avx512_bf16")
    assert cpu_bf16_flags(AVX2) == ()
    assert cpu_bf16_flags("") == ()
    assert cpu_bf16_flags(AMX + "\n" + AMX.replace("processor : 0", "processor : 1")) == (
        "amx_bf16",
        "avx512_bf16",
    )
    # cores that differ: only the flags every core lists count (a process may run on any of them)
    assert cpu_bf16_flags(AMX + "\n" + AVX2.replace("processor : 0", "processor : 1")) == ()
    mixed = AMX + "\n" + AMX.replace("processor : 0", "processor : 1").replace(" amx_bf16", "")
    assert cpu_bf16_flags(mixed) == ("avx512_bf16",)


def test_auto_picks_bf16_only_with_native_bf16_and_a_large_model() -> None:
    assert resolve_precision("auto", cpuinfo=AMX).name == "bf16"
    assert resolve_precision("auto", cpuinfo=AMX, n_params=BF16_MIN_PARAMS).name == "bf16"
    small = resolve_precision("auto", cpuinfo=AMX, n_params=900_000)
    assert small.name == "float32" and "0.9M parameters" in small.reason
    avx2 = resolve_precision("auto", cpuinfo=AVX2)
    assert avx2.name == "float32" and "no native bf16" in avx2.reason
    assert resolve_precision("float32", cpuinfo=AMX).name == "float32"
    assert resolve_precision("auto", on_gpu=True, cpuinfo=AMX).name == "framework"


REFUSED = "is not supported on this CPU (no avx512_bf16/amx_bf16 instructions); use float32 or auto"


def test_bf16_without_native_bf16_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as err:
        resolve_precision("bf16", cpuinfo=AVX2)
    assert str(err.value) == f"precision='bf16' {REFUSED}"
    assert resolve_precision("bf16", cpuinfo=AMX).name == "bf16"
    assert resolve_precision("bf16", on_gpu=True, cpuinfo=AVX2).name == "framework"
    assert resolve_precision("auto", cpuinfo=AVX2).name == "float32"  # auto keeps choosing float32 there


@pytest.mark.parametrize(
    ("value", "kwargs", "refused"),
    [
        ("bf16", {"cpuinfo": AVX2}, True),
        ("bfloat16", {"cpuinfo": AVX2}, True),
        ("bf16", {"cpuinfo": AMX}, False),
        ("bf16", {"cpuinfo": AVX2, "on_gpu": True}, False),
        ("auto", {"cpuinfo": AVX2}, False),
        ("float32", {"cpuinfo": AVX2}, False),
    ],
)
def test_bf16_problem_only_for_bf16_on_a_cpu_without_it(
    value: str, kwargs: dict[str, Any], refused: bool
) -> None:
    problem = bf16_problem(value, "model.precision", at="in a.yaml:3", **kwargs)
    if refused:
        assert problem == f"model.precision={value!r} (in a.yaml:3) {REFUSED}"
    else:
        assert problem is None


@pytest.fixture
def cpu_without_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's ``/proc/cpuinfo`` as an AVX2 CPU's, without native bf16."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AVX2)
    monkeypatch.setattr(precision_module, "_CPUINFO", cpuinfo)
    assert cpu_bf16_flags() == ()


def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a model is resolved or loaded."""

    def fail(*args: Any, **kwargs: Any) -> None:
        pytest.fail("a model was resolved or loaded before model.precision was checked")

    for target in ("bandpo_lab.eval.models.resolve_model_dir", "bandpo_lab.eval.models.load_model"):
        monkeypatch.setattr(target, fail)


@pytest.mark.usefixtures("cpu_without_bf16")
def test_training_refuses_bf16_in_its_preflight(tmp_path: Path) -> None:
    from bandpo_lab.training.config import ConfigError, load_train_config
    from bandpo_lab.training.run import prepare

    config = load_train_config(
        CONFIGS / "tiny.yaml", [f"output_dir={tmp_path / 'run'}", "model.precision=bf16"]
    )
    with pytest.raises(ConfigError) as err:
        prepare(config)
    assert str(err.value) == f"model.precision='bf16' (from the overrides) {REFUSED}"
    float32 = load_train_config(
        CONFIGS / "tiny.yaml", [f"output_dir={tmp_path / 'run'}", "model.precision=float32"]
    )
    assert prepare(float32).config.model.precision == "float32"


@pytest.mark.usefixtures("cpu_without_bf16")
@pytest.mark.parametrize("command", ["eval", "probe"])
def test_eval_and_probe_refuse_bf16_before_the_model(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_model(monkeypatch)
    argv = [command, "--model", "tiny", "--precision", "bf16", "--no-progress"]
    if command == "probe":
        argv += ["--output-dir", str(tmp_path / "probe"), "--no-figures"]
    assert exit_status(argv) == 2
    assert capsys.readouterr().err == f"bandpo {command}: error: --precision='bf16' {REFUSED}\n"


DELETED = ("bandpo_lab.bf16_emulation", "bandpo_lab.bf16_attention")
"""The emulation of bf16 products and eager attention's float32 copies: deleted with Study 4 finished (it ran on
AVX2 machines with them; docs/study.md names its commits)."""


def test_the_deleted_emulation_modules_are_gone_and_nothing_imports_them() -> None:
    assert all(importlib.util.find_spec(name) is None for name in DELETED)
    importers = []
    for folder in ("src", "tests", "scripts", "benchmarks", "studies", "examples"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if any(n == d or n.startswith(d + ".") for n in names for d in DELETED):
                    importers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert importers == []


def test_record_and_describe() -> None:
    p = resolve_precision("auto", cpuinfo=AMX)
    assert p.record() == {
        "requested": "auto",
        "name": "bf16",
        "reason": "auto: this CPU has amx_bf16, avx512_bf16",
    }
    assert p.describe().startswith("bf16 (auto:")


def _mkldnn_precision() -> str | None:
    """oneDNN's float32 matmul precision as torch reports it (not through ``onednn_matmul_setting``, the code under
    test: where that returned None, the test below skipped and the contexts set nothing unnoticed)."""
    return getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", None)


@pytest.mark.skipif(_mkldnn_precision() is None, reason="this torch has no mkldnn fp32_precision")
def test_backward_and_exact_contexts_set_and_restore_the_matmul_precision() -> None:
    assert onednn_matmul_setting() is torch.backends.mkldnn.matmul
    bf16 = Precision("bf16", "bf16", "test")
    before = _mkldnn_precision()
    with bf16.backward():
        assert _mkldnn_precision() == "bf16"
        with bf16.exact():
            assert _mkldnn_precision() == "ieee"
        assert _mkldnn_precision() == "bf16"
    assert _mkldnn_precision() == before
    f32 = Precision("float32", "float32", "test")
    with f32.backward(), f32.exact():
        assert _mkldnn_precision() == before


def test_exact_forward_inside_bf16_backward_is_float32() -> None:
    """Under ``backward()`` a float32 product takes bf16 inputs; under ``exact()`` inside it, it is float32 again
    (equal to the product outside any context)."""
    torch.manual_seed(0)
    a, b = torch.randn(64, 256), torch.randn(256, 64)
    ref = a @ b
    p = Precision("bf16", "bf16", "test")
    with p.backward(), p.exact():
        assert torch.equal(a @ b, ref)


def test_sampling_context_autocasts_only_for_bf16() -> None:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with Precision("bf16", "bf16", "t").sampling():
        assert (a @ b).dtype == torch.bfloat16
    with Precision("float32", "float32", "t").sampling():
        assert (a @ b).dtype == torch.float32


def test_precision_for_a_model_counts_its_parameters_and_reads_its_device() -> None:
    small = torch.nn.Linear(10, 10)  # 110 parameters, on the CPU
    p = precision_for("auto", small)
    assert p.name == "float32"
    assert p.name == resolve_precision("auto", n_params=110).name
    assert precision_for("auto", small, on_gpu=True).name == "framework"
    gpu = precision_for("bf16", small, on_gpu=True, gpu_reason="TRL's bf16 and fp16 off: float32")
    assert gpu.describe() == "framework (GPU: TRL's bf16 and fp16 off: float32)"
    assert precision_for("auto", small, on_gpu=True).reason == GPU_REASON


def test_gpu_precision_reason_says_what_trl_computes() -> None:
    """On a GPU the run's precision line and run_info.json say what TRL's own flags compute (it said "mixed
    precision (TRL: bf16)" also with bf16 off)."""
    from types import SimpleNamespace

    from bandpo_lab.training.run import gpu_precision_reason

    def reason(torch_tf32: bool | None = None, **flags: bool | None) -> str:
        args = SimpleNamespace(**{"bf16": False, "fp16": False, "tf32": None, **flags})
        return gpu_precision_reason(args, torch_tf32)

    assert reason() == "TRL's bf16 and fp16 off: float32"
    assert reason(tf32=True) == "TRL's bf16 and fp16 off: float32, TF32 products"
    assert reason(bf16=True) == "TRL's bf16: true: autocast, the ratio's log-probs in bf16 too"
    assert (
        reason(fp16=True, tf32=True)
        == "TRL's fp16: true: autocast, the ratio's log-probs in fp16 too, TF32 products"
    )
    # PyTorch's own setting wins over TRL's field (set_float32_matmul_precision, say)
    assert reason(torch_tf32=True) == "TRL's bf16 and fp16 off: float32, TF32 products"
    assert reason(torch_tf32=False, tf32=True) == "TRL's bf16 and fp16 off: float32"


def test_cuda_tf32_reads_pytorchs_settings() -> None:
    """Readable without a GPU: off by default, on after set_float32_matmul_precision("high") or the CUDA matmul
    setting, off again after "highest"."""
    from bandpo_lab.runtime import cuda_tf32

    backends = [torch.backends, torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    before = [b.fp32_precision for b in backends]
    try:
        torch.set_float32_matmul_precision("highest")
        assert cuda_tf32() is False
        torch.set_float32_matmul_precision("high")
        assert cuda_tf32() is True
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        assert cuda_tf32() is False
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        assert cuda_tf32() is True
    finally:  # the exact settings back ("none": inherit), not set_float32_matmul_precision's explicit ones
        for backend, value in zip(backends, before):
            backend.fp32_precision = value
    assert [b.fp32_precision for b in backends] == before


def test_weights_note_says_when_the_ratio_cannot_be_float32() -> None:
    """Weights loaded in bfloat16 (``model.dtype: bfloat16``) make every forward bfloat16 on a CPU, whatever the
    precision, on a CPU or a GPU: one line says so, with what keeps them float32 there; float32 weights need none."""
    from bandpo_lab.runtime import weights_note

    bf16, f32 = torch.nn.Linear(4, 4).to(torch.bfloat16), torch.nn.Linear(4, 4)
    cpu = Precision("bf16", "bf16", "t")
    note = weights_note(cpu, bf16)
    assert note is not None and note.startswith("the weights are bfloat16: the log-probs of the ratio")
    assert weights_note(cpu, f32) is None
    gpu = weights_note(Precision("auto", "framework", "GPU"), bf16)
    assert gpu is not None and gpu.endswith(
        "(model.dtype float32 with bf16 and fp16 false keeps them float32)"
    )
    assert weights_note(Precision("auto", "framework", "GPU"), f32) is None
