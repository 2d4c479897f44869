"""Sampling backends: ``k`` completions for each prompt of a batch, from transformers ``generate``
(:func:`bandpo_lab.eval.sampling.generate_samples`) or from vLLM.

A sampler is called as ``sampler(prompts, add_special_tokens, seed) -> Chunk``: ``prompts`` the formatted prompt
strings of one batch, ``add_special_tokens`` whether the tokenizer adds its special tokens (not after a chat
template), ``seed`` the batch's sampling seed (``None``: unseeded). :func:`bandpo_lab.eval.evaluate.evaluate_model`
takes any callable of that shape (tests pass a scripted one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bandpo_lab.eval.errors import EvalError
from bandpo_lab.runtime import Precision, precision_for, weight_dtypes

if TYPE_CHECKING:
    from bandpo_lab.eval.settings import EvalSettings

__all__ = ["Chunk", "TransformersSampler", "VLLMSampler", "max_new_tokens_of"]


@dataclass
class Chunk:
    """What a sampler returns for one batch of ``P`` prompts, ``k`` samples each.

    Attributes:
        completions: ``P`` lists of ``k`` completion strings.
        lengths: ``P`` lists of ``k`` generated-token counts.
        finished: ``P`` lists of ``k`` flags: the sample ended (EOS) within ``max_new_tokens``.
        entropy: mean sampling entropy in nats per generated token, ``None`` when the backend cannot tell.
        n_tokens: generated tokens in all (the weight of ``entropy`` when batches are pooled).
    """

    completions: list[list[str]]
    lengths: list[list[int]]
    finished: list[list[bool]]
    entropy: float | None
    n_tokens: int


class TransformersSampler:
    """transformers ``generate`` sampling, with the sampling entropy
    (:func:`bandpo_lab.eval.sampling.generate_samples`): ``settings.k`` samples per prompt at ``settings.temperature``,
    up to ``max_new_tokens`` each."""

    def __init__(self, model: Any, tokenizer: Any, settings: EvalSettings, max_new_tokens: int) -> None:
        self.model, self.tokenizer, self.settings, self.max_new_tokens = (
            model,
            tokenizer,
            settings,
            max_new_tokens,
        )
        self.precision: Precision | None = None  # resolved at the first call

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> Chunk:
        from bandpo_lab.eval.sampling import generate_samples

        if self.precision is None:
            dtypes = ", ".join(weight_dtypes(self.model)) or "float32"
            self.precision = precision_for(
                self.settings.precision,
                self.model,
                gpu_reason=f"no autocast: sampling in the weights' {dtypes}",
            )
        s = generate_samples(
            self.model,
            self.tokenizer,
            prompts,
            k=self.settings.k,
            temperature=float(self.settings.temperature),
            max_new_tokens=self.max_new_tokens,
            batch_size=len(prompts),
            seed=seed,
            add_special_tokens=add_special_tokens,
            compute_entropy=True,
            precision=self.precision,
        )
        return Chunk(s.completions, s.lengths, s.finished, s.entropy, sum(map(sum, s.lengths)))


class VLLMSampler:
    """vLLM sampling (no entropy: vLLM does not return the full distributions). Prompts are tokenized here, with
    or without special tokens as the transformers path does, and passed to vLLM as token ids.

    ``tokenizer_dir`` is where the tokenizer files are (:func:`bandpo_lab.eval.models.check_model_dir`: a checkpoint
    without its own uses the run directory's); ``None``: ``model_dir``.
    """

    def __init__(
        self,
        model_dir: Path,
        tokenizer: Any,
        settings: EvalSettings,
        max_new_tokens: int,
        dtype: str,
        tokenizer_dir: Path | None = None,
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as err:
            raise EvalError(
                "backend 'vllm' (--vllm) needs vLLM installed (pip install vllm); drop --vllm to sample with "
                "transformers"
            ) from err
        self.tokenizer, self.settings, self.max_new_tokens = tokenizer, settings, max_new_tokens
        self.llm = LLM(
            model=str(model_dir),
            tokenizer=str(tokenizer_dir or model_dir),
            dtype=dtype,
            seed=settings.seed or 0,
        )

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> Chunk:
        from vllm import SamplingParams

        params = SamplingParams(
            n=self.settings.k,
            temperature=float(self.settings.temperature),
            top_p=1.0,
            max_tokens=self.max_new_tokens,
            seed=seed,
        )
        ids = self.tokenizer(prompts, add_special_tokens=add_special_tokens)["input_ids"]
        outputs = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=False)
        completions = [[o.text for o in out.outputs] for out in outputs]
        lengths = [[len(o.token_ids) for o in out.outputs] for out in outputs]
        finished = [[o.finish_reason == "stop" for o in out.outputs] for out in outputs]
        return Chunk(completions, lengths, finished, None, sum(map(sum, lengths)))


def max_new_tokens_of(settings: EvalSettings, model: Any) -> int:
    """The generation budget: ``settings.max_new_tokens``, else the model's ``generation_config.max_new_tokens``,
    else 1024."""
    if settings.max_new_tokens is not None:
        return settings.max_new_tokens
    generation = getattr(model, "generation_config", None)
    value = getattr(generation, "max_new_tokens", None) if generation is not None else None
    return int(value) if value else 1024
