"""Batched sampling of ``k`` completions per prompt (:func:`generate_samples`), with the entropy of the sampling
distribution accumulated from each step's logits (one softmax per step, no stored logits).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from bandpo.validation import check_int_in
from bandpo_lab.decode import check_temperature, sample
from bandpo_lab.runtime import Precision


@dataclass(frozen=True)
class Samples:
    """``[P][k]`` ``completions`` (no prompt, eos or padding), ``token_ids`` and ``lengths`` (up to and with the first
    eos), ``finished`` (ended with eos, not cut by ``max_new_tokens``), and the mean ``entropy`` (nats) of the
    sampling distribution over the generated tokens (eos included; ``None`` when nothing was generated)."""

    completions: list[list[str]]
    token_ids: list[list[list[int]]]
    lengths: list[list[int]]
    finished: list[list[bool]]
    entropy: float | None


class _EntropyRecorder:
    """Records, at each step, the entropy of the sampled distribution ``softmax(scores / temperature)``."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.steps: list[Tensor] = []

    def __call__(self, scores: Tensor) -> None:
        """scores: (B, V) float logits; records a (B,) float32 entropy."""
        logp = torch.log_softmax(scores.float() / self.temperature, dim=-1)  # (B, V)
        self.steps.append(-(logp.exp() * logp).nan_to_num().sum(dim=-1))  # (B,); 0 * -inf -> 0


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    eos: Any = tokenizer.eos_token_id
    if eos is None:
        eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        raise ValueError("tokenizer.eos_token_id and model.generation_config.eos_token_id are both None")
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


@contextlib.contextmanager
def _pad_token(tokenizer: PreTrainedTokenizerBase, pad_id: int) -> Iterator[None]:
    """``tokenizer`` pads with ``pad_id`` in the block when it has no pad token (unset again afterwards)."""
    if tokenizer.pad_token is not None:
        yield
        return
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(pad_id)
    try:
        yield
    finally:
        tokenizer.pad_token = None


def generate_samples(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    k: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int = 16,
    batch_size: int = 64,
    seed: int | None = 0,
    add_special_tokens: bool = True,
    precision: Precision | None = None,
) -> Samples:
    """Sample ``k`` (>= 1) completions for every prompt, ``batch_size`` prompts per call of
    :func:`bandpo_lab.decode.sample` (prompts left-padded, each encoded once for its ``k`` samples).

    Args:
        model: a causal LM, in eval mode for the call (its mode restored afterwards).
        tokenizer: its tokenizer; needs an eos token (its own or the model's generation config's); without a pad
            token it pads with the eos for the call.
        prompts: ``P`` prompt strings, tokenized as given (apply a chat template beforehand if needed).
        temperature: > 0 samples from ``softmax(logits / temperature)``; 0 decodes greedily (``entropy`` is then
            that of the temperature-1 distribution).
        seed: seeds torch for the call (the global RNG state is restored afterwards); ``None`` uses and
            advances the global RNG.
        precision: a resolved precision (:mod:`bandpo_lab.runtime`): ``bf16`` samples under bfloat16 autocast;
            ``None`` in the model's own dtype.
    """
    k = check_int_in("k", k, 1)
    max_new_tokens = check_int_in("max_new_tokens", max_new_tokens, 1)
    batch_size = check_int_in("batch_size", batch_size, 1)
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be a sequence of strings (one per prompt), got " + repr(prompts)[:200])
    check_temperature(temperature)
    eos_ids = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    greedy = temperature == 0

    completions: list[list[str]] = []
    token_ids: list[list[list[int]]] = []
    lengths: list[list[int]] = []
    finished: list[list[bool]] = []
    entropy_sum, entropy_count = 0.0, 0
    device = model.device
    was_training = model.training
    model.eval()
    rng_devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=rng_devices, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                chunk = list(prompts[start : start + batch_size])
                with _pad_token(tokenizer, pad_id):
                    enc = tokenizer(
                        chunk,
                        return_tensors="pt",
                        padding=True,
                        padding_side="left",
                        add_special_tokens=add_special_tokens,
                    ).to(device)
                recorder = _EntropyRecorder(1.0 if greedy else float(temperature))
                # Each prompt repeated k times, prompt-major (B*k, T_prompt); decode.sample encodes each prompt once.
                input_ids = enc["input_ids"].repeat_interleave(k, dim=0)
                attention_mask = enc["attention_mask"].repeat_interleave(k, dim=0)
                with torch.no_grad(), precision.sampling() if precision else contextlib.nullcontext():
                    out = sample(
                        model,
                        input_ids,
                        attention_mask,
                        max_new_tokens=max_new_tokens,
                        eos_token_id=eos_ids,
                        pad_token_id=pad_id,
                        temperature=float(temperature),
                        on_scores=recorder,
                    )
                new = out[:, input_ids.shape[1] :].cpu()  # (len(chunk) * k, T_new), prompt-major
                is_eos = torch.isin(new, torch.tensor(eos_ids))  # (B*k, T_new)
                has_eos = is_eos.any(dim=1)  # (B*k,)
                first_eos = torch.where(has_eos, is_eos.int().argmax(dim=1), new.shape[1])  # (B*k,)
                n_tokens = torch.where(has_eos, first_eos + 1, new.shape[1])  # (B*k,), eos counted
                texts = tokenizer.batch_decode(
                    [row[: int(cut)] for row, cut in zip(new, first_eos)], skip_special_tokens=True
                )
                for i in range(len(chunk)):
                    rows = range(i * k, (i + 1) * k)
                    completions.append([texts[r] for r in rows])
                    token_ids.append([new[r, : int(n_tokens[r])].tolist() for r in rows])
                    lengths.append([int(n_tokens[r]) for r in rows])
                    finished.append([bool(has_eos[r]) for r in rows])
                if recorder.steps:
                    ent = torch.stack(recorder.steps, dim=1).cpu()  # (B*k, T_steps)
                    steps = torch.arange(ent.shape[1])  # (T_steps,)
                    mask = steps[None, :] < n_tokens[:, None]  # (B*k, T_steps)
                    entropy_sum += float(ent[mask].sum())
                    entropy_count += int(mask.sum())
    finally:
        model.train(was_training)
    entropy = entropy_sum / entropy_count if entropy_count else None
    return Samples(
        completions=completions, token_ids=token_ids, lengths=lengths, finished=finished, entropy=entropy
    )
