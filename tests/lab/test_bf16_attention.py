"""Tests for ``bandpo_lab.bf16_attention``: eager attention from float32 copies of the cache gives, bit for bit, what
transformers' eager attention gives under the bfloat16 emulation, while a cache grows, is replaced or edited; it
steps aside wherever it does not apply; and sampling a model gives the same tokens and scores with and without it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import eager_attention_forward

from bandpo_lab.bf16_attention import EagerAttentionCopies, eager_attention_copies
from bandpo_lab.bf16_emulation import emulated_bf16_products
from bandpo_lab.runtime import Precision

EMULATED = Precision("bf16", "bf16", "test", emulated=True)
NATIVE = Precision("bf16", "bf16", "test")


def _llama(
    heads: int = 9, kv_heads: int = 3, head_dim: int = 16, layers: int = 2, seed: int = 0
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=61,
        hidden_size=heads * head_dim,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=128,
        attn_implementation="eager",
    )
    return LlamaForCausalLM(config).eval()


@contextlib.contextmanager
def _emulated() -> Iterator[None]:
    """What ``Precision.sampling`` enters where bf16 is emulated, without the attention copies."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), emulated_bf16_products():
        yield


def _bf16(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _mask(batch: int, q: int, length: int, pad: list[int]) -> torch.Tensor:
    """(B, 1, Q, L) bfloat16 additive mask: causal over the last Q positions, the first ``pad[b]`` positions of row
    b masked (left padding)."""
    mask = torch.zeros(batch, 1, q, length)
    for b in range(batch):
        mask[b, :, :, : pad[b]] = float("-inf")
    causal = torch.ones(q, q).triu(1).bool()
    mask[:, :, :, length - q :].masked_fill_(causal, float("-inf"))
    return mask.to(torch.bfloat16)


def _assert_same(got: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor]) -> None:
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype and g.shape == r.shape
        # bit for bit, NaN and the sign of zero included
        assert torch.equal(g.view(torch.uint8), r.view(torch.uint8))


def _decode(
    attention,
    layer,
    batch: int,
    prompt: int,
    steps: int,
    head_dim: int,
    seed: int,
    pad: list[int],
    rotary: bool,
):
    """Run ``attention`` over a growing cache as ``generate`` does: a prefill of ``prompt`` positions, then one
    position a step, the key/value tensors concatenated afresh each step. ``rotary``: query and key in float32 (as
    rotary embeddings leave them under autocast), else bfloat16. Returns the outputs of every call."""
    heads, kv_heads = layer.config.num_attention_heads, layer.config.num_key_value_heads

    def qk(*shape: int, seed: int) -> torch.Tensor:
        if rotary:
            return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        return _bf16(*shape, seed=seed)

    key = qk(batch, kv_heads, prompt, head_dim, seed=seed)
    value = _bf16(batch, kv_heads, prompt, head_dim, seed=seed + 1)
    query = qk(batch, prompt, heads, head_dim, seed=seed + 2).transpose(
        1, 2
    )  # a transposed view, as in Llama
    outs = [attention(layer, query, key, value, _mask(batch, prompt, prompt, pad), scaling=head_dim**-0.5)]
    for step in range(steps):
        key = torch.cat([key, qk(batch, kv_heads, 1, head_dim, seed=seed + 10 + step)], dim=2)
        value = torch.cat([value, _bf16(batch, kv_heads, 1, head_dim, seed=seed + 50 + step)], dim=2)
        query = qk(batch, 1, heads, head_dim, seed=seed + 90 + step).transpose(1, 2)
        mask = _mask(batch, 1, key.shape[2], pad)
        outs.append(attention(layer, query, key, value, mask, scaling=head_dim**-0.5))
    return outs


