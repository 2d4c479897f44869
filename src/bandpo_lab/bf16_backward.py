"""Linear layers whose forward is float32 and whose backward products are bfloat16 (``precision: bf16``): autocast's
backward with a float32 forward. Why not oneDNN's ``fp32_precision = "bf16"``, and the measurements:
docs/smollm2.md, "The backward in bfloat16 products"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F


class LinearBf16Backward(torch.autograd.Function):
    """``F.linear(x, weight, bias)``, equal bit for bit, whose backward computes ``dL/dx = g W`` and ``dL/dW = g^T x``
    as bfloat16 products of ``g`` and of the bfloat16 copies of ``x``, ``W`` the forward saved (``dL/db`` from the
    float32 ``g``), cast back to float32. ``x``: (..., in) float32; ``weight``: (out, in) float32; ``bias``: (out,)
    float32 or None; returns (..., out) float32."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x.to(torch.bfloat16), weight.to(torch.bfloat16))
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x16, w16 = ctx.saved_tensors
        g16 = grad.to(torch.bfloat16)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = (g16 @ w16).to(grad.dtype)  # (..., in)
        if ctx.needs_input_grad[1]:
            grad_w = (g16.reshape(-1, g16.shape[-1]).T @ x16.reshape(-1, x16.shape[-1])).to(grad.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.reshape(-1, grad.shape[-1]).sum(0)
        return grad_x, grad_w, grad_b


def _linear_forward(self: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    """``torch.nn.Linear.forward`` within :func:`bf16_backward_linears`."""
    weight, bias = self.weight, self.bias
    if (
        torch.is_grad_enabled()
        and input.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and (input.requires_grad or weight.requires_grad)
    ):
        return LinearBf16Backward.apply(input, weight, bias)
    return F.linear(input, weight, bias)


@contextlib.contextmanager
def bf16_backward_linears() -> Iterator[None]:
    """Within the block, ``torch.nn.Linear`` layers (the class itself, not subclasses with their own forward)
    whose forward records a graph on float32 tensors run as :class:`LinearBf16Backward`; any other call (no grad,
    other dtypes) runs unchanged. The block must enclose the backward pass too: activation checkpointing
    recomputes the forward there, and the recomputation must save what the forward saved
    (:meth:`bandpo_lab.runtime.Precision.backward` runs it under ``exact()``, as the forward ran)."""
    original = torch.nn.Linear.forward
    torch.nn.Linear.forward = _linear_forward  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Linear.forward = original  # type: ignore[method-assign]
