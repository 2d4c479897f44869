"""``bandpo_lab.decode``: the shared-prefill sampler against transformers' ``generate`` (greedy, in float64: the same
tokens), the inverse-CDF draw against the distribution it draws from, and the dispatch of ``sampling_generate``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bandpo_lab.decode import draw, generation_problem, sample, sampling_generate

VOCAB = 40
EOS, PAD = 1, 0


def _model(dtype: torch.dtype = torch.float64, seed: int = 0) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from helpers.tiny import tiny_lm_config

    torch.manual_seed(seed)
    config = LlamaConfig(**tiny_lm_config(VOCAB, PAD, EOS, initializer_range=0.3))
    return LlamaForCausalLM(config).to(dtype).eval()


def _prompts(groups: int = 3, size: int = 4, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``groups`` prompts of different lengths, left-padded, each repeated ``size`` times (group-major, as TRL and
    the evaluation lay them out), and one more copy of the first at the end (out of order)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [3 + 2 * i for i in range(groups)]
    width = max(lengths)
    ids = torch.full((groups, width), PAD)
    mask = torch.zeros(groups, width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, width - n :] = torch.randint(2, VOCAB, (n,), generator=g)
        mask[i, width - n :] = 1
    order = [*torch.arange(groups).repeat_interleave(size).tolist(), 0]
    return ids[order], mask[order]


def test_greedy_decoding_gives_generates_tokens() -> None:
    """Greedy, float64: every row's tokens equal ``generate``'s, eos handling and padding included (one prefill
    per distinct prompt, then the cache copied to its rows)."""
    model = _model()
    ids, mask = _prompts()
    with torch.no_grad():
        ours = sample(model, ids, mask, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD, temperature=0)
        ref = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=EOS,
            pad_token_id=PAD,
        )
    assert ours.shape == ref.shape and torch.equal(ours, ref)


def test_sampling_scores_match_generates_logits() -> None:
    """At every step the logits handed to ``on_scores`` equal the full-sequence forward's logits of the tokens
    drawn so far (float64): the copied cache and the positions are right for every row."""
    model = _model()
    ids, mask = _prompts()
    seen: list[torch.Tensor] = []
    torch.manual_seed(0)
    with torch.no_grad():
        out = sample(
            model, ids, mask, max_new_tokens=6, eos_token_id=[EOS], pad_token_id=PAD, on_scores=seen.append
        )
        full_mask = torch.cat(
            [mask, torch.ones(ids.shape[0], out.shape[1] - ids.shape[1], dtype=torch.long)], 1
        )
        positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(
            input_ids=out, attention_mask=full_mask, position_ids=positions
        ).logits  # (B, T + N, V)
    width = ids.shape[1]
    assert len(seen) == out.shape[1] - width  # one call per drawn token
    alive = torch.ones(ids.shape[0], dtype=torch.bool)
    for step, scores in enumerate(seen):
        expected = logits[:, width - 1 + step]
        assert torch.allclose(scores[alive].double(), expected[alive], atol=1e-9), step
        alive &= out[:, width + step] != EOS


def test_rows_stop_at_eos_and_are_padded() -> None:
    model = _model()
    with torch.no_grad():
        model.lm_head.bias = None
        model.lm_head.weight.data[EOS] += 50.0  # eos is by far the likeliest token after the first step
    ids, mask = _prompts(groups=2, size=2)
    torch.manual_seed(0)
    with torch.no_grad():
        out = sample(model, ids, mask, max_new_tokens=8, eos_token_id=EOS, pad_token_id=PAD)
    new = out[:, ids.shape[1] :]
    assert new.shape[1] < 8  # stopped once every row had its eos
    for row in new.tolist():
        cut = row.index(EOS)
        assert all(t == PAD for t in row[cut + 1 :])


@settings(max_examples=50, deadline=None)
@given(
    logits=st.lists(st.floats(-30, 30), min_size=2, max_size=12),
    u=st.floats(0.0, 1.0, exclude_max=True),
)
def test_draw_is_the_inverse_cdf(logits: list[float], u: float) -> None:
    """The drawn index is the first whose cumulative probability exceeds ``u`` (a naive float64 loop), up to
    the float32 rounding at a boundary; a token of probability 0 is never drawn."""
    probs = torch.softmax(torch.tensor([logits], dtype=torch.float64), -1)
    probs[0, 0] = 0.0  # one impossible token
    got = int(draw(probs, torch.tensor([u], dtype=torch.float64))[0])
    total, acc, naive = float(probs.sum()), 0.0, probs.shape[1] - 1
    for v, p in enumerate(probs[0].tolist()):
        acc += p
        if acc > u * total:
            naive = v
            break
    assert got == naive
    assert probs[0, got] > 0


def test_draw_frequencies_follow_the_distribution() -> None:
    torch.manual_seed(0)
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.15, 0.05]]).expand(40_000, -1)
    counts = torch.bincount(draw(probs, torch.rand(40_000)), minlength=5).double() / 40_000
    assert counts[1] == 0
    assert torch.allclose(counts, probs[0].double(), atol=0.01)


def test_bad_arguments_are_refused() -> None:
    model = _model()
    ids, mask = _prompts(groups=1, size=1)
    with pytest.raises(ValueError, match=r"temperature must be a finite number >= 0 \(0: greedy\), got -1"):
        sample(model, ids, mask, max_new_tokens=2, eos_token_id=EOS, pad_token_id=PAD, temperature=-1)
    with pytest.raises(ValueError, match=r"input_ids and attention_mask must be \(B, T\) of one shape"):
        sample(model, ids, mask[:, 1:], max_new_tokens=2, eos_token_id=EOS, pad_token_id=PAD)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match=rf"max_new_tokens must be an integer >= 1, got {bad!r}"):
            sample(model, ids, mask, max_new_tokens=bad, eos_token_id=EOS, pad_token_id=PAD)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "no mass"])
def test_rows_without_a_distribution_are_refused(bad: Any) -> None:
    """A row whose probabilities hold NaN or infinity, or sum to 0, has no token to draw: one line naming the
    rows (it returned the id V, one past the vocabulary, before), in ``draw`` and through ``sample``."""
    probs = torch.softmax(torch.randn(3, VOCAB, dtype=torch.float64), dim=-1)
    probs[1] = 0.0 if bad == "no mass" else probs[1]
    if bad != "no mass":
        probs[1, 5] = bad
    with pytest.raises(ValueError, match=r"cannot sample rows \[1\] of 3: their probabilities hold NaN"):
        draw(probs, torch.full((3,), 0.5, dtype=torch.float64))

    model = _model()
    ids, mask = _prompts(groups=1, size=2)
    with torch.no_grad():
        model.lm_head.weight[3] = float("nan")  # every row's logits hold NaN
        with pytest.raises(ValueError, match=r"cannot sample rows \[0, 1, 2\] of 3"):
            sample(model, ids, mask, max_new_tokens=1, eos_token_id=EOS, pad_token_id=PAD)


def test_generation_problem_names_what_sample_does_not_do() -> None:
    from transformers import GenerationConfig

    def config(**kwargs: Any) -> GenerationConfig:
        base = dict(max_new_tokens=4, do_sample=True, eos_token_id=EOS, pad_token_id=PAD, temperature=1.0)
        return GenerationConfig(**{**base, **kwargs})

    assert generation_problem(config()) is None
    assert generation_problem(config(top_k=0, top_p=1.0, repetition_penalty=1.0, min_p=None)) is None  # TRL's
    assert generation_problem(config(top_k=50)) == "top_k=50"
    assert generation_problem(config(top_p=0.9)) == "top_p=0.9"
    assert generation_problem(config(repetition_penalty=1.1)) == "repetition_penalty=1.1"
    assert generation_problem(config(eos_token_id=None)) == "no eos_token_id"


def test_sampling_generate_dispatches_and_restores() -> None:
    """Inside the block a plain sampling config runs ``sample``; one with top-k runs transformers' ``generate``;
    after the block the model's own ``generate`` is back."""
    from transformers import GenerationConfig

    model = _model()
    ids, mask = _prompts(groups=1, size=3)
    calls: list[str] = []
    original = type(model).generate

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("generate")
        return original(self, *args, **kwargs)

    base = dict(max_new_tokens=3, do_sample=True, eos_token_id=EOS, pad_token_id=PAD)
    trl = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=None, repetition_penalty=1.0)  # TRL's GRPO defaults
    plain = GenerationConfig(**base, **trl)
    top_k = GenerationConfig(**base, **{**trl, "top_k": 5})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(model), "generate", spy)
        with torch.no_grad(), sampling_generate(model):
            a = model.generate(input_ids=ids, attention_mask=mask, generation_config=plain)
            assert calls == []
            model.generate(input_ids=ids, attention_mask=mask, generation_config=top_k)
            assert calls == ["generate"]
        assert "generate" not in vars(model)
    assert a.shape[0] == ids.shape[0] and a.shape[1] <= ids.shape[1] + 3


