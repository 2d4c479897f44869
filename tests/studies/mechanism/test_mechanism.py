"""The toy mechanism study (studies/mechanism/): a test-sized run, the properties the experiment rests on, its
statistics, its command line (``run.py``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from mechanism import (
    SCENARIOS,
    MechanismConfig,
    Scenario,
    _Simulator,
    _softmax_parts,
    quick,
    resolve_rules,
    run_scenario,
)
from mechanism_report import run_mechanism
from mechanism_stats import bootstrap_ci, first_step, summarize

from bandpo import policy_loss
from bandpo.losses.clip_rules import CLIP_RULES
from helpers import REPO, load_script

run = load_script("studies/mechanism/run.py")
PROG, main = run.PROG, run.main

F64 = MechanismConfig(seeds=6, vocab=64, dtype=torch.float64)


def _scenario(**kw) -> Scenario:
    base = {
        "name": "test",
        "question": "",
        "outcome": "find",
        "head_reward_prob": 0.5,
        "rare_reward": 1.0,
        "rare_probs": (0.02,),
        "learning_rates": (1.0,),
        "updates_per_batch": (4,),
        "group_size": 32,
        "steps": 6,
    }
    return Scenario(**{**base, **kw})


def test_smoke_run_writes_tables_and_figures(tmp_path):
    scenarios = [replace(quick(SCENARIOS.get(n)), steps=4) for n in SCENARIOS]
    rules = resolve_rules(["grpo", "band", "adaptive_band"])  # adaptive_band needs the entropy input
    config = MechanismConfig(seeds=3, vocab=32)
    trajs, rows, meta = run_mechanism(config, scenarios, rules, tmp_path, progress=False, command="test")
    names = {p.name for p in tmp_path.iterdir()}
    assert {"results.json", "results.csv", "results.md"} <= names
    assert {f"{s.name}.png" for s in scenarios} <= names
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["rows"]) == len(rows) > 0 and len(data["rows"][0]) == len(data["fields"])
    assert set(data["meta"]["rules"]) == {"grpo", "band", "adaptive_band"}
    assert meta["wall_time_s"] >= meta["simulate_s"] > 0
    for traj in trajs:
        assert traj.curves["entropy"].shape == (2, 3, 2, 1, 3, 5)
        assert not traj.flags["nonfinite"].any()
    assert "| cell | grpo | band | adaptive_band |" in (tmp_path / "results.md").read_text()


def test_every_registered_rule_is_run_by_default():
    assert list(resolve_rules()) == CLIP_RULES.names()


def test_one_update_per_batch_gives_every_rule_the_same_trajectory_exactly():
    """K = 1: the ratio is exactly 1 at the only update, no bound binds, and seeds share their random numbers."""
    sc = _scenario(learning_rates=(0.5, 30.0), updates_per_batch=(1,), steps=8)
    traj = run_scenario(sc, F64, resolve_rules())
    for key, x in traj.curves.items():
        for r in range(1, len(traj.rules)):
            assert torch.equal(x[:, r], x[:, 0]), (key, traj.rules[r])
    assert (traj.rates["clip_frac"] == 0).all()
    assert (traj.curves["entropy"][..., -1] < traj.curves["entropy"][..., 0]).all()  # the policy did move


def test_tiny_learning_rate_gives_every_rule_the_same_trajectory():
    """Stale data but tiny steps: ratios stay within every rule's bounds, so the rules do not differ."""
    sc = _scenario(learning_rates=(1e-3,), updates_per_batch=(8,), steps=8)
    traj = run_scenario(sc, F64, resolve_rules())
    assert (traj.rates["clip_frac"] == 0).all()
    for x in traj.curves.values():
        torch.testing.assert_close(x, x[:, :1].expand_as(x), rtol=1e-12, atol=1e-12)


