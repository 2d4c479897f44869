"""Eager attention while sampling with emulated bfloat16: the same numbers, without re-converting the cache.

Where bfloat16 products are emulated (:mod:`bandpo_lab.bf16_emulation`: a CPU without native bfloat16 instructions),
transformers' eager attention (``attn_implementation: eager``, which the recipes use so that attention computes as
on a CPU with native bfloat16) costs, for every new token and every layer, two copies of the whole key/value cache:
``repeat_kv`` expands the key/value heads to the query heads (bfloat16), and the emulation widens each expanded
operand of the two products to float32. With SmolLM2-135M (3 key/value heads, 9 query heads, 30 layers) and the
studies' batch of 512 sequences, that is most of the time of an evaluation (docs/smollm2.md).

:func:`eager_attention_copies` keeps, per attention layer, a float32 copy of the cache's keys and values as the
products see them (their bfloat16 values: autocast casts the float32 keys that rotary embeddings give; ``(B, H_kv,
capacity, D)``, the key/value heads only), appends only the new positions at each call, and computes the products
per query head of a group from that copy::

    scores[:, g*i + r] = bf16( float32(bf16(query[:, g*i + r])) @ keys32[:, i]^T )     i < H_kv, r < g = H / H_kv
    output[:, g*i + r] = bf16( float32(bf16(weights[:, g*i + r])) @ values32[:, i] )

These are the float32 products the emulation computes, with the same operands, each matrix of a batch with the same
shape and layout; everything else (the scaling, the mask, the softmax, the casts) is transformers' own function,
line for line. The result is the eager function's under the emulation, bit for bit
(tests/lab/test_bf16_attention.py; ``scripts/bench_bf16_attention.py`` times both and checks the sampled tokens).

A layer's copy is reused only where the key and value tensors of this call begin, bit for bit, with those of the
previous call (``torch.equal`` on their bits: a growing cache, as in ``generate`` and :func:`bandpo_lab.decode.sample`);
anything else (a new batch, a reordered or edited cache) builds the copy anew. It applies to the models whose
``eager_attention_forward`` is Llama's (the same bytecode: Llama, Qwen2/3, Mistral and most decoder-only models of
transformers), only while no gradient is recorded, with query, key and value on the CPU in bfloat16 (or float32
under bfloat16 autocast), the emulation as the innermost dispatch mode, and no dropout; everything else calls the
model's own eager function. Memory: about three times the bfloat16 cache more (the float32 copy, and the previous
call's tensors), freed when the block ends.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode_temporarily

from bandpo_lab.bf16_emulation import EmulatedBf16Products

__all__ = ["EagerAttentionCopies", "eager_attention_copies"]

_EAGER = "eager"
_SLACK = 64
"""Positions a layer's float32 copy holds beyond the cache's length when it is (re)allocated."""


def _model_eager(module: torch.nn.Module) -> Any:
    """The ``eager_attention_forward`` of ``module``'s model file (where transformers' eager attention lives)."""
    return getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)


def _code_key(fn: Any) -> tuple[Any, ...]:
    code = fn.__code__
    return (code.co_code, code.co_consts, code.co_names, code.co_varnames)


@functools.cache
def _llama_like(module_name: str) -> bool:
    """Whether the model file ``module_name``'s ``eager_attention_forward`` is Llama's (the same bytecode)."""
    from transformers.models.llama import modeling_llama

    fn = getattr(sys.modules.get(module_name), "eager_attention_forward", None)
    return callable(fn) and _code_key(fn) == _code_key(modeling_llama.eager_attention_forward)


@dataclass
class _LayerCopy:
    """One attention layer's float32 copy of its bfloat16 cache: ``keys``/``values`` (B, H_kv, capacity, D)
    float32, of which the first ``length`` positions are filled; ``key``/``value`` the bfloat16 tensors they copy."""

    key: torch.Tensor
    value: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    length: int


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bits of a bfloat16 or float32 tensor, as integers (so that -0.0 and NaN compare exactly)."""
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


def _autocast_bf16() -> bool:
    return torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def _bf16_operand(t: torch.Tensor, autocast: bool) -> bool:
    """Whether the products see ``t`` in bfloat16: it is bfloat16, or float32 under bfloat16 autocast (which casts
    it)."""
    return (
        t.device.type == "cpu"
        and t.dim() == 4
        and (t.dtype == torch.bfloat16 or (autocast and t.dtype == torch.float32))
    )


