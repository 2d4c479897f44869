"""Sampling backends, transformers or vLLM: ``settings.k`` completions of up to :func:`max_new_tokens_of` tokens for
each prompt of a batch. A sampler is any callable ``sampler(prompts, add_special_tokens, seed) -> Samples``
(:class:`bandpo_lab.eval.sampling.Samples`; ``entropy`` ``None``: unknown): ``prompts`` the formatted prompts of
one batch, ``add_special_tokens`` False after a chat template, ``seed`` the batch's sampling seed (``None``:
unseeded).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bandpo_lab.eval.errors import EvalError
from bandpo_lab.runtime import Precision, precision_for, weight_dtypes

VLLM_MISSING = (
    "backend 'vllm' (--vllm) needs vLLM installed (pip install vllm); drop --vllm to sample with transformers"
)

if TYPE_CHECKING:
    from bandpo_lab.eval.sampling import Samples
    from bandpo_lab.eval.settings import EvalSettings


class TransformersSampler:
    """transformers sampling with the sampling entropy (:func:`bandpo_lab.eval.sampling.generate_samples`)."""

    def __init__(self, model: Any, tokenizer: Any, settings: EvalSettings) -> None:
        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.precision: Precision | None = None  # resolved at the first call

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> Samples:
        from bandpo_lab.eval.sampling import generate_samples

        if self.precision is None:
            dtypes = ", ".join(weight_dtypes(self.model)) or "float32"
            self.precision = precision_for(
                self.settings.precision,
                self.model,
                gpu_reason=f"no autocast: sampling in the weights' {dtypes}",
            )
        return generate_samples(
            self.model,
            self.tokenizer,
            prompts,
            k=self.settings.k,
            temperature=float(self.settings.temperature),
            max_new_tokens=max_new_tokens_of(self.settings),
            batch_size=len(prompts),
            seed=seed,
            add_special_tokens=add_special_tokens,
            precision=self.precision,
        )


class VLLMSampler:
    """vLLM sampling (no entropy: vLLM does not return the distributions), of prompts tokenized here as the
    transformers path tokenizes them; ``tokenizer_dir``: where the tokenizer files are (default ``model_dir``)."""

    def __init__(
        self,
        model_dir: Path,
        tokenizer: Any,
        settings: EvalSettings,
        dtype: str,
        tokenizer_dir: Path | None = None,
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as err:
            raise EvalError(VLLM_MISSING) from err
        self.tokenizer, self.settings = tokenizer, settings
        self.llm = LLM(
            model=str(model_dir),
            tokenizer=str(tokenizer_dir or model_dir),
            dtype=dtype,
            seed=settings.seed or 0,
        )

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> Samples:
        from vllm import SamplingParams

        from bandpo_lab.eval.sampling import Samples

        params = SamplingParams(
            n=self.settings.k,
            temperature=float(self.settings.temperature),
            top_p=1.0,
            max_tokens=max_new_tokens_of(self.settings),
            seed=seed,
        )
        ids = self.tokenizer(prompts, add_special_tokens=add_special_tokens)["input_ids"]
        outputs = self.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=False)
        completions = [[o.text for o in out.outputs] for out in outputs]
        token_ids = [[list(o.token_ids) for o in out.outputs] for out in outputs]
        lengths = [[len(ids) for ids in row] for row in token_ids]
        finished = [[o.finish_reason == "stop" for o in out.outputs] for out in outputs]
        return Samples(completions, token_ids, lengths, finished, None)


def max_new_tokens_of(settings: EvalSettings, generation_config: Any = None) -> int:
    """The generation budget: ``settings.max_new_tokens``, else ``generation_config.max_new_tokens``, else 1024."""
    return int(settings.max_new_tokens or getattr(generation_config, "max_new_tokens", None) or 1024)