def test_large_steps_cap_grpo_rare_growth_per_batch_but_not_band():
    """One batch, 32 updates: GRPO stops pushing the rewarded rare action once r > 1.2 (its probability still
    moves a little through the normalisation), Band-KL lets it grow up to its much wider bound."""
    sc = _scenario(learning_rates=(0.5,), updates_per_batch=(32,), group_size=64, steps=1)
    traj = run_scenario(
        sc, MechanismConfig(seeds=16, vocab=256, dtype=torch.float64), resolve_rules(["grpo", "band"])
    )
    log_p = traj.curves["log_p_rare"][0, :, 0, 0]  # (R, S, 2)
    grpo, band = torch.exp(log_p[..., 1] - log_p[..., 0])  # growth of p_rare over the batch, (S,) each
    assert grpo.max() < 1.45, grpo
    assert band.median() > 4.0, band
    rewarded = grpo > 1.1  # seeds where the rare action was sampled (and so rewarded): Band moved it further
    assert (band[rewarded] >= grpo[rewarded]).all()


def test_update_equals_autograd_through_log_softmax_and_policy_loss():
    """The written-out chain rule through the log-softmax, with deduplicated tokens weighted by their counts, is
    one SGD step on ``bandpo.policy_loss`` (per row: mean over the group, seq-mean-token-mean) by autograd."""
    sc = _scenario(learning_rates=(0.7, 3.0), group_size=16)
    sim = _Simulator(sc, F64, resolve_rules(["grpo", "band", "adaptive_band"]))
    gen = torch.Generator().manual_seed(3)
    theta = sim.init.clone() + 0.3 * torch.randn(sim.init.shape, generator=gen, dtype=torch.float64)
    probs, log_probs = _softmax_parts(theta)
    entropy = -(probs * log_probs).sum(-1)
    batch = sim.batch(probs, log_probs, entropy, gen)
    theta_old_logp = log_probs.clone()
    theta = theta + 0.2 * torch.randn(theta.shape, generator=gen, dtype=torch.float64)  # stale: ratios != 1
    # reference: every sampled token separately (no dedup), autograd through log_softmax and policy_loss
    leaf = theta.clone().requires_grad_()
    counts = batch.count.long()
    rows, actions = batch.row.repeat_interleave(counts), batch.action.repeat_interleave(counts)
    adv, ent = batch.adv.repeat_interleave(counts), batch.entropy.repeat_interleave(counts)
    logp = torch.log_softmax(leaf, -1)[rows, actions].view(sim.n, sc.group_size)
    old = theta_old_logp[rows, actions].view(sim.n, sc.group_size)
    total = 0.0
    for i, rule in enumerate(sim.rules):
        sl = slice(i * sim.rows_per_rule, (i + 1) * sim.rows_per_rule)
        extra = {"entropy": ent.view(sim.n, -1)[sl]} if rule.needs_entropy else {}
        for row in range(sl.start, sl.stop):  # one prompt per row: its G samples are a batch of G sequences
            e = {k: v[row - sl.start : row - sl.start + 1].T for k, v in extra.items()}
            loss, _ = policy_loss(
                logp[row : row + 1].T, old[row : row + 1].T, adv.view(sim.n, -1)[row], torch.ones(sc.group_size, 1),
                rule, **e,
            )  # fmt: skip
            total = total + loss
    total.backward()
    expected = theta - sim.lr * leaf.grad
    probs, log_probs = _softmax_parts(theta)
    sim.update(theta, probs, log_probs, batch, torch.zeros(sim.n, dtype=torch.float64))
    torch.testing.assert_close(theta, expected, rtol=0, atol=1e-12)


def test_simplex_edges_stay_finite():
    """Huge steps drive a penalised action to probability 0 and a rewarded one to probability 1 in float32:
    no NaN or inf appears in the logits, log-probabilities stay finite, every rule keeps running."""
    config = MechanismConfig(seeds=4, vocab=64)
    penalty = replace(SCENARIOS.get("rare_penalty"), learning_rates=(1e4,), updates_per_batch=(4,), steps=6)
    exploit = replace(
        SCENARIOS.get("exploit"), n_head=1, learning_rates=(1e4,), updates_per_batch=(4,), steps=6
    )
    for sc, edge in ((penalty, "p_zero"), (exploit, "p_one")):
        traj = run_scenario(sc, config, resolve_rules())
        assert not traj.flags["nonfinite"].any()
        assert traj.flags[edge].all(), sc.name  # the edge was reached in every rule and seed
        assert torch.isfinite(traj.curves["log_p_rare"]).all()
        assert torch.isfinite(traj.curves["entropy"]).all()
    assert (traj.curves["p_head"][..., -1] == 1).all()


