"""Sampling completions from a causal LM with one prefill per distinct prompt (:func:`sample`), installed as a
model's ``generate`` for the configs it covers (:func:`sampling_generate`); docs/smollm2.md, "One prefill per
distinct prompt"."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bandpo.validation import check_int_in, is_finite_real

# GenerationConfig fields -> the values :func:`sample` implements; ``None`` stands for unset everywhere.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "top_k": (None, 0),
    "top_p": (None, 1.0),
    "min_p": (None, 0.0),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "bad_words_ids": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "sequence_bias": (None,),
    "logit_bias": (None,),
    "num_beams": (None, 1),
    "num_return_sequences": (None, 1),
    "cache_implementation": (None,),
    "stop_strings": (None,),
    "top_h": (None,),
    "max_time": (None,),
    "token_healing": (None, False),
    "dola_layers": (None,),
    "penalty_alpha": (None,),
    "constraints": (None,),
    "force_words_ids": (None,),
    "remove_invalid_values": (None, False),
    "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0.0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "use_mtp": (None, False),
    "speculation_type": (None,),
    "assistant_early_exit": (None,),
    "watermarking_config": (None,),
    "assistant_model": (None,),
    "prompt_lookup_num_tokens": (None,),
    "guidance_scale": (None, 1.0),
    "exponential_decay_length_penalty": (None,),
    "renormalize_logits": (None, False),
    "output_scores": (None, False),
    "output_logits": (None, False),
    "return_dict_in_generate": (None, False),
}


def generation_problem(config: Any) -> str | None:
    """Why :func:`sample` cannot stand in for ``generate`` with the ``GenerationConfig`` ``config``, or ``None``:
    it needs ``max_new_tokens``, ``do_sample`` with a temperature > 0 (or greedy decoding), an eos token, and
    every other field neutral (no top-k/top-p/min-p, penalties, suppressed tokens, beams, ...)."""
    if getattr(config, "max_new_tokens", None) is None:
        return "max_new_tokens is not set"
    if getattr(config, "eos_token_id", None) is None:
        return "no eos_token_id"
    temperature = getattr(config, "temperature", None)
    if getattr(config, "do_sample", False) and not (temperature is None or temperature > 0):
        return f"temperature={temperature!r}"
    for name, neutral in _NEUTRAL.items():
        value = getattr(config, name, None)
        if not any(value is n or (n is not None and value == n) for n in neutral):
            return f"{name}={value!r}"
    return None


def effective_generation_config(config: Any, model: Any) -> Any | None:
    """The config ``generate`` would run with: ``config``'s fields, then the unset ones from
    ``model.generation_config``, then transformers' global defaults (an unset ``top_k`` is 50); ``None`` where this
    transformers does not offer the merge (the caller then leaves sampling to ``generate``)."""
    import copy

    defaults = getattr(type(config), "_get_default_generation_params", None)
    own = getattr(model, "generation_config", None)
    if defaults is None or not hasattr(config, "update"):
        return None
    merged = copy.deepcopy(config)
    if own is not None:
        merged.update(**own.to_dict(), defaults_only=True, allow_custom_entries=True)
    merged.update(**defaults(), defaults_only=True)
    return merged


def model_problem(model: Any) -> str | None:
    """Why :func:`sample` cannot decode ``model`` itself (it then leaves the work to ``generate``), or ``None``: it
    needs a forward that takes the cache by name and a default dynamic cache of plain key/value layers, which can
    be copied to the rows that share a prompt."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    params = inspect.signature(model.forward).parameters
    if "cache" not in params and "past_key_values" not in params:
        return "its forward takes no cache argument by name"
    supports = getattr(model, "_supports_default_dynamic_cache", None)
    if supports is not None and not supports():
        return "it does not use transformers' default dynamic cache"
    try:
        layers = DynamicCache(config=model.config).layers
    except (TypeError, ValueError, AttributeError) as err:
        return f"its dynamic cache cannot be built ({err})"
    kinds = {
        type(layer).__name__
        for layer in layers
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer)
    }
    return f"its cache has {', '.join(sorted(kinds))} layers" if kinds else None


