"""Tests for ``bandpo_lab.bf16_backward``: linear layers with a float32 forward and bfloat16 backward products."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from bandpo_lab.bf16_backward import LinearBf16Backward, _linear_forward, bf16_backward_linears
from bandpo_lab.runtime import Precision

BF16 = Precision("bf16", "bf16", "test")
FLOAT32 = Precision("float32", "float32", "test")


def _leaves(*shape: int, seed: int = 0, bias: bool = True) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    *lead, n_in, n_out = shape
    x = torch.randn(*lead, n_in, generator=g, requires_grad=True)
    w = torch.randn(n_out, n_in, generator=g, requires_grad=True)
    b = torch.randn(n_out, generator=g, requires_grad=True) if bias else None
    return x, w, b


def _grads(fn: object, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, up: torch.Tensor) -> list:
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    b = None if b is None else b.detach().clone().requires_grad_()
    y = fn(x, w, b)  # type: ignore[operator]
    (y * up).sum().backward()
    return [y.detach(), x.grad, w.grad, None if b is None else b.grad]


def _bf16(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to bfloat16, held in float64 (a product of two such numbers is exact)."""
    return t.detach().to(torch.bfloat16).double()


def _bf16_product_bounds(
    x: torch.Tensor, w: torch.Tensor, up: torch.Tensor
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(name, want, bound)`` for ``dL/dx`` and ``dL/dW`` of ``(F.linear(x, w) * up).sum()``, element by element:
    ``want`` is the product of the bfloat16-rounded operands, exact (float64), and a bfloat16 backward is within
    ``bound`` of it: the product's bfloat16 output rounds by at most 2**-9 of its value (2**-8 of ``want`` leaves
    room for the float32 sum under it), and the float32 sums of at most 48 terms stay within 48 * 2**-24 of the sum
    of the terms' magnitudes (2**-16 here, with room). Each entry's bound involves only its own row of ``g`` (dx)
    or its own column (dW), so it does not grow with the batch."""
    n_in, n_out = w.shape[1], w.shape[0]
    g16, x16, w16 = _bf16(up).reshape(-1, n_out), _bf16(x).reshape(-1, n_in), _bf16(w)
    want_x, terms_x = g16 @ w16, g16.abs() @ w16.abs()
    want_w, terms_w = g16.T @ x16, g16.abs().T @ x16.abs()
    return [
        ("x", want_x.reshape(x.shape), (2.0**-8 * want_x.abs() + 2.0**-16 * terms_x).reshape(x.shape)),
        ("weight", want_w, 2.0**-8 * want_w.abs() + 2.0**-16 * terms_w),
    ]


@settings(max_examples=25, deadline=None)
@given(
    lead=st.lists(st.integers(1, 5), min_size=1, max_size=2),
    n_in=st.integers(1, 48),
    n_out=st.integers(1, 48),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_forward_is_float32_bit_for_bit_and_gradients_match_float64_to_bf16_rounding(
    lead: list[int], n_in: int, n_out: int, bias: bool, seed: int
) -> None:
    """The forward equals float32 ``F.linear`` bit for bit; each entry of ``dL/dx`` and ``dL/dW`` is the exact
    (float64) product of the bfloat16-rounded operands to within the rounding of the product's bfloat16 output and
    of its float32 sums (:func:`_bf16_product_bounds`, element-wise, so it holds as tightly for a large batch as
    for a small one); ``dL/db`` is the float32 sum of ``g``."""
    x, w, b = _leaves(*lead, n_in, n_out, seed=seed, bias=bias)
    up = torch.randn(*lead, n_out, generator=torch.Generator().manual_seed(seed + 1))
    ours = _grads(LinearBf16Backward.apply, x, w, b, up)
    plain = _grads(F.linear, x, w, b, up)
    assert torch.equal(ours[0], plain[0])  # the forward is the float32 one
    for (name, want, bound), got in zip(_bf16_product_bounds(x, w, up), ours[1:3]):
        err = (got.double() - want).abs()
        assert (err <= bound).all(), (
            f"d{name}: off by {err.max().item()}, {(err / bound).max().item():.1f} x bound"
        )
    if bias:
        ref = up.double().reshape(-1, n_out).sum(0)
        torch.testing.assert_close(ours[3].double(), ref, rtol=1e-5, atol=1e-5)  # float32 sum of g


def test_the_gradient_bound_tells_bfloat16_products_from_float32_ones() -> None:
    """The element-wise bound of the property test above can fail: on one batch, float32 gradients (as a float32
    backward computes them) and the gradients of the unrounded operands (float64) each miss it somewhere, while
    the bfloat16 backward's stay within it."""
    from bandpo_lab.runtime import matmul_precision

    x, w, b = _leaves(4, 5, 48, 48, seed=3)
    up = torch.randn(4, 5, 48, generator=torch.Generator().manual_seed(4))
    ours = _grads(LinearBf16Backward.apply, x, w, b, up)
    with matmul_precision("ieee"):
        float32 = _grads(F.linear, x, w, b, up)
    exact = _grads(lambda x, w, b: F.linear(x.double(), w.double(), b.double()), x, w, b, up.double())
    for i, (name, want, bound) in enumerate(_bf16_product_bounds(x, w, up), start=1):
        assert ((ours[i].double() - want).abs() <= bound).all(), (
            f"d{name}: the bfloat16 gradient misses the bound"
        )
        for other, grads in (("float32", float32), ("float64", exact)):
            assert ((grads[i].double() - want).abs() > bound).any(), (
                f"d{name}: the {other} gradient is within it"
            )