@pytest.mark.parametrize("rotary", [False, True], ids=["bf16", "fp32-query-key"])
@pytest.mark.parametrize(("heads", "kv_heads"), [(9, 3), (4, 4), (6, 1)])
def test_a_growing_cache_gives_the_eager_functions_numbers_bit_for_bit(
    heads: int, kv_heads: int, rotary: bool
) -> None:
    model = _llama(heads=heads, kv_heads=kv_heads, head_dim=64)
    layer = model.model.layers[0].self_attn
    pad = [0, 3, 7, 1]
    with _emulated():
        ref = _decode(eager_attention_forward, layer, 4, 12, 80, 64, seed=3, pad=pad, rotary=rotary)
        copies = EagerAttentionCopies()
        got = _decode(copies, layer, 4, 12, 80, 64, seed=3, pad=pad, rotary=rotary)
    for g, r in zip(got, ref, strict=True):
        _assert_same(g, r)
    # one copy built at the prefill, then one extension a step, and once more when the slack ran out
    assert copies.calls == 81 and copies.fallbacks == 0
    assert copies.built == 2 and copies.extended == 79


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 3),
    prompt=st.integers(1, 9),
    steps=st.integers(0, 6),
    groups=st.sampled_from([(2, 1), (4, 2), (6, 3), (3, 3)]),
    head_dim=st.sampled_from([8, 16, 64]),
    seed=st.integers(0, 1000),
    rotary=st.booleans(),
)
def test_any_shape_matches_bit_for_bit(
    batch: int, prompt: int, steps: int, groups: tuple[int, int], head_dim: int, seed: int, rotary: bool
) -> None:
    model = _llama(heads=groups[0], kv_heads=groups[1], head_dim=head_dim, layers=1)
    layer = model.model.layers[0].self_attn
    pad = [min(b, prompt - 1) for b in range(batch)]
    with _emulated():
        ref = _decode(eager_attention_forward, layer, batch, prompt, steps, head_dim, seed, pad, rotary)
        got = _decode(EagerAttentionCopies(), layer, batch, prompt, steps, head_dim, seed, pad, rotary)
    for g, r in zip(got, ref, strict=True):
        _assert_same(g, r)


def test_a_cache_that_changes_is_copied_anew() -> None:
    model = _llama(layers=1)
    layer = model.model.layers[0].self_attn
    copies = EagerAttentionCopies()
    key, value = _bf16(3, 3, 8, 16, seed=1), _bf16(3, 3, 8, 16, seed=2)
    value[0, 0, 0, 1] = 0.0
    query = _bf16(3, 9, 1, 16, seed=3)
    edited = key.clone()
    edited[1, 2, 4, 5] = -edited[1, 2, 4, 5]  # one earlier position changed (a reordered or edited cache)
    zero = value.clone()
    zero[0, 0, 0, 1] = -0.0  # equal as a number, not in its bits
    nan = edited.clone()
    nan[0, 1, 2, 3] = float("nan")
    calls = [  # (key, value, copied anew)
        (key[:2], value[:2], True),
        (edited[:2], value[:2], True),
        (edited[:2], zero[:2], True),
        (nan[:2], zero[:2], True),
        (nan[:2].clone(), zero[:2].clone(), False),  # the same bits, NaN included: kept
        (nan, zero, True),  # another batch
    ]
    with _emulated():
        for k, v, anew in calls:
            built = copies.built
            ref = eager_attention_forward(layer, query[: k.shape[0]], k, v, None, scaling=0.25)
            _assert_same(copies(layer, query[: k.shape[0]], k, v, None, scaling=0.25), ref)
            assert copies.built == built + anew
    assert copies.extended == 1


def test_where_it_does_not_apply_the_models_own_eager_function_runs() -> None:
    model = _llama(layers=1)
    layer = model.model.layers[0].self_attn
    q, k, v = _bf16(2, 9, 3, 16, seed=1), _bf16(2, 3, 3, 16, seed=2), _bf16(2, 3, 3, 16, seed=3)
    copies = EagerAttentionCopies()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # no emulation: native products
        _assert_same(
            copies(layer, q, k, v, None, scaling=0.25), eager_attention_forward(layer, q, k, v, None, 0.25)
        )
    with torch.no_grad(), emulated_bf16_products():  # float32 inputs without autocast: float32 products
        args = (layer, q.float(), k.float(), v.float(), None)
        _assert_same(copies(*args, scaling=0.25), eager_attention_forward(*args, scaling=0.25))
    with torch.autocast("cpu", dtype=torch.bfloat16), emulated_bf16_products():  # a graph is recorded
        qg = q.clone().requires_grad_()
        out, _ = copies(layer, qg, k, v, None, scaling=0.25)
        out.float().sum().backward()
        assert qg.grad is not None
    assert copies.fallbacks == 3 and copies.calls == 0 and not copies.layers