def test_penalised_rare_action_falls_further_under_band_than_grpo():
    sc = replace(SCENARIOS.get("rare_penalty"), learning_rates=(3.0,), updates_per_batch=(8,), steps=5)
    traj = run_scenario(
        sc, MechanismConfig(seeds=12, vocab=128, dtype=torch.float64), resolve_rules(["grpo", "band"])
    )
    final = traj.curves["log_p_rare"][0, :, 0, 0, :, -1]  # (R, S)
    # Band's wide lower bound: every seed ends below GRPO's typical one
    assert final[1].max() < final[0].median() - 0.5


def test_summaries_have_intervals_and_paired_ratio():
    sc = replace(quick(SCENARIOS.get("exploit")), steps=4)
    rows = summarize(
        run_scenario(sc, MechanismConfig(seeds=4, vocab=32), resolve_rules(["grpo", "band"])), n_boot=50
    )
    for row in rows:
        if math.isfinite(row["value"]):
            assert row["ci_low"] <= row["value"] <= row["ci_high"], row
    paired = [r for r in rows if r.get("paired") == "ratio"]
    assert paired and all(r["paired_value"] == 1.0 for r in paired if r["rule"] == "grpo")


def test_first_step():
    mask = np.array([[False, True, True], [False, False, False], [True, False, True]])
    np.testing.assert_array_equal(first_step(mask), [1.0, math.inf, 0.0])


def test_bootstrap_interval_matches_scipy_percentile_bootstrap():
    stats = pytest.importorskip("scipy.stats")
    sample = np.random.default_rng(7).lognormal(size=30)
    for stat, func in (("mean", np.mean), ("median", np.median)):
        ours = bootstrap_ci(sample, stat, n_boot=20000, seed=1)
        ref = stats.bootstrap((sample,), func, n_resamples=20000, method="percentile", random_state=2)
        assert ours[0] == pytest.approx(func(sample))
        spread = sample.std() / math.sqrt(len(sample))
        assert ours[1] == pytest.approx(ref.confidence_interval.low, abs=0.06 * spread)
        assert ours[2] == pytest.approx(ref.confidence_interval.high, abs=0.06 * spread)


def test_bootstrap_median_interval_matches_the_exact_bootstrap_distribution() -> None:
    """For an odd sample of distinct values the bootstrap median is the order statistic x_(k) with probability
    P(Bin(n, k/n) >= m) - P(Bin(n, (k-1)/n) >= m), m = (n+1)/2: its exact quantiles are known, and each bound of the
    95 % interval must be the order statistic at the exact quantile, not merely close to it in value. Here the
    exact 2.5 % and 97.5 % quantiles lie more than 4 Monte-Carlo standard deviations of ``n_boot`` draws inside
    their order statistic's probability step (checked below), so both interpolated sample quantiles fall on that
    order statistic itself: the index must match exactly (a 5 %/95 % interval is one index off on each side,
    10 %/90 % two)."""
    stats = pytest.importorskip("scipy.stats")
    n, m, n_boot = 31, 16, 40000
    x = np.sort(np.random.default_rng(0).normal(size=n))
    cdf = np.array([stats.binom.sf(m - 1, n, k / n) for k in range(1, n + 1)])  # P(median* <= x_(k))
    _, low, high = bootstrap_ci(x, "median", n_boot=n_boot, seed=5)
    for q, bound in ((0.025, low), (0.975, high)):
        i = int(np.searchsorted(cdf, q))  # 0-based index of the exact q-quantile's order statistic
        noise = math.sqrt(q * (1 - q) / n_boot)  # standard deviation of the fraction of draws below it
        assert min(q - cdf[i - 1], cdf[i] - q) > 4 * noise, (q, cdf[i - 1 : i + 1])
        assert bound in x, (q, bound)  # an order statistic, not an interpolation between two
        assert int(np.searchsorted(x, bound)) == i, (q, int(np.searchsorted(x, bound)), i)