def check_temperature(value: object, error: type[ValueError] = ValueError) -> float:
    """``value`` as a sampling temperature: a finite Python number >= 0 (0: greedy), else ``error``."""
    if not (isinstance(value, (int, float)) and is_finite_real(value) and value >= 0):
        raise error(f"temperature must be a finite number >= 0 (0: greedy), got {value!r}")
    return value


def _ids(value: Any) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def draw(probs: Any, u: Any) -> Any:
    """Inverse-CDF draw: row ``b``'s token is the first ``v`` with ``cumsum(probs_b)[v] > u_b * sum(probs_b)``,
    the sum taken in float64 (in float32 the tokens at the end of a 49,152-entry vocabulary below about 3e-8 could
    never be drawn).

    Args:
        probs: (B, V) float, non-negative rows with a positive sum (normalisation is not needed).
        u: (B,) float in [0, 1).

    Returns:
        (B,) long token ids in [0, V); a token of probability 0 is never drawn.

    Raises:
        ValueError: a row whose sum is not a positive finite number (NaN or infinite logits, or no mass), where
            no token can be drawn (``torch.multinomial`` refuses such rows too).
    """
    import torch

    cdf = probs.double().cumsum(dim=-1)  # (B, V) float64
    total = cdf[:, -1:]  # (B, 1)
    bad = ~(torch.isfinite(total) & (total > 0)).squeeze(-1)  # (B,); cdf's NaN/inf reach the total
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise ValueError(
            f"cannot sample rows {rows[:8]}{' ...' if len(rows) > 8 else ''} of {probs.shape[0]}: their "
            "probabilities hold NaN or infinity or sum to 0 (the policy's logits are not finite)"
        )
    # below the total, so that some token's cdf exceeds it even where u * total rounds up to the total
    target = torch.minimum(u.double().unsqueeze(-1) * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(-1)  # (B,)


def sample(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    *,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int],
    pad_token_id: int,
    temperature: float = 1.0,
    on_scores: Callable[[Any], None] | None = None,
) -> Any:
    """Sample up to ``max_new_tokens`` tokens after each row of ``input_ids``: each distinct prompt encoded once, its
    key/value cache copied to the rows that share it, every token drawn by :func:`draw` from ``generate``'s
    distribution, ``softmax(logits / temperature)`` of the float32 logits (the argmax for 0); a row is padded after
    its first eos. A model :func:`model_problem` refuses is left to ``generate``.

    Args:
        model: a causal LM of transformers (``model(input_ids, attention_mask, position_ids, past_key_values,
            use_cache)`` returning ``.logits``), in eval mode; the caller sets ``torch.no_grad()`` and any
            autocast.
        input_ids: (B, T) long, left-padded prompts; equal rows (with equal masks) are encoded once.
        attention_mask: (B, T) long/bool, 1 on prompt tokens.
        max_new_tokens: >= 1.
        eos_token_id: the token(s) that end a row.
        pad_token_id: what follows a row's eos.
        temperature: > 0 samples from ``softmax(logits / temperature)``; 0 takes the argmax.
        on_scores: called at every step with the (B, V) float32 logits of the step (before the temperature).

    Returns:
        (B, T + N) long: the prompts and N <= ``max_new_tokens`` new tokens per row.
    """
    import torch
    from transformers import DynamicCache

    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"input_ids and attention_mask must be (B, T) of one shape, got {tuple(input_ids.shape)} and "
            f"{tuple(attention_mask.shape)}"
        )
    check_temperature(temperature)
    check_int_in("max_new_tokens", max_new_tokens, 1)
    if model_problem(model) is not None:
        return _sample_by_generate(
            model,
            input_ids,
            attention_mask,
            max_new_tokens,
            eos_token_id,
            pad_token_id,
            temperature,
            on_scores,
        )
    mask = attention_mask.long()
    rows = torch.cat([input_ids, mask], dim=1)  # (B, 2T)
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)  # (U, 2T), (B,)
    width = input_ids.shape[1]
    u_ids, u_mask = unique[:, :width], unique[:, width:]  # (U, T) each
    u_pos = (u_mask.cumsum(dim=-1) - 1).clamp_(min=0)  # (U, T); padding positions are masked
    cache = DynamicCache(config=model.config)
    params = inspect.signature(model.forward).parameters
    cache_arg = {"cache" if "cache" in params else "past_key_values": cache}  # transformers >= 5.2x: cache
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    out = model(
        input_ids=u_ids, attention_mask=u_mask, position_ids=u_pos, use_cache=True, **cache_arg, **keep
    )
    if cache.get_seq_length() != width:  # the forward did not fill the cache it was given
        raise RuntimeError(
            f"{type(model).__name__} left {cache.get_seq_length()} of {width} prompt positions in the cache"
        )
    cache.batch_select_indices(inverse)  # every row gets its prompt's keys and values
    logits = out.logits[:, -1, :].float()[inverse]  # (B, V)
    position = u_pos[inverse, -1]  # (B,)
    eos = torch.tensor(_ids(eos_token_id), device=input_ids.device)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # (B,)
    new: list[Any] = []
    for step in range(max_new_tokens):
        if on_scores is not None:
            on_scores(logits)
        if temperature == 0:
            token = logits.argmax(dim=-1)  # (B,)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)  # (B, V)
            u = torch.rand(
                probs.shape[0], device=probs.device, dtype=torch.float64
            )  # (B,), as fine as the sum
            token = draw(probs, u)
        token = token.masked_fill_(finished, pad_token_id)
        new.append(token)
        finished |= torch.isin(token, eos)
        if step == max_new_tokens - 1 or bool(finished.all()):
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # (B, T + step + 1)
        position = position + 1
        out = model(
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=position[:, None],
            use_cache=True,
            **cache_arg,
        )
        logits = out.logits[:, -1, :].float()  # (B, V)
    return torch.cat([input_ids, torch.stack(new, dim=1)], dim=1)


