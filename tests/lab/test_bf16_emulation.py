"""Tests for ``bandpo_lab.bf16_emulation``: bfloat16 matrix products computed as float32 products of bfloat16 operands,
against PyTorch's own bfloat16 kernels (the reference kernel on a CPU without native bf16, oneDNN's on one with
it) and a float64 reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from bandpo_lab.bf16_emulation import PRODUCTS as EMULATED_OPS
from bandpo_lab.bf16_emulation import (
    EmulatedBf16Products,
    emulated_bf16_products,
    emulation_suspended,
    onednn_matmul_setting,
)
from bandpo_lab.runtime import Precision, matmul_precision, resolve_precision
from helpers.tiny import build_tiny_model_dir

AVX2 = "processor : 0\nflags : fpu sse avx2 fma\n"
EMULATED = Precision("bf16", "bf16", "test", emulated=True)
NATIVE = Precision("bf16", "bf16", "test")


def _bf16(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _ulps(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference between two results, in bfloat16 steps (2^-7 of the larger magnitude, at least 1e-30)."""
    a, b = a.double(), b.double()
    scale = torch.maximum(a.abs(), b.abs()).clamp_min(1e-30) * 2.0**-7
    return float(((a - b).abs() / scale).max())


PRODUCTS = {
    "mm": (lambda a, b, c: torch.mm(a, b), (6, 40), (40, 9), None),
    "addmm": (lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (6, 40), (40, 9), (9,)),
    "bmm": (lambda a, b, c: torch.bmm(a, b), (3, 6, 40), (3, 40, 9), None),
    "baddbmm": (lambda a, b, c: torch.baddbmm(c, a, b), (3, 6, 40), (3, 40, 9), (3, 6, 9)),
    "mv": (lambda a, b, c: torch.mv(a, b), (6, 40), (40,), None),
    "dot": (lambda a, b, c: torch.dot(a, b), (40,), (40,), None),
    "addmv": (lambda a, b, c: torch.addmv(c, a, b), (6, 40), (40,), (6,)),
}


def test_every_emulated_op_is_tested() -> None:
    assert {op.__name__.split(".")[0] for op in EMULATED_OPS} == set(PRODUCTS)


@pytest.mark.parametrize("name", PRODUCTS)
def test_bf16_operands_give_the_rounded_float32_product_bit_for_bit(name: str) -> None:
    fn, sa, sb, sc = PRODUCTS[name]
    a, b = _bf16(*sa, seed=1), _bf16(*sb, seed=2)
    c = None if sc is None else _bf16(*sc, seed=3)
    with emulated_bf16_products() as mode:
        out = fn(a, b, c)
    assert mode.emulated == 1 and mode.rounded == 0
    assert out.dtype == torch.bfloat16
    widened = fn(a.float(), b.float(), None if c is None else c.float())
    assert torch.equal(out, widened.to(torch.bfloat16))


@pytest.mark.parametrize("name", PRODUCTS)
def test_emulated_equals_pytorchs_own_bf16_kernel_within_one_rounding(name: str) -> None:
    """PyTorch's bf16 kernel (reference or oneDNN) and the emulation round the same float32 sum, taken in another
    order: at most one bfloat16 step apart, and both within one step of the float64 product of the operands."""
    fn, sa, sb, sc = PRODUCTS[name]
    a, b = _bf16(*sa, seed=4), _bf16(*sb, seed=5)
    c = None if sc is None else _bf16(*sc, seed=6)
    native = fn(a, b, c)
    with emulated_bf16_products() as mode:
        emulated = fn(a, b, c)
    assert mode.emulated == 1
    exact = fn(a.double(), b.double(), None if c is None else c.double())
    assert _ulps(emulated, native) <= 1.0 + 1e-6
    assert _ulps(emulated, exact) <= 0.5 + 1e-3
    assert _ulps(native, exact) <= 0.5 + 1e-3


@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(1, 12),
    k=st.integers(1, 80),
    n=st.integers(1, 12),
    scale=st.sampled_from([1e-20, 1e-3, 1.0, 1e3, 1e15]),
    seed=st.integers(0, 2**16),
)
def test_emulated_product_is_the_float64_product_rounded_once(
    m: int, k: int, n: int, scale: float, seed: int
) -> None:
    a, b = (_bf16(m, k, seed=seed) * scale).to(torch.bfloat16), _bf16(k, n, seed=seed + 1)
    with emulated_bf16_products():
        out = a @ b
    exact = a.double() @ b.double()
    # float32 accumulation of k exact products: relative error k * 2^-24 of the sum of magnitudes, then one
    # bfloat16 rounding (half a step).
    bound = (exact.abs() * 2.0**-8 + (a.double().abs() @ b.double().abs()) * k * 2.0**-24).clamp_min(1e-300)
    assert bool(((out.double() - exact).abs() <= bound).all())


HAS_FP32_PRECISION = onednn_matmul_setting() is not None