def test_the_draw_reaches_the_last_tokens_and_never_a_zero() -> None:
    """In float64: a last token of probability 1e-9 is drawn when ``u`` falls in its sliver (float32 sums
    could not resolve it), and ``u`` just below 1 never lands on a zero-probability tail."""
    probs = torch.tensor([[0.6, 0.4 - 1e-9, 1e-9]], dtype=torch.float32)
    assert int(draw(probs, torch.tensor([1 - 1e-10], dtype=torch.float64))[0]) == 2
    tail = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    assert (
        int(
            draw(
                tail,
                torch.tensor(
                    [
                        torch.nextafter(
                            torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
                        )
                    ]
                ),
            )[0]
        )
        == 1
    )


def test_unset_fields_are_merged_as_generate_merges_them() -> None:
    """``top_k`` left unset is 50 in ``generate`` (transformers' global default), so such a config goes to
    ``generate``; a field the model's own generation config sets counts too."""
    from transformers import GenerationConfig

    from bandpo_lab.decode import effective_generation_config

    model = _model()
    plain = GenerationConfig(max_new_tokens=3, do_sample=True, eos_token_id=EOS, pad_token_id=PAD, top_k=0)
    assert generation_problem(effective_generation_config(plain, model)) is None
    unset = GenerationConfig(max_new_tokens=3, do_sample=True, eos_token_id=EOS, pad_token_id=PAD)
    assert generation_problem(effective_generation_config(unset, model)) == "top_k=50"
    model.generation_config.top_p = 0.9
    assert generation_problem(effective_generation_config(plain, model)) == "top_p=0.9"


