"""Tests for ``bandpo_lab.runtime``: the precision setting (validation, CPU detection, resolution, the contexts) and
the allocator switch."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from bandpo_lab.bf16_emulation import onednn_matmul_setting
from bandpo_lab.runtime import (
    BF16_MIN_PARAMS,
    GPU_REASON,
    PRECISIONS,
    Bf16SlowWarning,
    Precision,
    check_precision,
    completion_tokens_only,
    cpu_bf16_flags,
    freed_memory_kept,
    freed_memory_returned,
    precision_for,
    resolve_precision,
)
from helpers.tiny import build_tiny_model_dir

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


def test_auto_picks_bf16_only_with_native_bf16_and_a_large_model() -> None:
    assert resolve_precision("auto", cpuinfo=AMX).name == "bf16"
    assert resolve_precision("auto", cpuinfo=AMX, n_params=BF16_MIN_PARAMS).name == "bf16"
    small = resolve_precision("auto", cpuinfo=AMX, n_params=900_000)
    assert small.name == "float32" and "0.9M parameters" in small.reason
    avx2 = resolve_precision("auto", cpuinfo=AVX2)
    assert avx2.name == "float32" and "no native bf16" in avx2.reason
    assert resolve_precision("float32", cpuinfo=AMX).name == "float32"
    assert resolve_precision("auto", on_gpu=True, cpuinfo=AMX).name == "framework"


def test_bf16_without_native_bf16_runs_with_one_warning() -> None:
    with pytest.warns(Bf16SlowWarning, match="slower than float32 here") as record:
        p = resolve_precision("bf16", cpuinfo=AVX2)
    assert p.name == "bf16" and len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_precision("bf16", cpuinfo=AMX).name == "bf16"


def test_record_and_describe() -> None:
    p = resolve_precision("auto", cpuinfo=AMX)
    assert p.record() == {
        "requested": "auto",
        "name": "bf16",
        "reason": "auto: this CPU has amx_bf16, avx512_bf16",
    }
    assert p.describe().startswith("bf16 (auto:")


def _mkldnn_precision() -> str | None:
    return getattr(onednn_matmul_setting(), "fp32_precision", None)


@pytest.mark.skipif(_mkldnn_precision() is None, reason="this torch has no mkldnn fp32_precision")
def test_backward_and_exact_contexts_set_and_restore_the_matmul_precision() -> None:
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


def test_freed_memory_kept_applies_inside_and_returns_memory_after() -> None:
    """Inside the block a freed 160 MB buffer stays in the heap (the process's size does not fall after the free);
    after it, glibc's defaults are back and the free heap is returned."""
    import resource

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 1e6

    with freed_memory_kept() as applied:
        assert isinstance(applied, bool)
        if not applied:
            pytest.skip("not glibc")
        big = torch.ones(40_000_000)  # 160 MB: above glibc's largest mmap threshold, from the heap here
        assert float(big[-1]) == 1.0
        before_free = rss_mb()
        del big
        assert rss_mb() > before_free - 50  # kept
    after = rss_mb()
    assert after < before_free - 100  # returned at the end of the block


_RETURNED_SCRIPT = """
import resource, sys, torch
from bandpo_lab.runtime import freed_memory_kept, freed_memory_returned

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6

with freed_memory_kept() as applied:
    if not applied:
        print("not glibc"); sys.exit(0)
    with freed_memory_returned():
        big = torch.ones(40_000_000)
        assert float(big[-1]) == 1.0
        before_free = rss_mb()
        del big
        returned = rss_mb() - before_free
    big = torch.ones(40_000_000)
    assert float(big[-1]) == 1.0
    before_free = rss_mb()
    del big
    kept = rss_mb() - before_free
with freed_memory_returned():  # outside a kept block: nothing to change
    pass
print(f"{returned:.1f} {kept:.1f}")
"""


def _fresh_process(script: str) -> list[str]:
    """The words ``script`` prints, run in a fresh Python process (one torch thread); skips off glibc."""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "not glibc":
        pytest.skip("not glibc")
    return out.stdout.split()


def test_freed_memory_returned_inside_a_kept_block_returns_it_and_keeps_again_after() -> None:
    """An evaluation during training: inside ``freed_memory_returned`` (itself inside ``freed_memory_kept``) a freed
    160 MB buffer goes back to the kernel; after it, the training's setting holds again (a freed buffer stays).
    In a fresh process: in a long-lived one (a pytest worker) a heap fragmented by earlier tests can serve the
    buffer from a free chunk, which no setting returns."""
    returned, kept = map(float, _fresh_process(_RETURNED_SCRIPT))
    assert returned < -100  # returned at once (MB)
    assert kept > -50  # kept again


_REUSE_SCRIPT = """
import resource, sys, torch
from bandpo_lab.runtime import freed_memory_kept, freed_memory_returned

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def cycles():
    x = torch.ones(1_000_000)
    del x
    before = faults()
    for _ in range(20):
        x = torch.ones(1_000_000)  # 4 MB, written: below a fresh process's settled mmap threshold
        del x
    return faults() - before

with freed_memory_kept() as applied:
    if not applied:
        print("not glibc"); sys.exit(0)
    with freed_memory_returned():
        during = cycles()
after = cycles()
print(during, after)
"""


def test_blocks_below_32_mib_are_reused_from_the_heap_during_and_after_the_training_block() -> None:
    """The slowdown this prevents: with the mmap threshold fixed at glibc's starting 128 KiB (what the block used
    to restore), each 4 MB buffer of an evaluation was a fresh mapping, ~1,000 page faults every time (19,540 for
    20 buffers, measured), and an evaluation ran 2.4x longer; at the settled 32 MiB the heap serves them again.
    In a fresh process, as the test above."""
    during, after = map(int, _fresh_process(_REUSE_SCRIPT))
    mapped_afresh = 20 * 4_000_000 // resource.getpagesize()  # faults if each buffer were a new mapping
    assert during < mapped_afresh / 4 and after < mapped_afresh / 4, (during, after)


def test_nested_freed_memory_returned_keeps_the_defaults_until_the_outermost_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An evaluation inside an evaluation during training: the training's setting comes back when the outermost
    ``freed_memory_returned`` ends, not the inner one; glibc's values when the training's block ends."""
    import bandpo_lab.runtime as runtime

    applied: list[str] = []

    class _Libc:
        def malloc_trim(self, pad: int) -> int:
            return 1

    names = {id(runtime._KEEP): "keep", id(runtime._RETURNED): "defaults"}
    monkeypatch.setattr(runtime, "_libc", lambda: _Libc())
    monkeypatch.setattr(runtime, "_set", lambda libc, settings: applied.append(names[id(settings)]) or True)
    with freed_memory_kept():
        with freed_memory_returned():
            with freed_memory_returned():
                assert applied == ["keep", "defaults"]
            assert applied == ["keep", "defaults"]  # still glibc's in the outer evaluation
        assert applied == ["keep", "defaults", "keep"]
    assert applied == ["keep", "defaults", "keep", "defaults"]


def test_completion_tokens_only_gives_the_same_log_probs(tmp_path: Path) -> None:
    """TRL's fused head scoring only the completion tokens gives the same log-probs as scoring every position
    (each position's projection is computed alone)."""
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model_dir(tmp_path), dtype=torch.float32).eval()
    torch.manual_seed(0)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(0, model.config.vocab_size, (3, 12))
    labels = ids.clone()
    labels[:, :7] = -100
    with torch.no_grad():
        full = model(input_ids=ids, labels=labels, fused_lm_head=True)
        with completion_tokens_only():
            compact = model(input_ids=ids, labels=labels, fused_lm_head=True)
    torch.testing.assert_close(compact.log_probs, full.log_probs, rtol=0, atol=1e-6)
    torch.testing.assert_close(compact.entropy, full.entropy, rtol=0, atol=1e-6)
    import trl.trainer.utils as trl_utils

    assert trl_utils._use_triton(torch.device("cpu")) is False  # restored


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
