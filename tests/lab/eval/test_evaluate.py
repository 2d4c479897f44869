"""Tests for bandpo_lab.eval.evaluate: the metrics of an evaluation (with a scripted sampler, so the numbers are known,
and with a tiny random model) and its table."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bandpo_lab.eval.datasets import EvalDataset, load_eval_dataset
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.eval.evaluate import evaluate_model, evaluate_model_dir, format_table
from bandpo_lab.eval.metrics import pass_at_k
from bandpo_lab.eval.sampling import Samples
from bandpo_lab.eval.settings import EvalSettings


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class ScriptedSampler:
    """Returns ``k`` fixed completions per prompt: ``script[prompt]``, recording the calls."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.calls: list[tuple[list[str], bool, int | None]] = []

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> Any:
        self.calls.append((prompts, add_special_tokens, seed))
        completions = [self.script[p] for p in prompts]
        lengths = [[len(c) + 1 for c in cs] for cs in completions]
        token_ids = [[[0] * n for n in row] for row in lengths]
        return Samples(completions, token_ids, lengths, [[True] * len(cs) for cs in completions], 0.5)


# -------------------------------------------------------------------------------------- scripted evaluation
def test_metrics_of_a_scripted_evaluation(tmp_path: Path, tokenizer: Any) -> None:
    """Known completions -> known numbers; unparsable ground truths are counted and left out, not a crash."""
    rows = [
        {"prompt": "a", "answer": "1"},  # 2 of 4 right, one sample unparsed
        {"prompt": "b", "answer": "2"},  # 0 of 4
        {"prompt": "c", "answer": "$ $"},  # ground truth empty after normalisation
        {"prompt": "d"},  # no ground truth at all
        {"prompt": "e", "answer": "5"},  # 4 of 4
    ]
    data = load_eval_dataset(str(write_jsonl(tmp_path / "math.jsonl", rows)), verifier="dapo")
    script = {
        "a": ["Answer: 1", "Answer: 3", "no answer here", "Answer: 1"],
        "b": ["Answer: 3", "Answer: 3", "Answer: 4", "Answer: 3"],
        "e": ["Answer: 5"] * 4,
    }
    sampler = ScriptedSampler(script)
    out = evaluate_model(
        None,
        tokenizer,
        [data],
        EvalSettings(k=4, ks=(1, 2, 4), batch_size=2, progress=False),
        sampler=sampler,
        keep_samples=True,
    )
    m = out["datasets"]["math"]
    assert m["n_problems"] == 3 and m["n_unparsed_ground_truth"] == 2 and m["n_samples"] == 12
    assert m["n_unparsed"] == 1
    assert m["mean@4"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert m["pass@1"] == pytest.approx(m["mean@4"])
    assert m["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + 0 + 1) / 3)
    assert m["pass@4"] == pytest.approx(2 / 3)
    assert m["best@4"] <= m["pass@4"]
    assert m["maj@4"] == pytest.approx(2 / 3)  # a: "1" twice beats "3" once; b: wrong; e: right
    assert m["entropy"] == 0.5 and m["truncated_frac"] == 0.0
    assert out["overall"]["mean@4"] == m["mean@4"]
    # the prompts went out in batches of 2 with distinct seeds, unparsable ground truths never sampled
    assert [c[0] for c in sampler.calls] == [["a", "b"], ["e"]]
    assert [c[2] for c in sampler.calls] == [0, 1]
    assert [s["index"] for s in out["samples"]] == [0, 1, 4]
    assert out["samples"][0]["correct"] == [True, False, False, True]
    table = format_table(out)
    assert table.splitlines()[2].split()[:3] == ["math", "3", "50.0"]  # mean@4 in percent


def test_overall_pools_datasets(tmp_path: Path, tokenizer: Any) -> None:
    a = EvalDataset("a", "x", "dapo", [{"prompt": "p1", "answer": "1"}])
    b = EvalDataset("b", "y", "dapo", [{"prompt": "p2", "answer": "2"}, {"prompt": "p3", "answer": "3"}])
    sampler = ScriptedSampler({"p1": ["Answer: 1", "Answer: 1"], "p2": ["Answer: 2", "x"], "p3": ["x", "x"]})
    out = evaluate_model(None, tokenizer, [a, b], EvalSettings(k=2, progress=False), sampler=sampler)
    assert out["datasets"]["a"]["mean@2"] == 1.0 and out["datasets"]["b"]["mean@2"] == 0.25
    assert out["overall"]["mean@2"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)  # problems weigh equally
    assert out["overall"]["n_problems"] == 3
    table = format_table(out)
    assert table.splitlines()[-2].startswith("overall")
    with pytest.raises(EvalError, match=r"dataset names must be distinct"):
        evaluate_model(None, tokenizer, [a, a], EvalSettings(k=2, progress=False), sampler=sampler)


def test_all_ground_truths_unparsable_is_not_a_crash(tmp_path: Path, tokenizer: Any) -> None:
    data = load_eval_dataset(str(write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "a", "answer": ""}])))
    out = evaluate_model(
        None, tokenizer, [data], EvalSettings(k=2, progress=False), sampler=ScriptedSampler({})
    )
    assert out["overall"]["n_problems"] == 0 and out["overall"]["n_unparsed_ground_truth"] == 1
    assert "mean@2" not in out["overall"]


# ----------------------------------------------------------------------------------------- a tiny real model
def test_tiny_model_on_countdown(model_dir: Path) -> None:
    data = load_eval_dataset("countdown", max_problems=12)
    settings = EvalSettings(k=4, ks=(1, 4), batch_size=5, max_new_tokens=6, progress=False)
    out = evaluate_model_dir(model_dir, [data], settings)
    m = out["overall"]
    assert m["n_problems"] == 12 and m["n_samples"] == 48
    assert m["pass@1"] == pytest.approx(m["mean@4"])
    assert 0.0 <= m["best@4"] <= m["pass@4"] + 1e-12
    assert m["entropy"] > 0 and 1 <= m["mean_length"] <= 6
    assert out["settings"]["max_new_tokens"] == 6 and out["model"] == str(model_dir)
    # the precision sampling ran in: auto is float32 for a model this small, whatever the CPU
    assert out["settings"]["precision"] == "auto"
    assert out["settings"]["precision_resolved"]["name"] == "float32"
    again = evaluate_model_dir(model_dir, [data], settings)
    assert again["overall"] == m  # seeded
    # the attention it sampled with is recorded: the one asked for, else transformers' default for a bare folder
    eager = evaluate_model_dir(model_dir, [data], settings, attn_implementation="eager")
    assert eager["settings"]["attn_implementation"] == "eager"
    assert out["settings"]["attn_implementation"] == "sdpa"