def test_bootstrap_with_never_reached_events():
    value, low, high = bootstrap_ci(np.array([3.0, 5.0, math.inf, math.inf, math.inf]), "median")
    assert value == math.inf and high == math.inf and low >= 3.0
    with pytest.raises(ValueError, match="at least 2 values"):
        bootstrap_ci(np.array([1.0]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rare_reward": 1.0, "rare_probs": ()}, "rare_reward and rare_probs"),
        ({"learning_rates": (-1.0,)}, "learning_rates"),
        ({"updates_per_batch": (0,)}, "updates_per_batch"),
        ({"group_size": 1}, "group_size"),
    ],
)
def test_scenario_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _scenario(**kwargs)


def test_config_validation():
    with pytest.raises(ValueError, match="seeds must be an integer >= 2, got 1"):
        MechanismConfig(seeds=1)
    with pytest.raises(ValueError, match="dtype"):
        MechanismConfig(dtype=torch.float16)
    with pytest.raises(ValueError, match=r"vocab must be an integer in \[16, 1048576\], got 1048577"):
        MechanismConfig(vocab=(1 << 20) + 1)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--rules", "grpo,nope"], "--rules: unknown clip rule 'nope'"),
        (["--scenarios", "exploitt"], "--scenarios: unknown mechanism scenario 'exploitt'"),
        (["--seeds", "1"], "--seeds must be an integer >= 2, got 1"),
        (["--vocab", "3"], "--vocab must be an integer in [16, 1048576], got 3"),
        (
            ["--vocab", "100000000000"],
            "--vocab must be an integer in [16, 1048576], got 100000000000",
        ),  # was OOM
        (["--rules", ","], "--rules must name at least one clip rule"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(argv, match, capsys, tmp_path):
    assert main(["--output-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{PROG}: error: ") and match in err and "\n" not in err
    assert not any(tmp_path.iterdir())


def test_cli_output_that_cannot_be_a_directory_exits_2_with_one_line(capsys, tmp_path):
    """Refused before the simulation, which wrote only at its end (a FileExistsError traceback after it before)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    for output, message in (
        (a_file, f"--output-dir '{a_file}' is a file; it must be a directory (or not exist yet)"),
        (
            a_file / "sub",
            f"--output-dir '{a_file / 'sub'}' is inside '{a_file}', which is a file; --output-dir must be a directory (or "
            "not exist yet)",
        ),
    ):
        assert main(["--quick", "--rules", "grpo", "--output-dir", str(output)]) == 2
        assert capsys.readouterr().err == f"{PROG}: error: {message}\n"
    assert a_file.read_text() == "keep me"


def test_cli_quick_run_through_subprocess(tmp_path):
    out = tmp_path / "mech"
    cmd = [sys.executable, str(REPO / PROG), "--quick", "--rules", "grpo,band",
           "--scenarios", "exploit", "--seeds", "3", "--vocab", "32", "--steps", "3", "--no-progress",
           "--output-dir", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "1 scenario(s) x 2 rule(s) x 3 seeds" in proc.stdout
    meta = json.loads((out / "results.json").read_text())["meta"]
    expected = "--seeds 3 --vocab 32 --steps 3 --rules grpo,band --scenarios exploit --quick"
    assert meta["command"] == f"python {PROG} --output-dir {out} {expected}"
    assert (out / "exploit.png").stat().st_size > 1000


def test_cli_dry_run_checks_prints_the_plan_and_simulates_nothing(tmp_path, monkeypatch, capsys):
    """``--dry-run``: the checks, then the plan in a few lines; nothing simulated, nothing written."""

    def fail(*args, **kwargs):
        pytest.fail("a dry run simulated")

    monkeypatch.setattr("mechanism_report.run_mechanism", fail)
    out = tmp_path / "out"
    assert main(["--quick", "--rules", "grpo,band", "-o", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{PROG}: dry run: the plan (nothing simulated or written)"), printed
    for text in (
        "x 2 rule(s) x 8 seeds, vocabulary 256",
        "rules grpo, band",
        f"tables and figures in {out}/",
    ):
        assert text in printed, (text, printed)
    assert len(printed.splitlines()) <= 10 and not out.exists()
    assert main(["--seeds", "1", "--dry-run"]) == 2
    assert capsys.readouterr().err == f"{PROG}: error: --seeds must be an integer >= 2, got 1\n"
