"""bfloat16 matrix products on a CPU without native bfloat16 instructions, at float32's speed.

On a CPU without ``amx_bf16`` or ``avx512_bf16`` (AVX2 only, say), PyTorch's bfloat16 matrix products fall back to
a reference kernel: 1 GFLOP/s against 89 for float32 on one AMD EPYC core with AVX2 (864 x 576 x 1536, one thread,
``docs/smollm2.md``), so ``precision: bf16`` would run a real model more than 40 times slower than float32.

A product of two bfloat16 numbers (8 significant bits each) is exact in float32 (24 bits), barring underflow. So a
bfloat16 matrix product with float32 accumulation, which is what the native instructions compute (``vdpbf16ps``,
AMX), is a float32 product of the same bfloat16 operands, up to the order in which the float32 sums are taken::

    C16 = bf16( float32(A16) @ float32(B16) )              bf16 inputs
    C32 = float32(bf16(A32)) @ float32(bf16(B32))          float32 inputs under fp32_precision "bf16"

Inside :func:`emulated_bf16_products` (a ``TorchDispatchMode``, so below autocast and autograd: the operands are
those the native kernels would get, in the forward and in the backward), every product of :data:`PRODUCTS` is
computed that way: the first line for bfloat16 operands (autocast's sampling, the bfloat16 backward of
:mod:`bandpo_lab.bf16_backward`), the second for float32 operands while oneDNN's ``fp32_precision`` is ``"bf16"`` (the
other backward products of ``precision: bf16``; PyTorch applies that setting only where oneDNN has bf16 support,
and, as there, only to products of more than 16^3 multiply-adds). The added input of ``addmm``-like products
(the bias) stays float32 until the one rounding of the result, as in the native kernels. The rounding is therefore
the native one, with the sums in another order, as between any two vectorised paths. Not the same: native kernels
flush bfloat16 denormals to zero (values below 1e-38), this does not.

Covered: the products that ``linear``, ``matmul`` and ``einsum`` decompose into, also under
``torch.inference_mode`` (where they reach the mode undecomposed and are decomposed here). Not covered: products
inside fused kernels (``scaled_dot_product_attention``'s CPU kernel): use ``attn_implementation: eager`` for a
model whose attention must compute as on a CPU with native bf16 (the recipes here do). Every other operation runs
unchanged (elementwise bfloat16 operations convert per element on every CPU).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode,
    _get_current_dispatch_mode_stack,
    _pop_mode_temporarily,
)
from torch.utils._pytree import tree_leaves

__all__ = [
    "PRODUCTS",
    "EmulatedBf16Products",
    "emulated_bf16_products",
    "emulation_suspended",
    "onednn_matmul_setting",
]

_aten = torch.ops.aten
_WITH_INPUT = frozenset({_aten.addmm.default, _aten.baddbmm.default, _aten.addmv.default})
"""Products with an added input (their first argument, the bias). Not ``addbmm``: PyTorch's own bfloat16
``addbmm`` rounds to bfloat16 after each batch, which a single float32 product does not reproduce."""
PRODUCTS = frozenset({_aten.mm.default, _aten.bmm.default, _aten.mv.default, _aten.dot.default}) | _WITH_INPUT
"""The matrix products the mode computes (module docstring)."""
_COMPOSITE = frozenset({_aten.linear.default, _aten.matmul.default, _aten.einsum.default})
"""Ops that decompose into :data:`PRODUCTS`; they reach the mode undecomposed only under inference mode."""
_BF32_MIN_SIZE = 16 * 16 * 16
"""PyTorch applies ``fp32_precision = "bf16"`` to products of more multiply-adds than this only (its oneDNN
matmul's size check)."""


def onednn_matmul_setting() -> Any | None:
    """``torch.backends.mkldnn.matmul`` where this PyTorch has its ``fp32_precision`` (``"ieee"`` or ``"bf16"``: the
    precision of oneDNN's float32 matrix products), else ``None``."""
    setting = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return setting if hasattr(setting, "fp32_precision") else None


def _fp32_precision_is_bf16() -> bool:
    return getattr(onednn_matmul_setting(), "fp32_precision", None) == "bf16"


def _rounded(t: Any) -> Any:
    """A float32 tensor rounded to bfloat16 and back (its bfloat16 value, held in float32); anything else as is."""
    if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
        return t.to(torch.bfloat16).to(torch.float32)
    return t


def _widened(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16:
        return t.to(torch.float32)
    return t


def _size(a: torch.Tensor, b: torch.Tensor) -> int:
    """The multiply-adds of the product of ``a`` and ``b`` (mm, bmm, mv, dot)."""
    return math.prod(a.shape) * (b.shape[-1] if b.dim() >= 2 else 1)


class EmulatedBf16Products(TorchDispatchMode):
    """The dispatch mode of :func:`emulated_bf16_products` (module docstring); counts the products it computed
    (``emulated``: bfloat16 operands; ``rounded``: float32 operands under ``fp32_precision == "bf16"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.emulated = 0
        self.rounded = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in PRODUCTS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if tensors and all(t.device.type == "cpu" for t in tensors):
                dtypes = {t.dtype for t in tensors}
                if dtypes == {torch.bfloat16}:
                    self.emulated += 1
                    return func(*map(_widened, args), **kwargs).to(torch.bfloat16)
                operands = args[1:3] if func in _WITH_INPUT else args[:2]
                if (
                    dtypes == {torch.float32}
                    and _fp32_precision_is_bf16()
                    and _size(*operands) > _BF32_MIN_SIZE
                ):
                    self.rounded += 1
                    if func in _WITH_INPUT:  # the bias is added in float32, not rounded
                        return func(args[0], *map(_rounded, args[1:]), **kwargs)
                    return func(*map(_rounded, args), **kwargs)
        elif func in _COMPOSITE and any(
            isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in tree_leaves(args)
        ):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


@contextlib.contextmanager
def emulated_bf16_products() -> Iterator[EmulatedBf16Products]:
    """Within the block, bfloat16 matrix products on the CPU are computed as float32 products of their bfloat16
    operands (module docstring). Enter it around the forward *and* the backward: the backward's products are
    dispatched when ``backward()`` runs. Inside a block of its own kind it adds nothing (each dispatch mode costs
    tens of microseconds per operation) and yields the outer mode. Yields the mode (its counters)."""
    outer = [m for m in _get_current_dispatch_mode_stack() if isinstance(m, EmulatedBf16Products)]
    if outer:
        yield outer[-1]
        return
    mode = EmulatedBf16Products()
    with mode:
        yield mode


@contextlib.contextmanager
def emulation_suspended() -> Iterator[None]:
    """Within the block, the emulation is off if its mode is the innermost dispatch mode (another mode on top is
    left alone, and so is the emulation under it). For blocks of float32 products at ``fp32_precision = "ieee"``
    (the forward passes whose log-probs form the ratio), where the mode changes nothing and costs its Python
    dispatch on every operation (about 3,000 in a SmolLM2 forward of 8 x 64 tokens that records a graph: a few
    percent of its time, ``docs/smollm2.md``). Where ``exact()`` nests inside ``backward()``, sampling inside the
    block enters a mode of its own. A bfloat16 product inside the block runs on PyTorch's own kernel: the same
    rounding, slower where it is not native. The backward of what the block records runs after it, emulated."""
    if isinstance(_get_current_dispatch_mode(), EmulatedBf16Products):
        with _pop_mode_temporarily():
            yield
    else:
        yield
