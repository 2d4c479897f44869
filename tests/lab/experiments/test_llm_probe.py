"""Tests for bandpo_lab.experiments.llm_probe and ``bandpo probe``: on the small warm-started countdown model (the same
code path as a real model), the clipped-token detection against the rule's bounds, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from bandpo_lab.experiments.llm_probe import (
    DEFAULT_RULES,
    ProbeConfig,
    _clip_counts,
    _sequences,
    probe_batch,
)
from bandpo_lab.experiments.llm_probe_report import BIN_NAMES, attribution


def test_clipped_detection_equals_the_bounds_for_grpo() -> None:
    """Independent check of "clipped = zero gradient with a non-zero advantage": for GRPO (eps 0.2, dual clip 10)
    those are exactly A > 0 with r > 1.2, and A < 0 with r < 0.8 or r > 10."""
    from bandpo.losses.policy_loss import policy_loss

    g = torch.Generator().manual_seed(0)
    n, t = 16, 12
    old = torch.log(torch.rand(n, t, generator=g).clamp_min(1e-4))
    logp = (old + 0.5 * torch.randn(n, t, generator=g)).clamp_max(0.0).requires_grad_()
    adv = torch.randn(n, generator=g)
    adv[:3] = 0.0
    mask = torch.ones(n, t)
    loss, _ = policy_loss(logp, old, adv, mask, clip_rule="grpo", check_values=False)
    loss.backward()
    m = mask.bool()
    r = (logp.detach() - old).exp()[m]
    a = adv[:, None].expand(n, t)[m]
    expected = ((a > 0) & (r > 1.2)) | ((a < 0) & ((r < 0.8) | (r > 10.0)))
    bins = torch.zeros_like(r, dtype=torch.long)
    counts = _clip_counts(logp.grad[m], a, bins, r, 1)
    assert counts["n_clipped"] == int(expected.sum()) > 0
    assert counts["n_up"] == int((expected & (a > 0)).sum())
    assert counts["n_live"] == int((a != 0).sum())


@pytest.mark.parametrize("rule", ["grpo", "band", "band_upper", "band_lower"])
def test_through_counts_equal_the_bounds_beyond_grpos_interval(rule: str) -> None:
    """Independent check of the per-side counts: the tokens with a gradient beyond GRPO's [0.8, 1.2] are exactly
    A > 0 with 1.2 < r <= hi (upper) and A < 0 with lo <= r < 0.8 (lower), from the rule's own bounds; their gradient
    mass is the sum of |grad| over them."""
    from bandpo.losses import make_clip_rule
    from bandpo.losses.policy_loss import policy_loss

    g = torch.Generator().manual_seed(3)
    n, t = 16, 12
    old = torch.log(torch.rand(n, t, generator=g).clamp_min(1e-4))
    logp = (old + 0.8 * torch.randn(n, t, generator=g)).clamp_max(0.0).requires_grad_()
    adv = torch.randn(n, generator=g)
    mask = torch.ones(n, t)
    loss, _ = policy_loss(logp, old, adv, mask, clip_rule=rule, check_values=False)
    loss.backward()
    m = mask.bool()
    r = (logp.detach() - old).exp()[m]
    a = adv[:, None].expand(n, t)[m]
    lo, hi = (x[m] for x in make_clip_rule(rule).bounds(old))
    up = (a > 0) & (r > 1.2) & (r <= hi)
    down = (a < 0) & (r < 0.8) & (r >= lo) & (r <= 10.0)
    bins = torch.zeros_like(r, dtype=torch.long)
    grad = logp.grad[m]
    counts = _clip_counts(grad, a, bins, r, 1)
    assert counts["n_up_through"] == int(up.sum()) and counts["n_down_through"] == int(down.sum())
    assert counts["up_through_by_bin"][0] == int(up.sum())
    assert counts["grad_mass_up_through"] == pytest.approx(float(grad[up].abs().double().sum()))
    assert counts["grad_mass"] == pytest.approx(float(grad.abs().double().sum()))
    assert (counts["n_up_through"] > 0) == (rule in ("band", "band_upper"))
    assert (counts["n_down_through"] > 0) == (rule in ("band", "band_lower"))


def test_attribution_is_each_sides_entropy_against_grpos_on_the_same_batch() -> None:
    batches = [
        {"rules": {"grpo": {"entropy_after": 1.0}, "band": {"entropy_after": 0.7},
                   "band_upper": {"entropy_after": 0.9}, "band_lower": {"entropy_after": 0.85}}},
        {"rules": {"grpo": {"entropy_after": 2.0}, "band": {"entropy_after": 2.0},
                   "band_upper": {"entropy_after": 2.1}, "band_lower": {"entropy_after": 1.8}}},
    ]  # fmt: skip
    got = attribution(batches, DEFAULT_RULES)
    assert got["upper"] == pytest.approx([-0.1, 0.1]) and got["lower"] == pytest.approx([-0.15, -0.2])
    assert got["both"] == pytest.approx([-0.3, 0.0]) and got["interaction"] == pytest.approx([-0.05, 0.1])
    assert attribution(batches, ("grpo", "band")) == {}


def test_sequences_mask_the_completion_positions() -> None:
    ids, attn, resp = _sequences([[5, 6], [7]], [[1, 2, 3], [4]], pad_id=0)
    assert ids.tolist() == [[5, 6, 1, 2, 3], [7, 4, 0, 0, 0]]
    assert attn.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # position t predicts token t + 1: row 0 predicts 1, 2, 3 from positions 1..3
    assert resp.tolist() == [[False, True, True, True], [True, False, False, False]]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"updates": 1}, "updates"),
        ({"group_size": 1}, "group_size"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"rules": ("grpo", "bandd")}, r"unknown clip rule 'bandd'"),
        ({"rules": ()}, "at least one clip rule"),
        ({"minibatches": 0}, "minibatches"),
        ({"minibatches": 33}, "minibatches must be at most the batch's 32 completions"),
    ],
)
def test_bad_config(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProbeConfig(**options)


def test_probe_batch_update_one_never_clips_and_weights_are_restored(warm_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(warm_model_dir))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (8, 10), generator=g)
    attn = torch.ones_like(ids)
    resp = torch.zeros(8, 9, dtype=torch.bool)
    resp[:, 4:] = True
    adv = torch.tensor([1.0, -1.0] * 4)
    config = ProbeConfig(rules=("grpo", "band", "dppo_kl"), updates=3, learning_rate=3e-2)
    out = probe_batch(model, ids, attn, resp, adv, config)
    for name, rule in out["rules"].items():
        first = rule["per_update"][0]
        assert first["update"] == 1 and first["n_clipped"] == 0, name  # ratio exactly 1
        assert first["ratio_max"] == pytest.approx(1.0, abs=1e-5)
        assert 0.0 <= rule["clip_frac"] <= 1.0 and rule["kl_after"] >= 0.0
        assert sum(sum(u["clipped_by_bin"]) for u in rule["per_update"]) == sum(
            u["n_clipped"] for u in rule["per_update"]
        )
    assert sum(out["rules"][r]["n_clipped"] for r in out["rules"]) > 0  # a large step binds somewhere
    # kept to significant digits: tiny probabilities are not rounded to 0
    assert min(out["p_old_values"]) > 0.0
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_minibatches_partition_the_rows() -> None:
    from bandpo_lab.experiments.llm_probe import _minibatches

    assert [c.tolist() for c in _minibatches(5, 1, 0)] == [[0, 1, 2, 3, 4]]
    parts = _minibatches(10, 4, 3)
    assert [len(p) for p in parts] == [3, 3, 2, 2]
    assert sorted(torch.cat(parts).tolist()) == list(range(10))
    assert [p.tolist() for p in parts] == [p.tolist() for p in _minibatches(10, 4, 3)]  # seeded


def test_probe_batch_with_minibatches_uses_each_completion_once_per_pass(warm_model_dir: Path) -> None:
    """4 mini-batches and 4 updates (the paper's pattern): the updates' tokens add up to the batch's, each once; with
    8 updates (each completion twice) every mini-batch comes back; update 1 still never clips."""
    from transformers import AutoModelForCausalLM

    from bandpo_lab.experiments.llm_probe_report import by_update

    model = AutoModelForCausalLM.from_pretrained(str(warm_model_dir))
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(3, model.config.vocab_size, (8, 10), generator=g)
    attn = torch.ones_like(ids)
    resp = torch.zeros(8, 9, dtype=torch.bool)
    resp[:, 4:] = True
    resp[:2, 7:] = False  # ragged: the mini-batches hold different token counts
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5] * 2)
    for updates in (4, 8):
        config = ProbeConfig(rules=("grpo", "band"), updates=updates, minibatches=4, learning_rate=3e-2)
        out = probe_batch(model, ids, attn, resp, adv, config)
        for rule in config.rules:
            per = out["rules"][rule]["per_update"]
            assert len(per) == updates and per[0]["n_clipped"] == 0
            assert sum(u["n_live"] for u in per[:4]) == int(resp.sum())  # one pass: every token once
            if updates == 8:
                assert [u["n_live"] for u in per[4:]] == [u["n_live"] for u in per[:4]]
        rows = by_update([out["rules"]["grpo"]["per_update"]])
        assert [r["update"] for r in rows] == list(range(1, updates + 1))


def test_probe_batch_shares_update_one_with_the_same_results(warm_model_dir: Path) -> None:
    """Update 1 is the same for every rule: running it once and continuing every rule from its weights and
    optimizer state gives every rule's numbers as running it per rule (to float32 rounding), in fewer updates."""
    from transformers import AutoModelForCausalLM

    g = torch.Generator().manual_seed(2)
    model = AutoModelForCausalLM.from_pretrained(str(warm_model_dir))
    ids = torch.randint(3, model.config.vocab_size, (8, 10), generator=g)
    attn = torch.ones_like(ids)
    resp = torch.zeros(8, 9, dtype=torch.bool)
    resp[:, 4:] = True
    adv = torch.tensor([1.0, -1.0] * 4)
    config = ProbeConfig(rules=("grpo", "clip_higher", "band", "dppo_kl"), updates=3, learning_rate=3e-2)
    runs = {}
    for share in (True, False):
        calls = []
        runs[share] = probe_batch(
            model,
            ids,
            attn,
            resp,
            adv,
            config,
            progress=lambda c=calls: c.append(1),
            share_first_update=share,
        )
        assert len(calls) == (1 + 4 * 2 if share else 4 * 3)
    shared, separate = runs[True], runs[False]
    for name in config.rules:
        a, b = shared["rules"][name], separate["rules"][name]
        for u, v in zip(a["per_update"], b["per_update"]):
            assert u.keys() == v.keys()
            for key in u:
                assert u[key] == pytest.approx(v[key], rel=1e-4, abs=1e-6), (name, u["update"], key)
        for key in ("clip_frac", "kl_after", "entropy_after", "n_clipped"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (name, key)
    assert shared["rules"]["grpo"]["n_clipped"] > 0  # the later updates bind, so the rules differ there


@pytest.mark.slow
def test_probe_cli_end_to_end(
    warm_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bandpo_lab.cli.main import main

    out = tmp_path / "probe"
    argv = ["probe", "--model", str(warm_model_dir), "--dataset", "countdown", "--rules", "grpo,band",
            "--batches", "2", "--prompts", "4", "--group-size", "4", "--updates", "2", "--max-new-tokens", "8",
            "--lr", "1e-2", "--output-dir", str(out), "--no-progress", "--precision", "float32"]  # fmt: skip
    assert main(argv) == 0
    assert "bandpo probe: precision  float32 (asked for" in capsys.readouterr().err  # and the CPU's flags
    result = json.loads((out / "results.json").read_text())
    assert result["config"]["precision"] == "float32" and result["precision"]["name"] == "float32"
    assert len(result["batches"]) == 2 and set(result["summary"]["rules"]) == {"grpo", "band"}
    assert result["summary"]["batch"]["p_old_below_0.2"]["n"] == 2
    assert {f"clip_frac[{b}]" for b in BIN_NAMES} <= set(result["summary"]["rules"]["band"])
    assert "provenance" in result and (out / "probe.png").is_file()
    text = (out / "results.md").read_text()
    assert "(n=2)" in text


def test_probe_cli_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bandpo_lab.cli.main import main

    for argv in (
        ["--model", "x", "--updates", "1"],
        ["--model", "x", "--task-options", "[1]"],
        ["--model", str(tmp_path / "nope"), "--dataset", "countdown"],
        ["--model", "x", "--precision", "fp8"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(["probe", *argv, "--output-dir", str(tmp_path)])
        assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("bandpo probe: error:") for line in err)
    # each refused for its own option: model 'x' does not exist either, which must not be what is said
    assert err[0] == "bandpo probe: error: --updates must be an integer >= 2, got 1"
    assert (
        err[1] == "bandpo probe: error: --task-options must be a YAML mapping like '{digits: [1]}', got '[1]'"
    )
    assert "does not exist" in err[2]
    assert err[3] == "bandpo probe: error: --precision must be one of auto, float32, bf16, got 'fp8'"


def test_probe_refuses_a_problem_it_cannot_score_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row without a ground truth used to raise a traceback from the verifier after the model had loaded and
    batches had been sampled; now one line names the row, and no model is needed to see it."""
    import json

    from bandpo_lab.cli.main import main

    rows = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+2?"}, {"prompt": "3+3?", "answer": "6"}]
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["probe", "--model", str(tmp_path / "no-model"), "--dataset", str(data), "--prompts", "2"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--output-dir", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bandpo probe: error: problem 1 of math cannot be scored by verifier 'dapo': ")
    assert "\n" not in err and not (tmp_path / "out").exists()
