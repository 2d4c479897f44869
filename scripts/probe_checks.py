"""The numbers of ``bandpo probe`` on SmolLM2-135M that docs/smollm2.md and docs/results.md quote, recomputed from
its committed output (docs/results/probe-smollm2/results.json), each over the batches it names; each is asserted to
round to what the docs write. Every statistic comes from ``bandpo_lab.experiments.report.stats`` (``mean_ci``,
``compare_methods``: the same code as the reports).

    python scripts/probe_checks.py                     # reads docs/results/probe-smollm2/results.json
    python scripts/probe_checks.py RESULTS_DIR         # a folder holding probe-smollm2/results.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bandpo_lab.experiments.report.stats import compare_methods, mean_ci

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "results"


def probe() -> None:
    """``bandpo probe`` on SmolLM2-135M: the numbers of docs/smollm2.md's section and docs/results.md's, from results.json."""
    path = ROOT / "probe-smollm2" / "results.json"
    if not path.is_file():
        print("probe: no export at", path)
        return
    batches = json.loads(path.read_text())["batches"]
    # a batch without signal (every group all right or all wrong) has no gradient: nothing is clipped or moves
    signal = [b for b in batches if b["share_signal"] > 0]
    print(
        f"bandpo probe, SmolLM2-135M: {len(batches)} batches, {len(signal)} with signal "
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
    probe()