def _widen(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bfloat16 value in float32: what the emulation widens after autocast's cast (exact)."""
    return t.to(torch.bfloat16).to(torch.float32)


class EagerAttentionCopies:
    """The attention function of :func:`eager_attention_copies` (module docstring). Counters: ``calls`` (the
    computations from a copy), ``built`` (copies built anew), ``extended`` (copies extended by the new positions),
    ``fallbacks`` (calls handed to the model's own eager function)."""

    def __init__(self) -> None:
        self.layers: dict[torch.nn.Module, _LayerCopy] = {}
        self.calls = 0
        self.built = 0
        self.extended = 0
        self.fallbacks = 0

    def applies(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        dropout: float,
    ) -> bool:
        """Whether this call computes from a copy (module docstring), else the model's own eager function."""
        tensors = (query, key, value)
        autocast = _autocast_bf16()
        return (
            _llama_like(type(module).__module__)
            and all(_bf16_operand(t, autocast) for t in tensors)
            and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
            and not (module.training and dropout > 0)
            and isinstance(_get_current_dispatch_mode(), EmulatedBf16Products)
        )

    def _copy_of(self, module: torch.nn.Module, key: torch.Tensor, value: torch.Tensor) -> _LayerCopy:
        """``module``'s copy, extended to ``key``/``value`` (B, H_kv, L, D), or built anew."""
        length = key.shape[2]
        old = self.layers.get(module)
        if (
            old is not None
            and old.key.shape[:2] == key.shape[:2]
            and old.key.shape[3] == key.shape[3]
            and value.shape == key.shape
            and (old.key.dtype, old.value.dtype) == (key.dtype, value.dtype)
            and old.length <= length <= old.keys.shape[2]
            and torch.equal(_bits(key[:, :, : old.length]), _bits(old.key))
            and torch.equal(_bits(value[:, :, : old.length]), _bits(old.value))
        ):
            old.keys[:, :, old.length : length].copy_(_widen(key[:, :, old.length :]))
            old.values[:, :, old.length : length].copy_(_widen(value[:, :, old.length :]))
            old.key, old.value, old.length = key, value, length
            self.extended += 1
            return old
        self.layers.pop(module, None)  # free the old copy first
        b, h, _, d = key.shape
        keys = key.new_empty((b, h, length + _SLACK, d), dtype=torch.float32)
        values = value.new_empty((b, h, length + _SLACK, d), dtype=torch.float32)
        keys[:, :, :length].copy_(_widen(key))
        values[:, :, :length].copy_(_widen(value))
        self.layers[module] = new = _LayerCopy(key, value, keys, values, length)
        self.built += 1
        return new

    def __call__(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        scaling: float,
        dropout: float = 0.0,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' attention-function signature: ``query`` (B, H, Q, D), ``key``/``value`` (B, H_kv, L, D),
        ``attention_mask`` (B, 1, Q, L) added to the scores; returns the output (B, Q, H, D) and the weights
        (B, H, Q, L), in the dtypes of the eager function."""
        if not self.applies(module, query, key, value, dropout):
            self.fallbacks += 1
            return _model_eager(module)(
                module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
            )
        self.calls += 1
        copy = self._copy_of(module, key, value)
        groups = module.num_key_value_groups
        length = key.shape[2]
        keys, values = copy.keys[:, :, :length], copy.values[:, :, :length]  # (B, H_kv, L, D) float32
        # the lines of transformers' eager_attention_forward (Llama), with the two products from the copy
        attn_weights = _grouped_products(query, keys.transpose(2, 3), groups) * scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_weights = torch.nn.functional.dropout(attn_weights, p=dropout, training=module.training)
        attn_output = _grouped_products(attn_weights, values, groups)
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights


def _grouped_products(left: torch.Tensor, right: torch.Tensor, groups: int) -> torch.Tensor:
    """``bf16(float32(left) @ right)`` with ``right``'s heads repeated ``groups`` times, without repeating them.

    ``left``: (B, H, Q, K) bfloat16, or float32 that autocast would cast to bfloat16; H = H_kv * groups. ``right``:
    (B, H_kv, K, N) float32 holding bfloat16 values.
    Returns (B, H, Q, N) bfloat16, contiguous: the emulation's result for ``torch.matmul(left, repeat_kv(right))``,
    computed as ``groups`` batched products of B * H_kv matrices of the same shapes and layouts as its B * H."""
    b, h, q, _ = left.shape
    h_kv, n = right.shape[1], right.shape[3]
    wide = _widen(left).unflatten(1, (h_kv, groups))  # (B, H_kv, groups, Q, K)
    out = torch.empty((b, h_kv, groups, q, n), dtype=torch.float32, device=left.device)
    rhs = right.reshape(b * h_kv, *right.shape[2:])  # a view: (B * H_kv, K, N)
    with (
        torch.autocast("cpu", enabled=False),
        _pop_mode_temporarily(),
    ):  # float32, as the emulation's own call
        for r in range(groups):
            lhs = wide[:, :, r].reshape(b * h_kv, q, -1)  # (B * H_kv, Q, K)
            out[:, :, r] = torch.bmm(lhs, rhs).view(b, h_kv, q, n)
    return out.view(b, h, q, n).to(torch.bfloat16)


@contextlib.contextmanager
def eager_attention_copies() -> Iterator[EagerAttentionCopies]:
    """Within the block, transformers' ``eager`` attention computes from float32 copies of the cache where
    :meth:`EagerAttentionCopies.applies` (module docstring), else as it does outside. Installs the function as
    ``eager`` in transformers' attention registry for the block (where nothing is registered under that name) and
    removes it and frees the copies at the end. Inside a block of its own kind it adds nothing and yields the
    outer one. Where the user has registered an ``eager`` function of their own, it leaves that in place and
    yields an instance that is never called (``calls`` stays 0): the copies reproduce only transformers' own eager
    functions."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    outer = ALL_ATTENTION_FUNCTIONS.get(_EAGER)  # None: the models' own eager functions
    if isinstance(outer, EagerAttentionCopies):
        yield outer
        return
    if outer is not None:  # the user's own eager attention: theirs runs, not a copy of transformers'
        yield EagerAttentionCopies()
        return
    function = EagerAttentionCopies()
    ALL_ATTENTION_FUNCTIONS[_EAGER] = function  # this registry's own entry, over the models' default
    try:
        yield function
    finally:
        del ALL_ATTENTION_FUNCTIONS[_EAGER]
        function.layers.clear()