@pytest.mark.skipif(not HAS_FP32_PRECISION, reason="this torch has no mkldnn.matmul.fp32_precision")
def test_float32_operands_are_rounded_only_under_fp32_precision_bf16() -> None:
    g = torch.Generator().manual_seed(7)
    a, b, bias = (
        torch.randn(20, 33, generator=g),
        torch.randn(33, 12, generator=g),
        torch.randn(12, generator=g),
    )
    with matmul_precision("ieee"), emulated_bf16_products() as mode:
        plain = torch.addmm(bias, a, b)
    assert mode.rounded == 0 and torch.equal(plain, torch.addmm(bias, a, b))
    small_a, small_b = a[:4, :8], b[:8, :4]  # 128 multiply-adds: PyTorch leaves such products float32
    with matmul_precision("bf16"):
        a16, b16 = a.bfloat16().float(), b.bfloat16().float()
        # the references under the same setting: the same float32 kernel of the same (bf16-valued) operands
        expected_addmm, expected_mm = torch.addmm(bias, a16, b16), torch.mm(a16, b16)
        expected_small = torch.mm(small_a, small_b)
        with emulated_bf16_products() as mode:
            rounded = torch.addmm(bias, a, b)
            product = torch.mm(a, b)
            small = torch.mm(small_a, small_b)
    assert mode.rounded == 2 and rounded.dtype == torch.float32
    assert torch.equal(rounded, expected_addmm)  # the bias is added unrounded
    assert torch.equal(product, expected_mm)
    assert torch.equal(small, expected_small)
    assert not torch.equal(product, torch.mm(a, b))  # rounding the operands changed the product


def test_other_operations_and_dtypes_pass_through() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    i = torch.arange(12).reshape(3, 4)
    with emulated_bf16_products() as mode:
        assert torch.equal(torch.mm(i, i.T), i @ i.T)  # integers
        assert torch.equal(x.double() @ x.double().T, (x @ x.T).double())  # float64
        mixed = torch.exp(x.bfloat16()) * 2
    assert mode.emulated == 0 and mode.rounded == 0
    assert torch.equal(mixed, torch.exp(x.bfloat16()) * 2)


def test_nonfinite_operands_propagate_as_in_float32() -> None:
    a = _bf16(4, 8, seed=10)
    a[0, 0], a[1, 1], a[2, 2] = float("inf"), float("nan"), 3e38
    b = _bf16(8, 3, seed=11)
    b[2, :] = 3e38  # finite in bfloat16, its product with a[2, 2] overflows
    with emulated_bf16_products():
        out = a @ b
    reference = (a.float() @ b.float()).to(torch.bfloat16)
    assert torch.equal(out.isnan(), reference.isnan()) and torch.equal(out.isinf(), reference.isinf())
    assert bool(torch.isfinite(out[3]).all())


def test_forward_and_backward_under_autocast_are_emulated() -> None:
    """A linear layer under bfloat16 autocast: forward and backward products go through the mode, and the
    gradients agree with PyTorch's own bf16 kernels up to rounding."""
    g = torch.Generator().manual_seed(12)
    w = torch.randn(16, 24, generator=g, requires_grad=True)
    x = torch.randn(5, 24, generator=g, requires_grad=True)
    up = torch.randn(5, 16, generator=g)

    with torch.autocast("cpu", dtype=torch.bfloat16), emulated_bf16_products() as mode:
        y = F.linear(x, w)
        (y.float() * up).sum().backward()
    assert mode.emulated >= 3  # the forward product and the two of the backward
    emulated = (y.detach(), x.grad.clone(), w.grad.clone())
    w.grad = x.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w)
        (y.float() * up).sum().backward()
    native = (y.detach(), x.grad, w.grad)
    for e, n in zip(emulated, native, strict=True):
        assert _ulps(e, n) <= 2.0


def test_inference_mode_products_are_emulated() -> None:
    """Under inference mode ``linear``/``matmul``/``einsum`` reach the mode undecomposed; it decomposes them."""
    x, w = _bf16(5, 24, seed=14), _bf16(16, 24, seed=15)
    with torch.inference_mode(), emulated_bf16_products() as mode:
        outs = [F.linear(x, w), torch.matmul(x, w.T), torch.einsum("ik,jk->ij", x, w)]
    assert mode.emulated == 3
    reference = (x.float() @ w.float().T).to(torch.bfloat16)
    for out in outs:
        assert out.dtype == torch.bfloat16 and _ulps(out, reference) <= 1.0 + 1e-6


def test_a_nested_block_adds_no_second_mode() -> None:
    with emulated_bf16_products() as outer, emulated_bf16_products() as inner:
        assert inner is outer
        _bf16(3, 4) @ _bf16(4, 2, seed=1)
    assert outer.emulated == 1