def test_a_model_whose_eager_function_differs_is_left_alone() -> None:
    import transformers.models.gpt2.modeling_gpt2 as gpt2

    class Other(torch.nn.Module):  # as if defined in GPT-2's model file, whose eager function is another
        num_key_value_groups = 3

    Other.__module__ = gpt2.__name__

    copies = EagerAttentionCopies()
    q, k, v = _bf16(1, 3, 1, 8, seed=1), _bf16(1, 1, 2, 8, seed=2), _bf16(1, 1, 2, 8, seed=3)
    with _emulated():
        assert not copies.applies(Other(), q, k, v, 0.0)
        assert copies.fallbacks == 0
        assert copies.applies(
            _llama(layers=1).model.layers[0].self_attn, _bf16(1, 9, 1, 16, seed=1), k, v, 0.0
        )


def test_the_block_installs_itself_as_eager_and_restores_the_registry() -> None:
    assert ALL_ATTENTION_FUNCTIONS.get("eager") is None
    with eager_attention_copies() as outer:
        assert ALL_ATTENTION_FUNCTIONS["eager"] is outer
        with eager_attention_copies() as inner:
            assert inner is outer
        assert ALL_ATTENTION_FUNCTIONS["eager"] is outer
    assert ALL_ATTENTION_FUNCTIONS.get("eager") is None
    with pytest.raises(RuntimeError), eager_attention_copies():
        raise RuntimeError("boom")
    assert ALL_ATTENTION_FUNCTIONS.get("eager") is None


def test_a_users_own_eager_registration_is_left_in_place() -> None:
    calls: list[int] = []

    def own(module, query, key, value, attention_mask, **kwargs):
        calls.append(1)
        return eager_attention_forward(module, query, key, value, attention_mask, **kwargs)

    model = _llama(layers=1)
    ALL_ATTENTION_FUNCTIONS["eager"] = own
    try:
        with eager_attention_copies() as copies:
            assert ALL_ATTENTION_FUNCTIONS["eager"] is own
            with _emulated():
                model(torch.tensor([[1, 2, 3]]))
        assert calls and copies.calls == 0
        assert ALL_ATTENTION_FUNCTIONS["eager"] is own
    finally:
        del ALL_ATTENTION_FUNCTIONS["eager"]


def _sample(model: LlamaForCausalLM, precision: Precision, copies: bool) -> tuple[torch.Tensor, torch.Tensor]:
    prompts = torch.randint(3, 61, (4, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompts)
    mask[1, :2] = 0  # left padding
    mask[3, :5] = 0
    torch.manual_seed(1)
    with contextlib.ExitStack() as stack:
        if copies:
            stack.enter_context(precision.sampling())
        else:  # the same block, without the copies
            stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
            stack.enter_context(emulated_bf16_products())
        stack.enter_context(torch.no_grad())
        out = model.generate(
            prompts,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            max_new_tokens=24,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
    return out.sequences, torch.stack(out.scores)


def test_sampling_with_emulated_bf16_gives_the_same_tokens_and_scores() -> None:
    model = _llama(head_dim=64)
    counted = []
    original = EagerAttentionCopies.__call__

    def counting(self, *args, **kwargs):
        counted.append(self)
        return original(self, *args, **kwargs)

    ref_tokens, ref_scores = _sample(model, EMULATED, copies=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EagerAttentionCopies, "__call__", counting)
        tokens, scores = _sample(model, EMULATED, copies=True)
    assert torch.equal(tokens, ref_tokens)
    assert torch.equal(scores.view(torch.uint8), ref_scores.view(torch.uint8))  # bit for bit
    assert len(counted) == 2 * 24 and counted[0].built == 2 and counted[0].extended == 2 * 23


def test_native_bf16_sampling_does_not_install_it() -> None:
    with NATIVE.sampling():
        assert ALL_ATTENTION_FUNCTIONS.get("eager") is None
    with EMULATED.sampling():
        assert isinstance(ALL_ATTENTION_FUNCTIONS.get("eager"), EagerAttentionCopies)
    assert ALL_ATTENTION_FUNCTIONS.get("eager") is None