def test_gradients_are_the_bfloat16_products_of_the_rounded_operands() -> None:
    """The backward is exactly ``g16 @ W16`` and ``g16^T x16`` (bf16 products), cast to float32."""
    x, w, b = _leaves(3, 4, 16, 8)
    up = torch.randn(3, 4, 8)
    _, gx, gw, gb = _grads(LinearBf16Backward.apply, x, w, b, up)
    g16, x16, w16 = up.bfloat16(), x.detach().bfloat16(), w.detach().bfloat16()
    assert torch.equal(gx, (g16 @ w16).float())
    assert torch.equal(gw, (g16.reshape(-1, 8).T @ x16.reshape(-1, 16)).float())
    assert torch.equal(gb, up.reshape(-1, 8).sum(0))
    assert gx.dtype == gw.dtype == torch.float32


def test_context_routes_only_graph_recording_float32_linear_layers() -> None:
    calls = []
    real = LinearBf16Backward.apply

    def spy(*args: torch.Tensor) -> torch.Tensor:
        calls.append(args[0].shape)
        return real(*args)

    class OwnForward(torch.nn.Linear):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return F.linear(input, self.weight, self.bias)

    layer, own = torch.nn.Linear(6, 5), OwnForward(6, 5)
    x = torch.randn(2, 6, requires_grad=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LinearBf16Backward, "apply", spy)
        with bf16_backward_linears():
            layer(x)  # routed
            layer(x.detach())  # the weight requires grad: routed
            with torch.no_grad():
                layer(x)  # no graph
            layer.double()(x.double())  # float64
            layer.float()
            own(x)  # a subclass with its own forward
            F.linear(x, layer.weight)  # not a layer
        layer(x)  # outside the block
    assert calls == [torch.Size([2, 6])] * 2
    assert torch.nn.Linear.forward is not _linear_forward  # restored


