"""The numbers behind docs/results.md's and docs/study.md's summary sentences, recomputed from the committed exports.

    python scripts/study_checks.py                    # reads docs/results/study-{grid,final,recipe,smollm2}

Prints (1) the tail share of clipping under both conventions, (2) entropy ratios and paired differences, (3) the
comparisons the summaries quote that the reports do not print (a seed left out, Band-KL vs DPPO-KL, the delta
screen), (4) Study 3's per-seed outcomes and paired differences, the power its 5 seeds had and its screens,
(5) ``bandpo probe`` on SmolLM2-135M (docs/results/probe-smollm2/results.json): the numbers docs/smollm2.md and
docs/results.md quote, each over the batches it names. Every number comes from ``bandpo_lab.experiments.report`` (``load_runs``,
``run_summary``, ``compare_methods``, ``mean_ci``: the same code as the reports) applied to the per-run files;
sections 4 and 5 also assert that each number the docs quote rounds to what they write.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from pathlib import Path

from bandpo_lab.experiments.report.runs import load_runs, run_summary
from bandpo_lab.experiments.report.stats import compare_methods, mean_ci

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
GRID = {"A": "beta 0.1", "B": "beta 0.02", "C": "beta 0", "D": "beta 0.1, lr 1e-3", "E": "beta 0.1, 8 updates",
        "F": "beta 0, lr 1e-3, 8 updates"}  # fmt: skip
STUDIES = {"final": "study-final (beta 0)", "recipe": "study-recipe (beta 0.1)"}


@functools.cache
def summaries(export: Path) -> list[tuple[str, int, dict]]:
    """``(label, seed, run_summary + per_step_tail)`` of every run of one export."""
    out = []
    for run in load_runs(export):
        summary = run_summary(run)
        # the per-step convention: the mean over logged steps of clip/tail_share (steps without clipping: 0)
        values = [float(r["clip/tail_share"]) for r in run.metrics if r.get("clip/tail_share") is not None]
        summary["per_step_tail"] = statistics.fmean(values) if values else None
        out.append((run.label, run.seed, summary))
    return out


def per_seed(export: Path, key: str) -> dict[str, dict[int, float]]:
    """``{label: {seed: value}}`` of one ``run_summary`` key (``per_step_tail`` for the per-step convention)."""
    out: dict[str, dict[int, float]] = {}
    for label, seed, summary in summaries(export):
        value = summary.get(key)
        if value is not None:
            out.setdefault(label, {})[seed] = value
    return out


def exports() -> dict[str, Path]:
    paths = {f"grid {cell} ({what})": ROOT / "study-grid" / cell for cell, what in GRID.items()}
    paths.update({what: ROOT / f"study-{name}" for name, what in STUDIES.items()})
    return paths


def diff(
    export: Path, key: str, ref: str, other: str, drop: tuple[int, ...] = (), scale: float = 100.0
) -> str:
    values = per_seed(export, key)
    a = {s: v for s, v in values[ref].items() if s not in drop}
    b = {s: v for s, v in values[other].items() if s not in drop}
    c = compare_methods(a, b)
    return f"{c['diff'] * scale:+.2f} [{c['lo'] * scale:+.2f}, {c['hi'] * scale:+.2f}] (paired, n = {c['n']})"


def tail_shares() -> None:
    print(
        "(1) Tail share of clipping (clipped tokens with p_old < 0.2 / all clipped tokens), GRPO and Band-KL,"
    )
    print(
        "    method mean over seeds [range over runs], in %; pooled = over a run's logged steps (the reports),"
    )
    print("    per-step = mean over logged steps of clip/tail_share (docs/tiny-task.md's probes)")
    for name, path in exports().items():
        cells = []
        for key, conv in (("train/tail_share", "pooled"), ("per_step_tail", "per-step")):
            values = per_seed(path, key)
            for label in ("grpo", "band-kl"):
                v = list(values[label].values())
                cells.append(
                    f"{conv} {label} {100 * statistics.fmean(v):.1f} [{100 * min(v):.1f}, {100 * max(v):.1f}]"
                )
        print(f"  {name}: " + "; ".join(cells))


def entropies() -> None:
    print("(2) Entropy, Band-KL / GRPO (ratio of method means); eval = held-out, train = last logged step")
    for name, path in exports().items():
        parts = []
        for key, what in (("train/entropy_last", "train"), ("entropy", "eval")):
            v = per_seed(path, key)
            parts.append(
                f"{what} {statistics.fmean(v['band-kl'].values()) / statistics.fmean(v['grpo'].values()):.2f}"
            )
        print(f"  {name}: " + ", ".join(parts))
    final = ROOT / "study-final"
    ent = per_seed(final, "entropy")
    g, b = ent["grpo"], ent["band-kl"]
    print(
        f"  study-final eval entropy per seed, GRPO: {', '.join(f'{s}: {v:.3f}' for s, v in sorted(g.items()))}"
    )
    print(
        f"  study-final eval entropy per seed, Band-KL: {', '.join(f'{s}: {v:.3f}' for s, v in sorted(b.items()))}"
    )
    print(
        f"  study-final Band-KL - GRPO, eval entropy (nats): {diff(final, 'entropy', 'grpo', 'band-kl', scale=1)}"
    )
    print(
        f"  study-final ratio of medians: {statistics.median(b.values()) / statistics.median(g.values()):.2f}"
    )
    rec = ROOT / "study-recipe"
    print(
        f"  study-recipe Band-KL - GRPO, eval entropy (nats): {diff(rec, 'entropy', 'grpo', 'band-kl', scale=1)}"
    )


def comparisons() -> None:
    print("(3) Differences in points (mean@32 for the studies, pass@1 for the grid), paired 95% t intervals")
    final, rec, a = ROOT / "study-final", ROOT / "study-recipe", ROOT / "study-grid" / "A"
    acc = per_seed(final, "mean@32")["grpo"]
    print(
        f"  study-final GRPO mean@32 per seed: {', '.join(f'{s}: {100 * v:.2f}' for s, v in sorted(acc.items()))}"
    )
    for method in ("band-kl", "band-tv", "band-chi2", "dppo-kl", "clip_higher", "dcpo"):
        print(
            f"  study-final {method} - grpo: {diff(final, 'mean@32', 'grpo', method)}; without seed 100: "
            f"{diff(final, 'mean@32', 'grpo', method, drop=(100,))}"
        )
    print(f"  study-final dppo-kl - band-kl: {diff(final, 'mean@32', 'band-kl', 'dppo-kl')}")
    print(f"  study-recipe dppo-kl - band-kl: {diff(rec, 'mean@32', 'band-kl', 'dppo-kl')}")
    for method in ("band-kl-0.02", "band-kl", "band-kl-0.1"):
        print(f"  grid A (600 steps, 2 seeds) {method} - grpo, pass@1: {diff(a, 'pass@1', 'grpo', method)}")


def smollm2() -> None:
    """Study 3 (SmolLM2-135M-Instruct): per-seed outcomes and the registered paired differences."""
    path = ROOT / "study-smollm2"
    if not path.is_dir():
        print("(4) Study 3: no export at", path)
        return
    print("(4) Study 3 (SmolLM2-135M-Instruct, arith): per seed, and Band-KL - GRPO paired 95% t intervals")
    keys = {
        "mean@8": 100.0,
        "pass@8": 100.0,
        "entropy": 1.0,
        "train/tail_share": 100.0,
        "train/clip_frac": 100.0,
    }
    for key, scale in keys.items():
        values = per_seed(path, key)
        for label in ("grpo", "band-kl"):
            digits = 3 if scale == 1.0 else 2
            row = ", ".join(f"{s}: {v * scale:.{digits}f}" for s, v in sorted(values.get(label, {}).items()))
            print(f"  {key} {label}: {row}")
        if len(values.get("grpo", {})) >= 2 and len(values.get("band-kl", {})) >= 2:
            print(f"  {key} band-kl - grpo: {diff(path, key, 'grpo', 'band-kl', scale=scale)}")
    acc = per_seed(path, "mean@8")
    seeds = [300, 301, 302, 303, 304]
    if sorted(acc.get("grpo", {})) != seeds or sorted(acc.get("band-kl", {})) != seeds:
        print("  (the checks of the quoted numbers need seeds 300-304 of both methods)")
        return
    c = compare_methods(acc["grpo"], acc["band-kl"])
    check("Study 3 mean@8 band-kl - grpo (points)", 100 * c["diff"], "+1.6", 1)
    check("  its paired 95% interval: lower end (the deficit it excludes)", 100 * c["lo"], "-6.8", 1)
    check("  upper end (the advantage it excludes)", 100 * c["hi"], "+9.9", 1)
    from power import minimum_detectable, power  # scripts/power.py

    diffs = [100 * (acc["band-kl"][s] - acc["grpo"][s]) for s in sorted(acc["grpo"])]
    sd, n = statistics.stdev(diffs), len(diffs)
    check("  sd of the per-seed differences (points)", sd, "6.7", 1)
    mdd = minimum_detectable(sd, n, 0.8)
    check(f"  smallest difference {n} seeds detect at 80% power (points)", mdd, "11.3", 1)
    check("  power at +2 points (%)", 100 * power(2.0, sd, n), "8", 0)
    check("  power at +5 points (%)", 100 * power(5.0, sd, n), "25", 0)
    print(
        f"  (at the rounded sd 6.7, as `scripts/power.py --sd 6.7 --n 5 --effect 2 5 --mdd` takes it: "
        f"power {100 * power(2.0, 6.7, 5):.1f}% / {100 * power(5.0, 6.7, 5):.1f}%)"
    )
    for what, seeds_in, shown in (
        ("the screen reported (seeds 300-301)", (300, 301), "+5.6 [-83.3, +94.6]"),
        (
            "the registered 3-seed screen (seeds 300-302), computed afterwards",
            (300, 301, 302),
            "+3.75 [-15.4, +22.9]",
        ),
    ):
        c = compare_methods(
            {s: v for s, v in acc["grpo"].items() if s in seeds_in},
            {s: v for s, v in acc["band-kl"].items() if s in seeds_in},
        )
        d = 2 if shown.startswith("+3.75") else 1
        got = f"{100 * c['diff']:+.{d}f} [{100 * c['lo']:+.1f}, {100 * c['hi']:+.1f}]"
        print(f"  {what}: {got} (paired, n = {c['n']}; docs: {shown})")
        assert got == shown, f"{what}: {got}, the docs write {shown}"


def check(what: str, value: float, shown: str, digits: int) -> None:
    """Print ``value`` and assert that, rounded to ``digits`` decimals, it is the ``shown`` number the docs write."""
    rounded = f"{value:+.{digits}f}" if shown.startswith(("+", "-")) else f"{value:.{digits}f}"
    print(f"  {what}: {value:.4g} (docs: {shown})")
    assert rounded == shown, f"{what}: {value!r} rounds to {rounded}, the docs write {shown}"


def probe() -> None:
    """``bandpo probe`` on SmolLM2-135M: the numbers of docs/smollm2.md's section and docs/results.md's, from results.json."""
    path = ROOT / "probe-smollm2" / "results.json"
    if not path.is_file():
        print("(5) probe: no export at", path)
        return
    batches = json.loads(path.read_text())["batches"]
    # a batch without signal (every group all right or all wrong) has no gradient: nothing is clipped or moves
    signal = [b for b in batches if b["share_signal"] > 0]
    print(
        f"(5) bandpo probe, SmolLM2-135M: {len(batches)} batches, {len(signal)} with signal "
        f"({', '.join(str(b['batch']) for b in signal)}); mean ± 95% t half-width over batches, in %"
    )

    def stat(what: str, values: list[float], shown: str, scale: float = 100.0, digits: int = 1) -> None:
        m = mean_ci(values)
        print(
            f"  {what}: {scale * m['mean']:.4g} ± {scale * m['ci95']:.3g} (n = {m['n']}, per batch "
            f"{scale * m['min']:.3g}-{scale * m['max']:.3g}; docs: {shown})"
        )
        got = f"{scale * m['mean']:.{digits}f} ± {scale * m['ci95']:.{digits}f}"
        assert got == shown, f"{what}: {got}, the docs write {shown}"

    n_tokens = sum(len(b["p_old_values"]) for b in batches)
    for t, key, shown in (
        (0.2, "p_old_below_0.2", "45.8 ± 4.4"),
        (0.01, "p_old_below_0.01", "16.4 ± 3.1"),
        (1e-3, "p_old_below_1e-3", "6.3 ± 1.9"),
    ):
        stat(
            f"sampled tokens with p_old < {t:g}, all {len(batches)} batches", [b[key] for b in batches], shown
        )
        pooled = sum(v < t for b in batches for v in b["p_old_values"]) / n_tokens
        print(f"    pooled over the {n_tokens} tokens: {100 * pooled:.1f}%")
    for t, shown in ((0.2, "37.8 ± 4.2"), (0.01, "12.9 ± 3.0")):
        values = [
            b[f"pos_adv_p_old_below_{t:g}"] for b in batches if b[f"pos_adv_p_old_below_{t:g}"] is not None
        ]
        stat(f"  of the positive-advantage tokens, p_old < {t:g}", values, shown)
    stat(
        "entropy of the sampling policy (nats), all batches",
        [b["entropy_old"] for b in batches],
        "2.22 ± 0.15",
        1.0,
        2,
    )
    stat("  over the batches with signal", [b["entropy_old"] for b in signal], "2.22 ± 0.19", 1.0, 2)
    rows = {  # updates 2-3 pooled within a batch, then mean over the batches with signal
        "clip_frac": ("26.7 ± 4.9", "2.5 ± 1.3", 100.0, 1),
        "clip_frac_up": ("8.3 ± 2.6", "1.4 ± 0.6", 100.0, 1),
        "clip_frac_down": ("18.4 ± 3.3", "1.1 ± 1.0", 100.0, 1),
        "tail_share": ("85 ± 5", "48 ± 21", 100.0, 0),
        "clip_frac[p<1e-3]": ("60 ± 10", "1.3 ± 2.6", 100.0, None),
        "clip_frac[1e-3<=p<0.01]": ("55 ± 5", "0.7 ± 1.1", 100.0, None),
        "clip_frac[0.01<=p<0.2]": ("44 ± 3", "3.2 ± 0.9", 100.0, None),
        "clip_frac[p>=0.2]": ("7.8 ± 4.5", "2.7 ± 2.9", 100.0, 1),
        "gain_pos_adv_p_below_0.2": ("0.043 ± 0.013", "0.072 ± 0.021", 1.0, 3),
        "gain_pos_adv_p_below_0.01": ("0.0024 ± 0.0016", "0.0076 ± 0.0065", 1.0, 4),
        "entropy_after": ("2.19 ± 0.19", "2.15 ± 0.20", 1.0, 2),
        "kl_after": ("0.025 ± 0.008", "0.056 ± 0.015", 1.0, 3),
    }
    for key, (grpo, band, scale, digits) in rows.items():
        for rule, shown in (("grpo", grpo), ("band", band)):
            d = digits if digits is not None else (0 if rule == "grpo" else 1)
            stat(
                f"{rule} {key}, batches with signal", [b["rules"][rule][key] for b in signal], shown, scale, d
            )
    print("  the same rows averaged over all batches, the one without signal in as 0 (results.md's summary):")
    for key in ("clip_frac", "entropy_after", "kl_after"):
        parts = []
        for rule in ("grpo", "band"):
            m = mean_ci([b["rules"][rule][key] for b in batches])
            parts.append(f"{rule} {m['mean']:.4g} ± {m['ci95']:.3g} (n = {m['n']})")
        print(f"    {key}: " + ", ".join(parts))
    # tokens with p_old < 0.01 (bins p<1e-3 and 1e-3<=p<0.01) and a non-zero advantage clipped at each update
    for rule, shown in (("grpo", ("39 ± 9", "75 ± 6")), ("band", ("0.4 ± 1.1", "1.4 ± 1.9"))):
        for update, want in zip((2, 3), shown):
            shares = []
            for b in signal:
                u = b["rules"][rule]["per_update"][update - 1]
                assert u["update"] == update
                shares.append(sum(u["clipped_by_bin"][:2]) / sum(u["live_by_bin"][:2]))
            stat(
                f"{rule}: p_old < 0.01 tokens clipped at update {update}",
                shares,
                want,
                100.0,
                0 if rule == "grpo" else 1,
            )
    for key, shown, spread in (
        ("gain_pos_adv_p_below_0.2", "1.7", "1.3-2.1"),
        ("gain_pos_adv_p_below_0.01", "3.2", "1.5-4.1"),
        ("kl_after", "2.2", "1.7-3.2"),
    ):
        g = [b["rules"]["grpo"][key] for b in signal]
        r = [b["rules"]["band"][key] for b in signal]
        per_batch = [y / x for x, y in zip(g, r)]
        ratio = statistics.fmean(r) / statistics.fmean(g)
        got = (f"{ratio:.1f}", f"{min(per_batch):.1f}-{max(per_batch):.1f}")
        print(
            f"  band / grpo, {key}: ratio of means {ratio:.3f}, per batch "
            f"{', '.join(f'{x:.2f}' for x in per_batch)} (docs: {shown}x, per batch {spread}x)"
        )
        assert got == (shown, spread), f"{key}: {got}, the docs write {shown}, {spread}"
    g = {b["batch"]: b["rules"]["grpo"]["entropy_after"] for b in signal}
    r = {b["batch"]: b["rules"]["band"]["entropy_after"] for b in signal}
    c = compare_methods(g, r)
    print(
        f"  entropy after, band - grpo (nats): {c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] (paired, "
        f"n = {c['n']}; docs: -0.04 [-0.14, +0.06])"
    )
    assert f"{c['diff']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}]" == "-0.04 [-0.14, +0.06]"


if __name__ == "__main__":
    tail_shares()
    entropies()
    comparisons()
    smollm2()
    probe()
