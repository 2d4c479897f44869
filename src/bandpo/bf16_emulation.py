"""bfloat16 matrix products on a CPU without native bfloat16 instructions, at float32's speed.

On a CPU without ``amx_bf16`` or ``avx512_bf16`` (AVX2 only, say), PyTorch's bfloat16 matrix products fall back to
a reference kernel: 1.1 GFLOP/s against 42 for float32 on one AMD EPYC core with AVX2 (1024 x 576 x 1536, one
thread, ``docs/smollm2.md``), so ``precision: bf16`` would run a real model 40 times slower than float32.

A product of two bfloat16 numbers (8 significant bits each) is exact in float32 (24 bits). So a bfloat16 matrix
product with float32 accumulation, which is what the native instructions compute (``vdpbf16ps``, AMX), is a float32
product of the same bfloat16 operands, up to the order in which the float32 sums are taken::

    C16 = bf16( float32(A16) @ float32(B16) )              bf16 inputs: mm, addmm, bmm, baddbmm
    C32 = float32(bf16(A32)) @ float32(bf16(B32))          float32 inputs under fp32_precision "bf16"

Inside :func:`emulated_bf16_products` (a ``TorchDispatchMode``, so below autocast and autograd: the operands are
those the native kernels would get, in the forward and in the backward), every such product is computed that way:
the first line for bfloat16 operands (autocast's sampling, the bfloat16 backward of :mod:`bandpo.bf16_backward`),
the second for float32 operands while oneDNN's ``fp32_precision`` is ``"bf16"`` (the other backward products of
``precision: bf16``, which oneDNN computes in plain float32 on such a CPU). Additions in ``addmm``/``baddbmm`` are
float32 before the one rounding of the result, as in the native kernels. The rounding is therefore the same as
on a CPU with native bfloat16; the sums are taken in another order, as they are between any two vectorised paths.
Every other operation runs unchanged (elementwise bfloat16 operations convert per element on every CPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["EmulatedBf16Products", "emulated_bf16_products"]

_aten = torch.ops.aten
_PRODUCTS = frozenset({_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default})
"""The matrix products every ``linear``/``matmul`` of a CPU model reaches (the composite ops decompose into these)."""


def _fp32_precision_is_bf16() -> bool:
    setting = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return getattr(setting, "fp32_precision", None) == "bf16"


def _rounded(t: Any) -> Any:
    """A float32 tensor rounded to bfloat16 and back (its bfloat16 value, held in float32); anything else as is."""
    if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
        return t.to(torch.bfloat16).to(torch.float32)
    return t


def _widened(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16:
        return t.to(torch.float32)
    return t


class EmulatedBf16Products(TorchDispatchMode):
    """The dispatch mode of :func:`emulated_bf16_products` (module docstring); counts the products it computed
    (``emulated``: bfloat16 operands; ``rounded``: float32 operands under ``fp32_precision == "bf16"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.emulated = 0
        self.rounded = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _PRODUCTS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if tensors and all(t.device.type == "cpu" for t in tensors):
                dtypes = {t.dtype for t in tensors}
                if dtypes == {torch.bfloat16}:
                    self.emulated += 1
                    return func(*map(_widened, args), **kwargs).to(torch.bfloat16)
                if dtypes == {torch.float32} and _fp32_precision_is_bf16():
                    self.rounded += 1
                    # The bias of addmm/baddbmm (first argument) is added in float32, not rounded: oneDNN's
                    # fpmath mode rounds the operands of the product only.
                    if func in (_aten.addmm.default, _aten.baddbmm.default):
                        return func(args[0], *map(_rounded, args[1:]), **kwargs)
                    return func(*map(_rounded, args), **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def emulated_bf16_products() -> Iterator[EmulatedBf16Products]:
    """Within the block, bfloat16 matrix products on the CPU are computed as float32 products of their bfloat16
    operands (module docstring). Enter it around the forward *and* the backward: the backward's products are
    dispatched when ``backward()`` runs. Yields the mode (its counters)."""
    mode = EmulatedBf16Products()
    with mode:
        yield mode