def test_activation_checkpointing_recomputes_through_the_same_path() -> None:
    """The recomputation in the backward pass saves what the forward saved (the block encloses both, and runs the
    recomputation under ``exact()`` as the forward ran), so the backward computes the same products of the same
    tensors with the same shapes and strides, and the gradients equal those without checkpointing bit for bit."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    x = torch.randn(4, 12, 32, requires_grad=True)
    grads = []
    for use_checkpoint in (False, True):
        net.zero_grad()
        with BF16.backward():
            with BF16.exact():
                y = checkpoint(net, x, use_reentrant=False) if use_checkpoint else net(x)
            y.sum().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_gradients_are_the_bfloat16_products_of_the_float32_forward(use_reentrant: bool) -> None:
    """With activation checkpointing, the gradients are the bfloat16 products of the operands of the *float32*
    forward, computed by hand: each weight gradient is ``bf16(g)^T bf16(x)`` (exact products, summed in float64)
    to within the rounding of the product's bfloat16 output and of its float32 sums, and each bias gradient is the
    sum of the float32 ``g``. Until the recomputation ran under ``exact()`` it ran under the backward's
    ``fp32_precision = "bf16"``; where oneDNN applies that setting (AMX; the deleted bf16 emulation did on every
    CPU), the activation it saved for the second
    layer and for ``tanh``'s backward was not the forward's, and the gradients missed this reference by 13 to 33
    times the bound (up to 0.03; the first layer's bias by 0.01). The float32 gradients miss it too (by up to 15
    times), so the test also tells the bfloat16 backward from a float32 one."""
    from torch.utils.checkpoint import checkpoint

    from bandpo_lab.runtime import matmul_precision

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    x = torch.randn(4, 12, 32, requires_grad=True)
    with BF16.backward():
        with BF16.exact():
            y = checkpoint(net, x, use_reentrant=use_reentrant)
        y.sum().backward()
    got = [p.grad.double() for p in net.parameters()]
    net.zero_grad()
    with matmul_precision("ieee"):
        net(x).sum().backward()
    float32 = [p.grad.double() for p in net.parameters()]

    w1, b1, w2, _ = (p.detach() for p in net.parameters())
    x2 = x.detach().reshape(-1, 32)
    with matmul_precision("ieee"):
        h = torch.tanh(F.linear(x2, w1, b1))  # the float32 forward's activation
    g2 = torch.ones(48, 8)  # dL/dy of y.sum()
    gh = (_bf16(g2) @ _bf16(w2)).to(torch.bfloat16).float()  # dL/dh: a bfloat16 product (8 exact terms)
    g1 = torch.ops.aten.tanh_backward(gh, h)  # float32, as autograd computes it
    # the weights: _bf16_product_bounds' dW; the biases: float32 sums of 48 terms of g, within 48 * 2**-24 of the sum
    # of their magnitudes (2**-16 here, with room), and no product
    (_, want_w1, bound_w1), (_, want_w2, bound_w2) = (
        _bf16_product_bounds(x2, w1, g1)[1],
        _bf16_product_bounds(h, w2, g2)[1],
    )
    want = [want_w1, g1.double().sum(0), want_w2, g2.double().sum(0)]
    bounds = [bound_w1, 2.0**-16 * g1.double().abs().sum(0), bound_w2, torch.zeros(8, dtype=torch.float64)]
    for name, g, f, w, bound in zip(("0.weight", "0.bias", "2.weight", "2.bias"), got, float32, want, bounds):
        err = (g - w).abs()
        assert (err <= bound).all(), (
            f"{name}: off by {err.max().item()}, {(err / bound).max().item():.1f} x bound"
        )
        if name.endswith("weight"):
            assert ((f - w).abs() > bound).any(), f"{name}: the float32 gradient is within the bound"
    assert not torch.nn.modules.module._global_forward_pre_hooks  # the recomputation's hooks are gone


def test_exact_context_installs_the_mode_only_for_bf16() -> None:
    """Under ``bf16``'s ``exact()`` a module's forward equals float32 bit for bit and its weight gradient is the
    bf16 product; under ``float32`` everything stays float32."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 16)
    x = torch.randn(8, 32)
    ref = layer(x)
    ref.sum().backward()
    ref_grad = layer.weight.grad.clone()
    for precision, exact_grad in ((FLOAT32, True), (BF16, False)):
        layer.zero_grad()
        with precision.backward():
            with precision.exact():
                y = layer(x)
            y.sum().backward()
        assert torch.equal(y, ref)
        assert torch.equal(layer.weight.grad, ref_grad) is exact_grad
        torch.testing.assert_close(layer.weight.grad, ref_grad, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_propagate_in_forward_and_backward(bad: float) -> None:
    x, w, b = _leaves(4, 8, 3)
    with torch.no_grad():
        x[1, 2] = bad
    up = torch.ones(4, 3)
    y, gx, gw, _ = _grads(LinearBf16Backward.apply, x, w, b, up)
    plain_y, _, plain_gw, _ = _grads(F.linear, x, w, b, up)
    assert torch.equal(y.isfinite(), plain_y.isfinite())
    assert torch.equal(
        gw.isfinite(), plain_gw.isfinite()
    )  # the bad input spoils W's gradient column as in float32
    assert gx.isfinite().all()  # dL/dx = g W does not read x
