"""studies/study5/rederive.py on made-up run folders whose numbers are known in closed form: the entropy area
(trapezoid over uneven steps), the paired contrasts and their t-intervals (one checked against a printed t-table
value), the verdicts, the interaction, the late mean, the pooled clip numbers with their token counts, the per-side
counts and the runs that never took off; with a torn last line, gzipped and plain logs, an unfinished run and a
seed without one rule."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import REPO

SPEC = importlib.util.spec_from_file_location("study5_rederive", REPO / "studies" / "study5" / "rederive.py")
assert SPEC is not None and SPEC.loader is not None
rederive = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = rederive  # dataclasses look their module up there
SPEC.loader.exec_module(rederive)

SEEDS = [410, 411, 412, 413, 414]
GRPO_AREA = {s: 1.0 + 0.1 * (s - 410) for s in SEEDS}
# the per-seed area differences against grpo (nats)
D_UPPER = {410: -0.7, 411: -0.6, 412: -0.5, 413: -0.4, 414: -0.3}
D_LOWER = {410: 0.0, 411: -0.1, 412: -0.2, 413: -0.1}  # no band-lower run on seed 414
D_KL = {410: -0.3, 411: -0.3, 412: -0.5, 413: -0.1, 414: 0.0}  # seed 414's band-kl run is unfinished

# held-out mean@8 at steps 120, 140 and the final one (fractions, exact in binary); 50 points unless listed
LATE_DEFAULT = (0.375, 0.5, 0.625)
LATE = {
    ("grpo", 412): (0.125, 0.25, 0.25),  # 20.83 points: never took off
    ("band-upper", 410): (0.25, 0.25, 0.125),  # 20.83 points: never took off
    ("band-kl", 411): (0.25, 0.25, 0.25),  # exactly 25 points: took off (below 25 is the rule)
    ("band-kl", 410): (0.5, 0.625, 0.75),  # 62.5 points
}


def step_row(step: int, entropy: float, with_sides: bool) -> dict[str, Any]:
    """A training-log row. Odd steps: 100 tokens, 10 clipped, 5 of them in the tail; even steps: 300 tokens, 6
    clipped, 6 in the tail. With sides, per 100 tokens: 5 up through, 2 down through, 3 and 1 of them in the tail,
    1 held up, 2 held down."""
    odd = step % 2 == 1
    count = 100.0 if odd else 300.0
    row = {
        "step": step,
        "time": 1.0e9 + step,
        "policy/entropy": entropy,
        "tokens/count": count,
        "clip/frac": 0.1 if odd else 0.02,
        f"clip/frac/{rederive.TAIL_BIN}": 0.25 if odd else 0.1,
        f"tokens/share/{rederive.TAIL_BIN}": 0.2,
        "clip/tail_share": 0.5 if odd else 1.0,
    }
    shares = (0.05, 0.02, 0.03, 0.01, 0.01, 0.02) if with_sides else (0.0,) * 6
    row.update(zip(rederive.SIDE_KEYS, shares))
    return row


def write_run(
    root: Path,
    label: str,
    seed: int,
    entropies: dict[int, float],
    *,
    gz: bool = True,
    torn: bool = False,
    finished: bool = True,
    at_steps: tuple[int, ...] = (120, 140),
    recorded_late: float | None = None,
    entropy_eval: float = 1.0,
) -> Path:
    folder = root / "runs" / label / f"seed{seed}"
    folder.mkdir(parents=True)
    rows = [step_row(s, e, label != "grpo") for s, e in entropies.items()]
    # TRL's closing row: at the last step, no step of its own
    rows.append({"step": max(entropies), "train_runtime": 123.4, "train_loss": 0.01})
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if torn:
        text += '{"step": 99, "policy/entropy": 50.0, "tokens/cou'
    if gz:
        (folder / "metrics.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (folder / "metrics.jsonl").write_text(text)
    (folder / "run_info.json").write_text(json.dumps({"resumed_from": None}))
    if not finished:
        return folder
    late = LATE.get((label, seed), LATE_DEFAULT)
    evals = [{"step": s, "mean@8": v, "pass@8": 0.5} for s, v in zip((120, 140), late[:2]) if s in at_steps]
    (folder / "evals_at_steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    metrics = {"mean@8": late[2], "pass@1": 0.3, "pass@8": 0.75 if label == "grpo" else 0.625}
    metrics["entropy"] = entropy_eval
    mean = sum(late) / 3 if len(evals) == 2 else None
    results = {
        "label": label,
        "seed": seed,
        "metrics": metrics,
        "at_steps": evals,
        "late": None if mean is None else {"mean@8": mean if recorded_late is None else recorded_late},
    }
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def constant(value: float, steps: range = range(1, 5)) -> dict[int, float]:
    return {s: value for s in steps}


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("study5")
    for seed in SEEDS:
        grpo = constant(GRPO_AREA[seed])
        if seed == 410:
            # steps 1, 2, 4 (step 3 not logged; written out of order): trapezoid (0 + 1) / 2 * 1 + (1 + 1.5) / 2 * 2
            # = 3 over a span of 3
            grpo = {1: 0.0, 4: 1.5, 2: 1.0}
        # grpo 413: results.json's late mean disagrees with its evaluations (the script recomputes and says so)
        write_run(root, "grpo", seed, grpo, recorded_late=0.9 if seed == 413 else None)
        write_run(
            root,
            "band-upper",
            seed,
            constant(GRPO_AREA[seed] + D_UPPER[seed]),
            gz=seed != 411,
            torn=seed == 411,  # a plain log (a run not exported) with a torn last line
            entropy_eval=0.5,
        )
        write_run(root, "band-kl", seed, constant(GRPO_AREA[seed] + D_KL[seed]), finished=seed != 414)
        if seed in D_LOWER:
            write_run(
                root,
                "band-lower",
                seed,
                constant(GRPO_AREA[seed] + D_LOWER[seed]),
                at_steps=(120,) if seed == 413 else (120, 140),  # no step-140 evaluation: no late mean
            )
    return root


@pytest.fixture(scope="module")
def result(results_dir: Path) -> dict[str, Any]:
    return rederive.analyse(results_dir, planned_seeds=SEEDS)


def runs_of(result: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["label"], r["seed"]): r for r in result["runs"]}


def test_entropy_area_is_the_trapezoid_over_logged_steps_divided_by_the_span() -> None:
    # uneven steps: a mean of the values (5/6) or of the trapezoids by index (7/8) would differ
    assert rederive.entropy_area([(1, 0.0), (2, 1.0), (4, 1.5)]) == pytest.approx(1.0)
    # a straight line a + b s over 1..160: its value at the midpoint 80.5
    line = [(s, 2.0 - 0.01 * s) for s in range(1, 161)]
    assert rederive.entropy_area(line) == pytest.approx(2.0 - 0.01 * 80.5)
    assert rederive.entropy_area([(5, 1.0)]) is None


def test_per_run_numbers(result: dict[str, Any]) -> None:
    runs = runs_of(result)
    g410 = runs[("grpo", 410)]
    assert g410["area"] == pytest.approx(1.0)
    assert (g410["steps"], g410["first_step"], g410["last_step"], g410["missing_steps"]) == (3, 1, 4, [3])
    assert g410["log_file"] == "metrics.jsonl.gz"
    # the torn line is skipped and counted; its step 99 is not read
    u411 = runs[("band-upper", 411)]
    assert (u411["log_file"], u411["torn_lines"], u411["last_step"]) == ("metrics.jsonl", 1, 4)
    assert u411["area"] == pytest.approx(GRPO_AREA[411] + D_UPPER[411])
    assert any("did not parse" in note for note in u411["notes"])
    # late mean@8 in points, final pass@8 in points, held-out entropy in nats
    assert runs[("grpo", 411)]["late_mean8"] == 50.0
    assert runs[("grpo", 412)]["late_mean8"] == pytest.approx(62.5 / 3)
    assert runs[("band-kl", 410)]["late_mean8"] == 62.5
    assert runs[("band-kl", 411)]["late_mean8"] == 25.0
    assert runs[("band-lower", 413)]["late_mean8"] is None
    assert runs[("band-upper", 410)]["final_pass8"] == 62.5
    assert runs[("grpo", 410)]["final_mean8"] == 62.5
    assert runs[("band-upper", 412)]["final_entropy"] == 0.5
    # the worker's recorded late mean is a cross-check, not the number
    g413 = runs[("grpo", 413)]
    assert g413["late_mean8"] == 50.0 and g413["late_mean8_recorded"] == pytest.approx(90.0)
    assert any("differs" in note for note in g413["notes"])
    assert not any("differs" in note for note in runs[("grpo", 412)]["notes"])
    assert result["unfinished"] == ["band-kl seed 414"]
    assert runs[("band-kl", 414)]["area"] == pytest.approx(GRPO_AREA[414])  # read, but unfinished
    assert result["missing"] == {"band-lower": [414]}


def test_primary_upper_interval_by_hand_from_a_t_table(result: dict[str, Any]) -> None:
    r = result["primary"]["band-upper - grpo"]
    # differences -0.7 .. -0.3: mean -0.5, sd sqrt(0.1 / 4), 5 seeds; t(0.9875, df 4) = 3.495 (printed tables)
    sd = math.sqrt(0.1 / 4)
    half = 3.495 * sd / math.sqrt(5)
    assert r["n"] == 5 and r["left_out"] == {}
    assert r["mean"] == pytest.approx(-0.5)
    assert r["sd"] == pytest.approx(sd)
    assert r["t"] == pytest.approx(3.495, abs=5e-4)
    assert r["lo"] == pytest.approx(-0.5 - half, abs=1e-4)  # -0.747
    assert r["hi"] == pytest.approx(-0.5 + half, abs=1e-4)  # -0.253
    assert r["verdict"] == "interval below 0: lowers the entropy"
    assert r["vs -0.32"] == {"interval_is": "contains", "excluded": False}
    assert r["vs -0.16"] == {"interval_is": "below", "excluded": True}
    assert r["detectable_at_80pct"] > 0


def test_primary_lower_leaves_out_the_seed_without_its_run(result: dict[str, Any]) -> None:
    r = result["primary"]["band-lower - grpo"]
    # differences 0, -0.1, -0.2, -0.1 over 410-413: mean -0.1, sd sqrt(0.02 / 3); t(0.9875, df 3) = 4.177
    se = math.sqrt(0.02 / 3) / 2
    assert r["n"] == 4 and sorted(r["per_seed"]) == [410, 411, 412, 413]
    assert r["left_out"] == {414: "band-lower has no run"}
    assert r["mean"] == pytest.approx(-0.1)
    assert r["t"] == pytest.approx(4.177, abs=5e-4)
    assert r["lo"] == pytest.approx(-0.1 - 4.177 * se, abs=1e-4)  # -0.271
    assert r["hi"] == pytest.approx(-0.1 + 4.177 * se, abs=1e-4)  # +0.071
    assert r["verdict"] == "interval contains 0: no effect detected"
    assert r["vs -0.32"] == {"interval_is": "above", "excluded": True}
    assert r["vs -0.16"] == {"interval_is": "contains", "excluded": False}
    assert result["primary_both_below_0"] is False


def test_secondary_area_and_interaction(result: dict[str, Any]) -> None:
    sec = result["secondary"]
    kl = sec["area"]["band-kl - grpo"]
    # band-kl 414 is unfinished: -0.3, -0.3, -0.5, -0.1: mean -0.3, sd sqrt(0.08 / 3); t(0.975, df 3) = 3.182
    se = math.sqrt(0.08 / 3) / 2
    assert kl["left_out"] == {414: "band-kl is unfinished (no results.json)"}
    assert kl["mean"] == pytest.approx(-0.3) and kl["level"] == 0.95
    assert kl["lo"] == pytest.approx(-0.3 - 3.182 * se, abs=1e-4)
    assert kl["hi"] == pytest.approx(-0.3 + 3.182 * se, abs=1e-4)
    inter = sec["interaction_area"]
    # per seed dK - dU - dL: 0.4, 0.4, 0.2, 0.4 (mean 0.35, sd 0.1)
    assert inter["per_seed"] == pytest.approx({410: 0.4, 411: 0.4, 412: 0.2, 413: 0.4})
    assert inter["mean"] == pytest.approx(0.35) and inter["sd"] == pytest.approx(0.1)
    assert inter["lo"] == pytest.approx(0.35 - 3.182 * 0.05, abs=1e-4)
    assert inter["hi"] == pytest.approx(0.35 + 3.182 * 0.05, abs=1e-4)
    assert set(inter["left_out"]) == {414}


def test_secondary_accuracy_and_entropy_against_grpo(result: dict[str, Any]) -> None:
    sec = result["secondary"]
    late = sec["late_mean8"]["band-kl - grpo"]
    assert late["per_seed"] == pytest.approx({410: 12.5, 411: -25.0, 412: 50.0 - 62.5 / 3, 413: 0.0})
    assert late["mean"] == pytest.approx((12.5 - 25.0 + 50.0 - 62.5 / 3) / 4)
    lower = sec["late_mean8"]["band-lower - grpo"]
    assert sorted(lower["per_seed"]) == [410, 411, 412]
    assert lower["left_out"] == {413: "band-lower has no late_mean8", 414: "band-lower has no run"}
    pass8 = sec["final_pass8"]["band-upper - grpo"]
    assert pass8["mean"] == pytest.approx(-12.5) and pass8["sd"] == pytest.approx(0.0)
    ent = sec["final_entropy"]["band-upper - grpo"]
    assert ent["mean"] == pytest.approx(-0.5) and ent["n"] == 5


def test_pooled_clipping_with_token_counts(result: dict[str, Any]) -> None:
    clip = result["secondary"]["clipping"]
    # a 4-step run: 800 tokens, 32 clipped, 22 in the tail; grpo 410 logs steps 1, 2, 4: 700, 22, 17
    assert clip["grpo"] | {"worst_rounding": 0} == {
        "runs": 5,
        "steps": 19,
        "tokens": 3900,
        "clipped": 150,
        "tail_clipped": 105,
        "clip_frac": pytest.approx(150 / 3900),
        "tail_share": pytest.approx(105 / 150),
        "worst_rounding": 0,
    }
    assert (
        clip["band-upper"]["tokens"],
        clip["band-upper"]["clipped"],
        clip["band-upper"]["tail_clipped"],
    ) == (
        4000,
        160,
        110,
    )
    # the unfinished run is not pooled; the mean of per-step fractions (6%) would differ from the pooled 4%
    assert clip["band-kl"]["runs"] == 4 and clip["band-kl"]["tokens"] == 3200
    assert clip["band-kl"]["clip_frac"] == pytest.approx(0.04)
    assert clip["band-kl"]["tail_share"] == pytest.approx(88 / 128)
    assert clip["grpo"]["worst_rounding"] < 1e-6


def test_side_counts(result: dict[str, Any]) -> None:
    sides = result["secondary"]["side_tokens"]
    # a 4-step run: 40 up through, 16 down through, 24 and 8 in the tail, 8 held up, 16 held down
    assert sides["band-upper"] == {
        "up_through": 200,
        "down_through": 80,
        "up_through_tail": 120,
        "down_through_tail": 40,
        "up_held": 40,
        "down_held": 80,
        "through": 280,
        "through_tail": 160,
        "held": 120,
        "runs_without_side_keys": 0,
    }
    assert sides["band-lower"]["up_through"] == 160 and sides["band-lower"]["through"] == 224
    assert set(sides["grpo"].values()) == {0}


def test_runs_that_never_took_off(result: dict[str, Any]) -> None:
    off = result["secondary"]["never_took_off"]
    assert off["grpo"] == {"never_took_off": 1, "of": 5, "seeds": [412]}
    assert off["band-upper"] == {"never_took_off": 1, "of": 5, "seeds": [410]}
    assert off["band-kl"] == {"never_took_off": 0, "of": 4, "seeds": []}  # 25.0 exactly is not below 25
    assert off["band-lower"] == {"never_took_off": 0, "of": 3, "seeds": []}
    assert off["all"] == {"never_took_off": 2, "of": 17}


def test_main_prints_and_writes_the_same_numbers(
    results_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rederive, "PLANNED_SEEDS", tuple(SEEDS))
    out = tmp_path / "out" / "rederived.json"
    assert rederive.main([str(results_dir), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    upper = data["primary"]["band-upper - grpo"]
    assert (
        f"band-upper - grpo: {upper['mean']:+.3f} [{upper['lo']:+.3f}, {upper['hi']:+.3f}] (97.5%, n = 5"
        in text
    )
    assert "verdict: interval below 0: lowers the entropy" in text
    assert "left out: seed 414: band-lower has no run" in text
    assert "clip 3.846% (150 of 3,900 tokens), tail share 70.00% (105 of 150)" in text
    assert data["secondary"]["never_took_off"]["all"] == {"never_took_off": 2, "of": 17}
    assert data["missing"] == {"band-lower": [414]}


def test_main_refuses_a_folder_without_runs(tmp_path: Path) -> None:
    assert rederive.main([str(tmp_path)]) == 2


def test_read_lines_prefers_the_plain_log_and_reads_a_cut_gzip_stream(tmp_path: Path) -> None:
    rows = [{"step": s, "policy/entropy": 1.0} for s in range(1, 201)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "metrics.jsonl").write_text(text[:40])  # a plain log in progress: one row, then a torn one
    (tmp_path / "metrics.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    got, torn, used = rederive.read_lines(tmp_path / "metrics.jsonl")
    assert (len(got), torn, used) == (1, 1, "metrics.jsonl")
    (tmp_path / "metrics.jsonl").unlink()
    assert len(rederive.read_lines(tmp_path / "metrics.jsonl")[0]) == 200
    packed = gzip.compress(text.encode())
    (tmp_path / "metrics.jsonl.gz").write_bytes(packed[: len(packed) // 2])  # cut short
    got, _, used = rederive.read_lines(tmp_path / "metrics.jsonl")
    assert used == "metrics.jsonl.gz" and 0 < len(got) < 200
    assert [r["step"] for r in got] == list(range(1, len(got) + 1))
    assert rederive.read_lines(tmp_path / "absent.jsonl") == ([], 0, None)


def test_a_log_short_of_the_run_is_named(result: dict[str, Any]) -> None:
    notes = runs_of(result)[("grpo", 411)]["notes"]
    assert "entropy logged from step 1 to 4, not 1 to 160" in notes
    assert not any("logged from" in n for n in runs_of(result)[("band-kl", 414)]["notes"])  # unfinished


def test_step_rows_keep_the_last_row_of_a_step_and_drop_the_closing_row() -> None:
    rows = [
        {"step": 2, "policy/entropy": 5.0},
        {"step": 1, "policy/entropy": 1.0},
        {"step": 2, "policy/entropy": 3.0},  # written again (the later row stands)
        {"step": 2, "train_runtime": 9.0},  # TRL's closing row
        {"policy/entropy": 7.0},  # no step
        {"step": True, "policy/entropy": 7.0},
    ]
    got = rederive.by_step(rows)
    assert list(got) == [1, 2]
    assert got[2] == {"step": 2, "policy/entropy": 3.0}


def test_the_curve_entropy_is_the_held_out_curves_last_point(tmp_path: Path) -> None:
    """Two readings of the final held-out entropy: the final evaluation's (``results.json``) and the held-out
    curve's last point (``heldout.jsonl``); one evaluation on the curve gives none."""
    folder = write_run(tmp_path, "grpo", 410, constant(1.0), entropy_eval=0.7)
    rows = [{"step": 0, "entropy": 2.0}, {"step": 160, "entropy": 0.4}, {"step": 80}]
    (folder / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = rederive.read_run(folder, "grpo", 410)
    assert run.final_entropy == 0.7 and run.curve_entropy == 0.4
    (folder / "heldout.jsonl").write_text(json.dumps(rows[1]) + "\n")
    assert rederive.read_run(folder, "grpo", 410).curve_entropy is None
