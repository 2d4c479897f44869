"""Evaluate a model: sample ``k`` answers per problem, score them and report mean@k, pass@k, best@k and maj@k per
dataset and overall, with a progress bar (the engine of ``bandpo eval`` and ``bandpo compare``'s evaluations;
docs/trl.md#evaluation-and-comparison shows its use from Python).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bandpo_lab.eval.backends import TransformersSampler, VLLMSampler, max_new_tokens_of
from bandpo_lab.eval.datasets import EvalDataset, prompt_texts, raw_prompt_text
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.eval.models import ATTENTION_AUTO, check_model_dir, load_model, loaded_attention
from bandpo_lab.eval.scorers import get_scorer
from bandpo_lab.eval.settings import EvalSettings


@dataclass
class _Scored:
    problems: list[dict[str, Any]] = field(default_factory=list)  # {"correct": [...], "answers": [...]}
    n_unparsed_ground_truth: int = 0
    entropy_sum: float = 0.0
    entropy_tokens: int = 0
    lengths: list[int] = field(default_factory=list)
    n_truncated: int = 0


def _summary(parts: Sequence[_Scored], settings: EvalSettings) -> dict[str, Any]:
    """The metrics of ``parts`` pooled: one dataset's, or all of them (``overall``)."""
    from bandpo_lab.eval.metrics import summarize

    problems = [p for part in parts for p in part.problems]
    lengths = [n for part in parts for n in part.lengths]
    tokens = sum(part.entropy_tokens for part in parts)
    out: dict[str, Any] = {"n_problems": 0, "n_samples": 0, "n_unparsed": 0}
    if problems:
        out = dict(
            summarize(
                problems,
                ks=settings.ks or (1,),
                k=settings.k,
                n_bootstrap=settings.n_bootstrap,
                seed=settings.seed or 0,
            )
        )
    out["n_unparsed_ground_truth"] = sum(part.n_unparsed_ground_truth for part in parts)
    out["entropy"] = sum(part.entropy_sum for part in parts) / tokens if tokens else None
    out["mean_length"] = sum(lengths) / len(lengths) if lengths else None
    out["truncated_frac"] = sum(part.n_truncated for part in parts) / len(lengths) if lengths else None
    return out


def evaluate_model(
    model: Any,
    tokenizer: Any,
    datasets: Sequence[EvalDataset],
    settings: EvalSettings | None = None,
    *,
    keep_samples: bool = False,
    sampler: Callable[[list[str], bool, int | None], Any] | None = None,
) -> dict[str, Any]:
    """Sample ``settings.k`` answers per problem of every dataset (distinct names), score them and summarize.

    ``sampler`` replaces the transformers sampler (:mod:`bandpo_lab.eval.backends`). A problem whose ground truth
    the verifier cannot parse is left out (``n_unparsed_ground_truth``); a sample without an extractable answer
    counts in ``n_unparsed``.

    Returns:
        ``{"settings", "datasets": {name: metrics}, "overall": metrics, "wall_time_s"}`` (metrics as ``bandpo eval
        --help`` lists them; a dataset with no scorable problem has only the counts) and, with ``keep_samples``,
        ``"samples": [{"dataset", "index", "prompt", "answer", "completions", "correct", "answers"}, ...]``.
    """
    from tqdm.auto import tqdm

    settings = settings or EvalSettings()
    if not datasets:
        raise EvalError("datasets must hold at least one dataset, got none")
    names = [d.name for d in datasets]
    if len(set(names)) != len(names):
        raise EvalError(f"dataset names must be distinct, got {names}")
    generation = getattr(model, "generation_config", None)
    settings = dataclasses.replace(settings, max_new_tokens=max_new_tokens_of(settings, generation))
    sample = sampler or TransformersSampler(model, tokenizer, settings)
    start_time = time.perf_counter()

    plans = []  # (dataset, scorer, usable indices, texts, add_special_tokens)
    for d in datasets:
        score, check = get_scorer(d.verifier)
        usable = []
        for i, problem in enumerate(d.problems):
            try:
                check(raw_prompt_text(problem["prompt"]), problem.get("answer"))
            except (TypeError, ValueError):
                continue
            usable.append(i)
        texts, chat = prompt_texts(d, tokenizer) if usable else ([], False)
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
                    raw = raw_prompt_text(problem["prompt"])
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
                    n_tokens = sum(map(sum, out.lengths))
                    scored.entropy_sum += out.entropy * n_tokens
                    scored.entropy_tokens += n_tokens
                bar.update(len(idx) * settings.k)
            results[d.name] = scored

    recorded = {k: v for k, v in asdict(settings).items() if k != "progress"}
    recorded["ks"] = list(settings.ks or ())
    if getattr(sample, "precision", None) is not None:
        recorded["precision_resolved"] = sample.precision.record()
    attention = loaded_attention(model)  # None without a transformers model (the vLLM backend)
    if attention is not None:
        recorded["attn_implementation"] = attention
    report: dict[str, Any] = {
        "settings": recorded,
        "datasets": {
            d.name: {"source": d.source, "verifier": d.verifier, **_summary([results[d.name]], settings)}
            for d in datasets
        },
        "overall": _summary(list(results.values()), settings),
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
    attn_implementation: str | None = ATTENTION_AUTO,
    keep_samples: bool = False,
) -> dict[str, Any]:
    """:func:`evaluate_model` on the model in ``model_dir`` (loaded as :func:`load_model` does), with ``"model"``."""
    settings = settings or EvalSettings()
    model_path, tokenizer_dir = check_model_dir(model_dir)
    sampler = None
    if settings.backend == "vllm":  # vLLM loads the weights itself: the tokenizer and generation config here
        from transformers import GenerationConfig

        from bandpo_lab.training.preflight import load_tokenizer

        model, tokenizer = None, load_tokenizer(tokenizer_dir, name="tokenizer of model", error=EvalError)
        try:
            generation = GenerationConfig.from_pretrained(str(model_path))
        except OSError:
            generation = None
        settings = dataclasses.replace(settings, max_new_tokens=max_new_tokens_of(settings, generation))
        sampler = VLLMSampler(model_path, tokenizer, settings, dtype, tokenizer_dir)
    else:
        model, tokenizer = load_model(
            model_path, device=device, dtype=dtype, attn_implementation=attn_implementation
        )
    out = evaluate_model(model, tokenizer, datasets, settings, keep_samples=keep_samples, sampler=sampler)
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