def test_a_model_it_cannot_decode_goes_to_generate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model :func:`model_problem` refuses (no cache argument, a cache of other layers) is sampled by
    ``generate`` with the same contract: greedy gives the same tokens, the scores are reported each step."""
    import bandpo_lab.decode
    from bandpo_lab.decode import model_problem

    model = _model()
    assert model_problem(model) is None
    ids, mask = _prompts()
    with torch.no_grad():
        fast = sample(model, ids, mask, max_new_tokens=5, eos_token_id=EOS, pad_token_id=PAD, temperature=0)
        monkeypatch.setattr(bandpo_lab.decode, "model_problem", lambda m: "its cache has other layers")
        seen: list[torch.Tensor] = []
        slow = sample(
            model, ids, mask, max_new_tokens=5, eos_token_id=EOS, pad_token_id=PAD, temperature=0,
            on_scores=seen.append,
        )  # fmt: skip
    assert torch.equal(fast, slow)
    assert len(seen) == slow.shape[1] - ids.shape[1] and seen[0].dtype == torch.float32


@pytest.mark.parametrize(
    ("field", "value"), [("repetition_penalty", 50.0), ("num_beams", 3), ("suppress_tokens", "sampled")]
)
def test_generate_for_a_model_it_cannot_decode_ignores_the_models_generation_config(
    field: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``generate`` path samples softmax(logits / T) too: a repetition penalty, beams or suppressed tokens in
    the model's own generation config (which ``generate`` would merge into the call) change nothing, and the
    model's config is back afterwards."""
    import bandpo_lab.decode

    model = _model()
    ids, mask = _prompts()
    args = dict(max_new_tokens=6, eos_token_id=EOS, pad_token_id=PAD, temperature=0)
    with torch.no_grad():
        fast = sample(model, ids, mask, **args)
        if value == "sampled":  # tokens the greedy path chooses, which the config would forbid
            value = sorted(set(fast[:, ids.shape[1] :].flatten().tolist()) - {EOS, PAD})[:3]
        setattr(model.generation_config, field, value)
        own = model.generation_config
        monkeypatch.setattr(bandpo_lab.decode, "model_problem", lambda m: "its cache has other layers")
        slow = sample(model, ids, mask, **args)
    assert torch.equal(fast, slow)
    assert model.generation_config is own and getattr(own, field) == value


def test_sampling_generate_runs_without_a_graph() -> None:
    """The ``generate`` it installs records no autograd graph even when called with gradients enabled, as
    transformers' own ``generate`` (a ``no_grad`` function)."""
    from transformers import GenerationConfig

    model = _model()
    ids, mask = _prompts(groups=1, size=2)
    config = GenerationConfig(max_new_tokens=2, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    config.eos_token_id, config.pad_token_id = EOS, PAD
    seen: list[bool] = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.requires_grad))
    with sampling_generate(model):
        model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    hook.remove()
    assert seen and not any(seen)


def test_sample_draws_with_float64_uniforms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The uniform numbers are float64 like the sum they are compared with: float32 ones sit on a grid of 6e-8,
    which a float64 sum cannot make finer."""
    import bandpo_lab.decode

    dtypes: list[torch.dtype] = []
    real_draw = bandpo_lab.decode.draw

    def spy(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        dtypes.append(u.dtype)
        return real_draw(probs, u)

    monkeypatch.setattr(bandpo_lab.decode, "draw", spy)
    ids, mask = _prompts(groups=1, size=2)
    with torch.no_grad():
        sample(_model(torch.float32), ids, mask, max_new_tokens=2, eos_token_id=EOS, pad_token_id=PAD)
    assert dtypes and set(dtypes) == {torch.float64}
