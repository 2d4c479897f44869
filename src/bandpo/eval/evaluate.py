"""Evaluate a model: sample ``k`` answers per problem and report mean@k, pass@k, best@k and maj@k.

The engine behind ``bandpo eval`` and the final / held-out evaluations of ``bandpo compare``::

    from bandpo.eval.evaluate import EvalSettings, evaluate_model_dir, load_eval_dataset
    data = load_eval_dataset("countdown")                                  # the task's test split
    data = load_eval_dataset("aime.jsonl", verifier="dapo", answer_column="solution")
    results = evaluate_model_dir("runs/tiny", [data], EvalSettings(k=32, ks=(1, 4, 32)))
    results["overall"]["mean@32"], results["datasets"]["aime"]["pass@4"]

Datasets (:func:`load_eval_dataset`) are a built-in task's split (``countdown``: the puzzles of
``bandpo.tasks.countdown``, scored by the task's own verifier) or local JSONL / JSON / parquet files (a file or a
directory of ``<split>*.<ext>`` files) scored by a verifier of :data:`bandpo.rewards.VERIFIERS` (``dapo``: the
last ``Answer:`` line; ``boxed``: the last ``\\boxed{}``). Prompts are formatted as in training
(:func:`bandpo.training.data.build_prompt_dataset`: prompt template, system prompt, the tokenizer's chat template
when it has one).

Scoring never crashes on bad answers: a ground truth the verifier cannot parse (empty after normalisation, not a
string/number, missing) takes its problem out of the metrics and is counted in ``n_unparsed_ground_truth``; a
sampled answer the verifier cannot extract counts in ``n_unparsed`` (and does not vote in maj@k).

Metrics (:mod:`bandpo.eval.metrics`, docs/method.md#metrics), per dataset and overall (all problems pooled, each problem
weighing the same): ``mean@k`` (per-problem accuracy of the ``k`` samples), ``pass@j`` (unbiased, for every ``j`` in
``ks``), ``best@k`` (the authors' bootstrap: 1000 resamples of ``k`` with replacement), ``maj@k`` (majority vote of
the extracted answers), plus the sampling entropy (nats per generated token), mean completion length and the share
of completions cut by ``max_new_tokens``.

Sampling uses plain transformers ``generate`` (:func:`bandpo.eval.sampling.generate_samples`), batched, with a
progress bar and ETA; with ``backend="vllm"`` (``bandpo eval --vllm``) it uses vLLM when installed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BACKENDS",
    "EvalDataset",
    "EvalError",
    "EvalSettings",
    "check_model_dir",
    "default_ks",
    "evaluate_model",
    "evaluate_model_dir",
    "format_table",
    "load_eval_dataset",
    "load_model",
    "parse_ks",
    "task_options_of_run",
    "verifier_names",
]

BACKENDS = ("transformers", "vllm")
"""Sampling backends: plain transformers ``generate``, or vLLM (``pip install vllm``)."""

WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class EvalError(ValueError):
    """Bad evaluation input (model directory, dataset, columns, settings), found before sampling."""


# -------------------------------------------------------------------------------------------------- scorers
Scorer = Callable[[str, str, Any], "tuple[bool, str | None]"]
"""``score(raw_prompt, completion, ground_truth) -> (correct, extracted answer or None)``."""


def _countdown_score(prompt: str, completion: str, ground_truth: Any) -> tuple[bool, str | None]:
    """The countdown task's verifier: correct iff the expression solves the puzzle; the answer (for maj@k) is the
    expression with whitespace removed, ``None`` when it does not parse."""
    from bandpo.tasks.countdown import countdown_reward, parse_expression

    correct = countdown_reward(prompt, completion) > 0
    text = completion.strip()
    try:
        parse_expression(text)
    except ValueError:
        return correct, None
    return correct, "".join(text.split())


def _countdown_check(prompt: str, ground_truth: Any) -> None:
    from bandpo.tasks.countdown import parse_prompt

    parse_prompt(prompt)


# Verifiers that read the prompt instead of a ground truth (tasks whose problems define their own answer).
_TASK_SCORERS: dict[str, tuple[Scorer, Callable[[str, Any], None]]] = {
    "countdown": (_countdown_score, _countdown_check),
}


def verifier_names() -> list[str]:
    """Valid ``verifier`` names: the registered answer verifiers (``dapo``, ``boxed``, ...) and the task verifiers
    (``countdown``)."""
    from bandpo.rewards import VERIFIERS

    return [*VERIFIERS.names(), *[n for n in _TASK_SCORERS if n not in VERIFIERS]]


def _scorer(name: str) -> tuple[Scorer, Callable[[str, Any], None]]:
    """``(score, check_ground_truth)`` of verifier ``name``; ``check`` raises on a ground truth it cannot use."""
    from bandpo.rewards import VERIFIERS

    if name in _TASK_SCORERS:
        return _TASK_SCORERS[name]
    if name not in VERIFIERS:
        raise EvalError(f"verifier must be one of {', '.join(verifier_names())}, got {name!r}")
    verify = VERIFIERS.get(name)

    def score(prompt: str, completion: str, ground_truth: Any) -> tuple[bool, str | None]:
        result = verify(completion, ground_truth)
        return bool(result.correct), result.answer

    def check(prompt: str, ground_truth: Any) -> None:
        if ground_truth is None:
            raise ValueError("no ground truth")
        verify("", ground_truth)  # normalises the ground truth first: raises when it cannot be parsed

    return score, check


# -------------------------------------------------------------------------------------------------- datasets
@dataclass
class EvalDataset:
    """Problems to evaluate on.

    Attributes:
        name: display name (``countdown/test``, or the file stem).
        source: where the problems came from (task and split, or file paths).
        verifier: the verifier name (:func:`verifier_names`).
        problems: one dict per problem: ``prompt`` (a string or chat messages, unformatted), ``answer`` (the ground
            truth, ``None`` when the row has none).
        task: the built-in task name, or ``None`` for files.
        prompt_template, system_prompt, chat_template: prompt formatting, as the training config's ``data:``.
    """

    name: str
    source: str
    verifier: str
    problems: list[dict[str, Any]]
    task: str | None = None
    prompt_template: str | None = None
    system_prompt: str | None = None
    chat_template: str = "auto"


def _translate(err: Exception) -> EvalError:
    """A training-data ``ConfigError`` in the words of the eval options (``data.path`` -> ``dataset``)."""
    text = str(err)
    for old, new in (("data.path", "dataset"), ("data.split", "split"), ("data.format", "data_format")):
        text = text.replace(old, new)
    return EvalError(text)


def load_eval_dataset(
    spec: str,
    *,
    split: str = "test",
    verifier: str | None = None,
    prompt_column: str = "prompt",
    answer_column: str = "answer",
    task_options: Mapping[str, Any] | None = None,
    max_problems: int | None = None,
    data_format: str = "auto",
    prompt_template: str | None = None,
    system_prompt: str | None = None,
    chat_template: str = "auto",
    name: str | None = None,
) -> EvalDataset:
    """Load the problems of a built-in task split or of local JSONL / JSON / parquet files.

    Args:
        spec: a built-in task name (``countdown``) or a path: a file, or a directory holding ``<split>.<ext>`` /
            ``<split>-*.<ext>`` files (also under ``data/``).
        split: the task split (``train`` / ``test``), or the file-name prefix inside a directory.
        verifier: :func:`verifier_names`; default: the task's own (``countdown``) or ``dapo`` for files.
        prompt_column, answer_column: columns of the files (dots read nested dicts: ``reward_model.ground_truth``).
            Rows without an answer are kept and counted as unparsed ground truths.
        task_options: options of the task (countdown: ``CountdownConfig`` fields); they must match the training
            run's for its test split.
        max_problems: keep the first ``max_problems`` problems (``None``: all).
        data_format: ``auto`` (by suffix), ``jsonl``, ``json`` or ``parquet``.
        prompt_template, system_prompt, chat_template: prompt formatting, as in the training config's ``data:``.
        name: display name (default: ``<task>/<split>`` or the file / directory stem).

    Raises:
        EvalError: unknown verifier, missing file or column (naming the columns there), a row without a prompt,
            invalid ``max_problems``.
    """
    from bandpo.training.config import ConfigError, DataConfig
    from bandpo.training.data import MISSING, lookup_column, read_records, resolve_data_files
    from bandpo.training.tasks import TASKS

    if max_problems is not None and (
        not isinstance(max_problems, int) or isinstance(max_problems, bool) or max_problems < 1
    ):
        raise EvalError(f"max_problems must be an integer >= 1 or None, got {max_problems!r}")
    if not isinstance(spec, str) or not spec.strip():
        raise EvalError(
            f"dataset must be a task name ({', '.join(TASKS.names())}) or a file path, got {spec!r}"
        )
    is_task = spec in TASKS and not Path(spec).exists()
    if is_task:
        task = TASKS.get(spec)
        verifier = verifier or task.default_reward
        if split not in task.splits:
            raise EvalError(f"split must be one of {', '.join(task.splits)} for task {spec!r}, got {split!r}")
        try:
            options = task.options(dict(task_options or {}))
        except (TypeError, ValueError) as err:
            raise EvalError(f"task_options for task {spec!r}: {err}") from err
        rows = task.build_split(options, split)
        problems = [{"prompt": r["prompt"], "answer": r.get("answer")} for r in rows]
        source = f"task {spec!r} split {split!r}"
        display = name or f"{spec}/{split}"
    else:
        if task_options:
            raise EvalError(
                f"task_options apply to a built-in task ({', '.join(TASKS.names())}), not to {spec!r}"
            )
        verifier = verifier or "dapo"
        try:
            cfg = DataConfig(path=spec, split=split, format=data_format)
            files = resolve_data_files(cfg)
            sources = [(f, read_records(f, data_format)) for f in files]
        except ConfigError as err:
            raise _translate(err) from err
        problems = []
        for path, rows in sources:
            if not rows:
                raise EvalError(f"dataset file {str(path)!r} has no rows")
            if lookup_column(rows[0], prompt_column) is MISSING:
                raise EvalError(
                    f"prompt_column={prompt_column!r} is not a column of {str(path)!r}; its columns: "
                    f"{', '.join(map(str, rows[0]))}"
                )
            if lookup_column(rows[0], answer_column) is MISSING and verifier not in _TASK_SCORERS:
                raise EvalError(
                    f"answer_column={answer_column!r} is not a column of {str(path)!r}; its columns: "
                    f"{', '.join(map(str, rows[0]))}"
                )
            for index, row in enumerate(rows):
                prompt = lookup_column(row, prompt_column)
                ok = isinstance(prompt, str) and prompt.strip()
                ok = ok or (
                    isinstance(prompt, list)
                    and prompt
                    and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in prompt)
                )
                if not ok:
                    raise EvalError(
                        f"row {index} of {str(path)!r}: prompt_column {prompt_column!r} must hold a non-empty "
                        f"string or a list of chat messages with 'role' and 'content', got {prompt!r}"[:400]
                    )
                answer = lookup_column(row, answer_column)
                problems.append({"prompt": prompt, "answer": None if answer is MISSING else answer})
        source = ", ".join(str(p) for p, _ in sources)
        display = name or Path(spec.rstrip("/")).stem
    _scorer(verifier)  # unknown names raise now, before any model loads
    if max_problems is not None:
        problems = problems[:max_problems]
    if not problems:
        raise EvalError(f"dataset {spec!r} has no problems")
    return EvalDataset(
        name=display,
        source=source,
        verifier=verifier,
        problems=problems,
        task=spec if is_task else None,
        prompt_template=prompt_template,
        system_prompt=system_prompt,
        chat_template=chat_template,
    )


def task_options_of_run(model_dir: str | Path, task: str) -> dict[str, Any] | None:
    """The ``data.task_options`` a training run used, read from ``train_config.yaml`` in ``model_dir`` or its
    parent (a ``checkpoint-N`` directory), when that run trained on ``task``; ``None`` otherwise."""
    import yaml

    for folder in (Path(model_dir), Path(model_dir).parent):
        path = folder / "train_config.yaml"
        if path.is_file():
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except yaml.YAMLError:
                return None
            section = data.get("data") or {}
            if section.get("task") == task:
                return dict(section.get("task_options") or {})
            return None
    return None


# ---------------------------------------------------------------------------------------------------- model
def check_model_dir(path: str | Path) -> tuple[Path, Path]:
    """Check that ``path`` is a transformers model directory; returns ``(model_dir, tokenizer_dir)``.

    A checkpoint without tokenizer files uses its parent's (the run directory) when that has them.

    Raises:
        EvalError: the path does not exist, is a file, has no ``config.json`` (a run directory with only
            ``checkpoint-*`` folders names the last one), no weights, or no tokenizer; the message names the path and
            what is missing.
    """
    p = Path(os.path.expandvars(str(path))).expanduser()
    if not p.exists():
        raise EvalError(f"model directory {str(path)!r} does not exist (relative to {Path.cwd()})")
    if not p.is_dir():
        raise EvalError(
            f"model {str(path)!r} is a file; expected a model directory (config.json, weights, tokenizer)"
        )
    names = sorted(c.name for c in p.iterdir())
    if "config.json" not in names:
        checkpoints = sorted(
            (c for c in p.glob("checkpoint-*") if c.is_dir() and c.name.split("-")[-1].isdigit()),
            key=lambda c: int(c.name.split("-")[-1]),
        )
        hint = (
            f"; it holds training checkpoints: pass one of them, e.g. {str(checkpoints[-1])!r}"
            if checkpoints
            else f"; it holds: {', '.join(names[:20]) or 'nothing'}"
        )
        raise EvalError(f"model directory {str(path)!r} is not a model: config.json is missing{hint}")
    try:
        json.loads((p / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise EvalError(f"model directory {str(path)!r}: config.json is not valid JSON ({err})") from err
    if not any(n in names for n in WEIGHT_FILES) and not any(n.endswith(".safetensors") for n in names):
        raise EvalError(
            f"model directory {str(path)!r} is not a model: it has config.json but no weights (looked for "
            f"{', '.join(WEIGHT_FILES)}); it holds: {', '.join(names[:20])}"
        )
    tokenizer_dir = p
    if not any(n in names for n in TOKENIZER_FILES):
        parent = p.parent
        if any((parent / n).is_file() for n in TOKENIZER_FILES):
            tokenizer_dir = parent
        else:
            raise EvalError(
                f"model directory {str(path)!r} has no tokenizer (looked for {', '.join(TOKENIZER_FILES)} there and "
                f"in {str(parent)!r}); save the tokenizer with the model"
            )
    return p, tokenizer_dir


def load_model(path: str | Path, device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a checked model directory (:func:`check_model_dir`), model in eval mode.

    Args:
        device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``, ...
        dtype: ``auto`` (the checkpoint's), ``float32``, ``bfloat16`` or ``float16``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, tokenizer_dir = check_model_dir(path)
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise EvalError(f"dtype must be one of auto, float32, bfloat16, float16, got {dtype!r}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype="auto" if dtype == "auto" else getattr(torch, dtype)
        )
    except (OSError, ValueError, KeyError) as err:
        raise EvalError(f"model directory {str(path)!r} could not be loaded as a causal LM: {err}") from err
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer


# ------------------------------------------------------------------------------------------------- settings
def default_ks(k: int) -> tuple[int, ...]:
    """``(1, 4, k)`` restricted to values <= ``k``."""
    return tuple(sorted({j for j in (1, 4, k) if j <= k}))


def parse_ks(text: str | Sequence[int] | None, k: int) -> tuple[int, ...]:
    """pass@k values from ``"1,4,32"`` (``"k"`` stands for ``k``) or a sequence; ``None``: :func:`default_ks`.

    Raises:
        EvalError: a non-integer entry, an entry < 1, or an entry larger than ``k`` (the number of samples per
            problem: pass@j needs j <= samples).
    """
    if text is None:
        return default_ks(k)
    items = [s.strip() for s in text.split(",") if s.strip()] if isinstance(text, str) else list(text)
    out = []
    for item in items:
        value = k if item == "k" else item
        try:
            if isinstance(value, bool):
                raise ValueError
            number = int(value)
            if isinstance(value, float) or (isinstance(value, str) and str(number) != value.strip()):
                raise ValueError
        except (TypeError, ValueError):
            raise EvalError(f"ks entries must be integers >= 1 (or 'k'), got {item!r} in {text!r}") from None
        if number < 1:
            raise EvalError(f"ks entries must be integers >= 1, got {number} in {text!r}")
        if number > k:
            raise EvalError(
                f"ks entry {number} is larger than k={k}, the number of samples per problem: pass@j needs j <= the "
                f"number of samples; sample more (k >= {number}) or drop it"
            )
        out.append(number)
    if not out:
        raise EvalError(f"ks must hold at least one integer, got {text!r}")
    return tuple(sorted(set(out)))


@dataclass
class EvalSettings:
    """How to sample and score.

    Args:
        k: samples per problem (>= 1); mean@k, best@k and maj@k use all of them.
        ks: the pass@j values to report, each in [1, k] (``None``: ``(1, 4, k)`` up to ``k``).
        temperature: sampling temperature >= 0 (0: greedy; the authors evaluate at 1.0).
        max_new_tokens: generation budget per sample (``None``: the model's ``generation_config.max_new_tokens``,
            else 1024).
        batch_size: prompts per generate call (``batch_size * k`` sequences).
        seed: sampling seed (``None``: unseeded).
        n_bootstrap: resamples of best@k (the authors: 1000).
        backend: one of :data:`BACKENDS`.
        progress: show a progress bar with ETA.
    """

    k: int = 32
    ks: tuple[int, ...] | None = None
    temperature: float = 1.0
    max_new_tokens: int | None = None
    batch_size: int = 64
    seed: int | None = 0
    n_bootstrap: int = 1000
    backend: str = "transformers"
    progress: bool = True

    def __post_init__(self) -> None:
        def positive_int(name: str, value: object) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise EvalError(f"{name} must be an integer >= 1, got {value!r}")

        positive_int("k", self.k)
        self.ks = parse_ks(self.ks, self.k)
        t = self.temperature
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
            raise EvalError(f"temperature must be a finite number >= 0 (0: greedy), got {t!r}")
        if self.max_new_tokens is not None:
            positive_int("max_new_tokens", self.max_new_tokens)
        positive_int("batch_size", self.batch_size)
        positive_int("n_bootstrap", self.n_bootstrap)
        if self.seed is not None and (
            not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0
        ):
            raise EvalError(f"seed must be an integer >= 0 or None, got {self.seed!r}")
        if self.backend not in BACKENDS:
            raise EvalError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")


# ---------------------------------------------------------------------------------------------------- prompts
def _prompt_texts(dataset: EvalDataset, tokenizer: Any) -> tuple[list[str], bool]:
    """The formatted prompt strings of ``dataset`` and whether they are chat-templated (then the template has
    added any special tokens already)."""
    from bandpo.training.config import ConfigError, DataConfig
    from bandpo.training.data import build_prompt_dataset, has_chat_template

    try:
        cfg = DataConfig(
            task=dataset.task,
            path=None if dataset.task else "<eval>",
            prompt_template=dataset.prompt_template,
            system_prompt=dataset.system_prompt,
            chat_template=dataset.chat_template,
        )
        formatted = build_prompt_dataset([{"prompt": p["prompt"]} for p in dataset.problems], cfg, tokenizer)
    except ConfigError as err:
        raise _translate(err) from err
    chat = has_chat_template(tokenizer) and dataset.chat_template != "never"
    texts = []
    for row in formatted["prompt"]:
        if isinstance(row, str):
            texts.append(row)
        else:
            texts.append(tokenizer.apply_chat_template(row, tokenize=False, add_generation_prompt=True))
    return texts, chat


def _raw_prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    return str((users or prompt)[-1].get("content", ""))


# --------------------------------------------------------------------------------------------------- sampling
@dataclass
class _Chunk:
    completions: list[list[str]]
    lengths: list[list[int]]
    finished: list[list[bool]]
    entropy: float | None
    n_tokens: int


class _TransformersSampler:
    def __init__(self, model: Any, tokenizer: Any, settings: EvalSettings, max_new_tokens: int) -> None:
        self.model, self.tokenizer, self.settings, self.max_new_tokens = (
            model,
            tokenizer,
            settings,
            max_new_tokens,
        )

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> _Chunk:
        from bandpo.eval.sampling import generate_samples

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
        )
        return _Chunk(s.completions, s.lengths, s.finished, s.entropy, sum(map(sum, s.lengths)))


class _VLLMSampler:
    """vLLM sampling (no entropy: vLLM does not return the full distributions). Prompts are tokenized here, with
    or without special tokens as the transformers path does, and passed to vLLM as token ids."""

    def __init__(
        self, model_dir: Path, tokenizer: Any, settings: EvalSettings, max_new_tokens: int, dtype: str
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as err:
            raise EvalError(
                "backend 'vllm' (--vllm) needs vLLM installed (pip install vllm); drop --vllm to sample with "
                "transformers"
            ) from err
        self.tokenizer, self.settings, self.max_new_tokens = tokenizer, settings, max_new_tokens
        self.llm = LLM(model=str(model_dir), tokenizer=str(model_dir), dtype=dtype, seed=settings.seed or 0)

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> _Chunk:
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
        return _Chunk(completions, lengths, finished, None, sum(map(sum, lengths)))


def _max_new_tokens(settings: EvalSettings, model: Any) -> int:
    if settings.max_new_tokens is not None:
        return settings.max_new_tokens
    generation = getattr(model, "generation_config", None)
    value = getattr(generation, "max_new_tokens", None) if generation is not None else None
    return int(value) if value else 1024


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass
class _Scored:
    problems: list[dict[str, Any]] = field(default_factory=list)  # {"correct": [...], "answers": [...]}
    records: list[dict[str, Any]] = field(default_factory=list)
    n_unparsed_ground_truth: int = 0
    entropy_sum: float = 0.0
    entropy_tokens: int = 0
    lengths: list[int] = field(default_factory=list)
    n_truncated: int = 0


def _summary(scored: _Scored, settings: EvalSettings) -> dict[str, Any]:
    from bandpo.eval.metrics import summarize

    out: dict[str, Any] = {}
    if scored.problems:
        out.update(
            summarize(
                scored.problems,
                ks=settings.ks or (1,),
                best_ks=[settings.k],
                maj_ks=[settings.k],
                n_bootstrap=settings.n_bootstrap,
                seed=settings.seed or 0,
            )
        )
    else:
        out.update({"n_problems": 0, "n_samples": 0, "n_unparsed": 0})
    out["n_unparsed_ground_truth"] = scored.n_unparsed_ground_truth
    out["entropy"] = scored.entropy_sum / scored.entropy_tokens if scored.entropy_tokens else None
    out["mean_length"] = sum(scored.lengths) / len(scored.lengths) if scored.lengths else None
    out["truncated_frac"] = scored.n_truncated / len(scored.lengths) if scored.lengths else None
    return out


def _merge(parts: Sequence[_Scored]) -> _Scored:
    total = _Scored()
    for part in parts:
        total.problems.extend(part.problems)
        total.n_unparsed_ground_truth += part.n_unparsed_ground_truth
        total.entropy_sum += part.entropy_sum
        total.entropy_tokens += part.entropy_tokens
        total.lengths.extend(part.lengths)
        total.n_truncated += part.n_truncated
    return total


def evaluate_model(
    model: Any,
    tokenizer: Any,
    datasets: Sequence[EvalDataset],
    settings: EvalSettings | None = None,
    *,
    keep_samples: bool = False,
    sampler: Callable[[list[str], bool, int | None], Any] | None = None,
) -> dict[str, Any]:
    """Sample ``settings.k`` answers per problem of every dataset, score them and summarize.

    Args:
        model, tokenizer: a causal LM and its tokenizer (the model's train/eval mode is restored afterwards).
        datasets: from :func:`load_eval_dataset`; names must be distinct.
        settings: sampling and metric settings (default :class:`EvalSettings`).
        keep_samples: also return every completion with its correctness and extracted answer (``"samples"``).
        sampler: replaces the transformers sampler (the vLLM backend passes its own).

    Returns:
        ``{"settings": {...}, "datasets": {name: metrics}, "overall": metrics, "wall_time_s": float}`` and, with
        ``keep_samples``, ``"samples": [{"dataset", "index", "prompt", "answer", "completions", "correct",
        "answers"}, ...]``. ``metrics`` holds ``n_problems`` (scored problems), ``n_samples``, ``mean@k``,
        ``pass@j`` for ``j`` in ``ks``, ``best@k``, ``maj@k``, ``n_unparsed`` (samples without an extractable
        answer), ``n_unparsed_ground_truth`` (problems left out: ground truth unusable), ``entropy``,
        ``mean_length``, ``truncated_frac``; a dataset with no scorable problem has only the counts.
    """
    from tqdm.auto import tqdm

    settings = settings or EvalSettings()
    if not datasets:
        raise EvalError("datasets must hold at least one dataset, got none")
    names = [d.name for d in datasets]
    if len(set(names)) != len(names):
        raise EvalError(f"dataset names must be distinct, got {names}")
    max_new = _max_new_tokens(settings, model)
    sample = sampler or _TransformersSampler(model, tokenizer, settings, max_new)
    start_time = time.perf_counter()

    plans = []  # (dataset, scorer, usable indices, texts, add_special_tokens)
    for d in datasets:
        score, check = _scorer(d.verifier)
        usable = []
        for i, problem in enumerate(d.problems):
            try:
                check(_raw_prompt_text(problem["prompt"]), problem.get("answer"))
            except (TypeError, ValueError):
                continue
            usable.append(i)
        texts, chat = _prompt_texts(d, tokenizer) if usable else ([], False)
        plans.append((d, score, usable, texts, not chat))

    total = sum(len(p[2]) for p in plans) * settings.k
    results: dict[str, _Scored] = {}
    samples: list[dict[str, Any]] = []
    chunk_index = 0
    with tqdm(
        total=total, unit="sample", desc="eval", disable=not settings.progress, dynamic_ncols=True
    ) as bar:
        for d, score, usable, texts, add_special in plans:
            scored = _Scored(n_unparsed_ground_truth=len(d.problems) - len(usable))
            bar.set_postfix_str(d.name)
            for start in range(0, len(usable), settings.batch_size):
                idx = usable[start : start + settings.batch_size]
                seed = None if settings.seed is None else settings.seed + chunk_index
                chunk_index += 1
                out = sample([texts[i] for i in idx], add_special, seed)
                for j, i in enumerate(idx):
                    problem = d.problems[i]
                    raw = _raw_prompt_text(problem["prompt"])
                    pairs = [score(raw, c, problem.get("answer")) for c in out.completions[j]]
                    correct = [1.0 if ok else 0.0 for ok, _ in pairs]
                    answers = [a for _, a in pairs]
                    scored.problems.append({"correct": correct, "answers": answers})
                    if keep_samples:
                        samples.append(
                            {
                                "dataset": d.name,
                                "index": i,
                                "prompt": texts[i],
                                "answer": problem.get("answer"),
                                "completions": out.completions[j],
                                "correct": [bool(c) for c in correct],
                                "answers": answers,
                            }
                        )
                    scored.lengths.extend(out.lengths[j])
                    scored.n_truncated += sum(not f for f in out.finished[j])
                if out.entropy is not None:
                    scored.entropy_sum += out.entropy * out.n_tokens
                    scored.entropy_tokens += out.n_tokens
                bar.update(len(idx) * settings.k)
            results[d.name] = scored

    report: dict[str, Any] = {
        "settings": {
            **{k: v for k, v in asdict(settings).items() if k != "progress"},
            "ks": list(settings.ks or ()),
            "max_new_tokens": max_new,
        },
        "datasets": {
            d.name: {"source": d.source, "verifier": d.verifier, **_summary(results[d.name], settings)}
            for d in datasets
        },
        "overall": _summary(_merge(list(results.values())), settings),
        "wall_time_s": round(time.perf_counter() - start_time, 3),
    }
    if keep_samples:
        report["samples"] = samples
    return report


def evaluate_model_dir(
    model_dir: str | Path,
    datasets: Sequence[EvalDataset],
    settings: EvalSettings | None = None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    keep_samples: bool = False,
) -> dict[str, Any]:
    """:func:`evaluate_model` on the model saved in ``model_dir`` (checked by :func:`check_model_dir` first);
    the result also holds ``"model": str(model_dir)``."""
    settings = settings or EvalSettings()
    model_path, tokenizer_dir = check_model_dir(model_dir)
    if (
        settings.backend == "vllm"
    ):  # vLLM loads the weights itself: only the tokenizer and generation config here
        from transformers import AutoTokenizer, GenerationConfig

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        max_new = settings.max_new_tokens
        if max_new is None:
            try:
                max_new = GenerationConfig.from_pretrained(str(model_path)).max_new_tokens
            except OSError:
                max_new = None
        settings = dataclasses.replace(settings, max_new_tokens=int(max_new or 1024))
        sampler = _VLLMSampler(model_path, tokenizer, settings, settings.max_new_tokens, dtype)
        out = evaluate_model(None, tokenizer, datasets, settings, keep_samples=keep_samples, sampler=sampler)
    else:
        model, tokenizer = load_model(model_path, device=device, dtype=dtype)
        out = evaluate_model(model, tokenizer, datasets, settings, keep_samples=keep_samples)
    return {"model": str(model_dir), **out}


# ------------------------------------------------------------------------------------------------------ table
def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}"


def format_table(results: Mapping[str, Any]) -> str:
    """A plain-text table of :func:`evaluate_model`'s result: one row per dataset and ``overall``; accuracies in
    percent."""
    k = results["settings"]["k"]
    ks = results["settings"]["ks"]
    metric_cols = [f"mean@{k}", *[f"pass@{j}" for j in ks], f"best@{k}", f"maj@{k}"]
    header = ["dataset", "problems", *metric_cols, "unparsed", "bad gt", "entropy"]
    rows = []
    items = list(results["datasets"].items())
    if len(items) > 1:
        items.append(("overall", results["overall"]))
    for name, m in items:
        rows.append(
            [
                name,
                str(m.get("n_problems", 0)),
                *[_pct(m.get(c)) for c in metric_cols],
                str(m.get("n_unparsed", 0)),
                str(m.get("n_unparsed_ground_truth", 0)),
                "-" if m.get("entropy") is None else f"{m['entropy']:.3f}",
            ]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]
    out.append(
        f"(accuracies in %; k={k} samples per problem at temperature {results['settings']['temperature']:g})"
    )
    return "\n".join(out)