def _sample_by_generate(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int],
    pad_token_id: int,
    temperature: float,
    on_scores: Callable[[Any], None] | None,
) -> Any:
    """:func:`sample`'s contract by transformers' ``generate``, for models :func:`model_problem` refuses. The model's
    own ``generation_config`` is set aside for the call, so that none of its fields changes the distribution, and
    ``top_k`` (50 by transformers' default) is given as 0."""
    from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

    class _Scores(LogitsProcessor):  # custom processors see the logits before the temperature
        def __call__(self, ids: Any, scores: Any) -> Any:
            if on_scores is not None:
                on_scores(scores.float())
            return scores

    sampling = {"do_sample": True, "temperature": float(temperature), "top_k": 0, "top_p": 1.0}
    own = model.generation_config
    model.generation_config = GenerationConfig()  # nothing of the model's own fills the unset fields
    try:
        return model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            eos_token_id=_ids(eos_token_id),
            pad_token_id=pad_token_id,
            logits_processor=LogitsProcessorList([_Scores()]),
            **(sampling if temperature > 0 else {"do_sample": False}),
        )
    finally:
        model.generation_config = own


@contextlib.contextmanager
def sampling_generate(model: Any) -> Iterator[None]:
    """Within the block, ``model.generate(input_ids=..., attention_mask=..., generation_config=...)`` runs
    :func:`sample` when :func:`generation_problem` finds nothing in the config (TRL's sampling settings: temperature
    only), and the model's own ``generate`` otherwise (other arguments included)."""
    original = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        import torch

        extra = set(kwargs) - {"input_ids", "attention_mask", "generation_config"}
        given = kwargs.get("generation_config")
        config = None if args or extra or given is None else effective_generation_config(given, model)
        if config is None or generation_problem(config) is not None or model_problem(model) is not None:
            return original(*args, **kwargs)
        greedy = not config.do_sample
        with torch.no_grad():  # as transformers' generate
            return sample(
                model,
                kwargs["input_ids"],
                kwargs["attention_mask"],
                max_new_tokens=config.max_new_tokens,
                eos_token_id=config.eos_token_id,
                pad_token_id=config.pad_token_id
                if config.pad_token_id is not None
                else _ids(config.eos_token_id)[0],
                temperature=0.0 if greedy else config.temperature,  # the merged config always has one
            )

    model.generate = generate
    try:
        yield
    finally:
        del model.generate  # the instance attribute: the class's generate shows again
        if model.generate != original:  # pragma: no cover - a generate that was itself an instance attribute
            model.generate = original