@pytest.mark.skipif(not HAS_FP32_PRECISION, reason="this torch has no mkldnn.matmul.fp32_precision")
def test_backward_block_rounds_the_backward_products_not_the_exact_forward() -> None:
    """``Precision.backward()`` with a forward under ``exact()``: the forward's float32 product is plain float32
    (the ratio's log-probs), the backward's products take bf16-rounded operands."""
    g = torch.Generator().manual_seed(16)
    x = torch.randn(20, 33, generator=g, requires_grad=True)
    w = torch.randn(33, 12, generator=g, requires_grad=True)
    with EMULATED.backward():
        mode = _get_current_dispatch_mode()
        with EMULATED.exact():
            y = x @ w
        assert mode.rounded == 0
        y.sum().backward()
    assert torch.equal(y, x.detach() @ w.detach())
    assert mode.rounded == 2  # dL/dx and dL/dw
    ones = torch.ones(20, 12)
    assert _ulps(w.grad, x.detach().bfloat16().float().T @ ones) <= 1e-3  # x's bf16 values
    assert _ulps(w.grad, x.detach().T @ ones) > 1e-2  # not its float32 values


def test_precision_enters_the_mode_only_where_emulated() -> None:
    with EMULATED.sampling():
        assert isinstance(_get_current_dispatch_mode(), EmulatedBf16Products)
    with EMULATED.backward():
        assert isinstance(_get_current_dispatch_mode(), EmulatedBf16Products)
    with EMULATED.exact():
        assert _get_current_dispatch_mode() is None
    with NATIVE.sampling(), NATIVE.backward():
        assert _get_current_dispatch_mode() is None


def test_exact_suspends_the_mode_and_backward_resumes_it() -> None:
    """Inside ``backward()``, ``exact()`` takes the mode off the stack (its forward is float32: nothing to emulate,
    only per-op dispatch to save); the backward of what it recorded is emulated again, and the mode is back after."""
    x = _bf16(5, 7).requires_grad_()
    w = _bf16(7, 3, seed=1).requires_grad_()
    with EMULATED.backward():
        mode = _get_current_dispatch_mode()
        with EMULATED.exact():
            assert _get_current_dispatch_mode() is None
            y = x @ w  # PyTorch's own bf16 kernel: not counted
        assert mode.emulated == 0 and _get_current_dispatch_mode() is mode
        y.float().sum().backward()
    assert mode.emulated == 2  # dL/dx and dL/dw
    assert x.grad is not None and w.grad is not None


def test_sampling_inside_exact_inside_backward_is_emulated() -> None:
    """TRL samples inside ``_prepare_inputs`` (under ``exact()``) of ``training_step`` (under ``backward()``): the
    suspended block's sampling enters a mode of its own, and the stack is as before after it."""
    with EMULATED.backward():
        outer = _get_current_dispatch_mode()
        with EMULATED.exact():
            with EMULATED.sampling():
                mode = _get_current_dispatch_mode()
                assert isinstance(mode, EmulatedBf16Products) and mode is not outer
                assert (torch.randn(3, 4) @ torch.randn(4, 2)).dtype == torch.bfloat16
            assert mode.emulated == 1 and _get_current_dispatch_mode() is None
        assert _get_current_dispatch_mode() is outer and outer.emulated == 0
    assert _get_current_dispatch_mode() is None


def test_suspension_leaves_a_foreign_mode_on_top_alone() -> None:
    class Other(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    with emulated_bf16_products() as mode, Other() as other, emulation_suspended():
        assert _get_current_dispatch_mode() is other
        _bf16(3, 4) @ _bf16(4, 2, seed=1)
    assert mode.emulated == 1
    with emulation_suspended():  # no mode at all: nothing to do
        assert _get_current_dispatch_mode() is None


@pytest.mark.skipif(not HAS_FP32_PRECISION, reason="this torch has no mkldnn.matmul.fp32_precision")
def test_onednn_setting_is_the_one_matmul_precision_sets() -> None:
    setting = onednn_matmul_setting()
    assert setting is torch.backends.mkldnn.matmul
    with matmul_precision("bf16"):
        assert setting.fp32_precision == "bf16"
    with matmul_precision("ieee"):
        assert setting.fp32_precision == "ieee"


def test_bf16_without_native_instructions_resolves_emulated() -> None:
    with pytest.warns(UserWarning, match="emulated"):
        p = resolve_precision("bf16", cpuinfo=AVX2)
    assert p.emulated and p.record()["emulated"] is True and "emulated" in p.describe()
    assert "emulated" not in resolve_precision("auto", cpuinfo=AVX2).record()


def test_emulated_sampling_of_a_model_matches_pytorchs_bf16_kernels(tmp_path: object) -> None:
    """The tiny causal LM's logits under ``precision.sampling()``: emulated and PyTorch's own bfloat16 kernels
    agree to bfloat16 rounding (the same operands, sums in another order), the greedy continuation is the same."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model_dir(tmp_path), dtype=torch.float32)
    ids = torch.randint(3, model.config.vocab_size, (2, 10), generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        with EMULATED.sampling():
            emulated = model(ids).logits.float()
        with NATIVE.sampling():
            native = model(ids).logits.float()
        exact = model(ids).logits
    spread = float((native - exact).abs().max())
    assert float((emulated - native).abs().max()) <= 2 * spread + 1e-6
    assert float((emulated - exact).abs().max()) <= 2 * spread + 1e-6
    # greedy tokens agree wherever the top two logits are further apart than the two kernels can differ
    top2 = exact.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 4 * spread
    assert bool(clear.any())
    assert torch.equal(emulated.argmax(-1)[clear], native.argmax(-1)[clear])
