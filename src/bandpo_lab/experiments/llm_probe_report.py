"""The summary and the report of :mod:`bandpo_lab.experiments.llm_probe`: the ``p_old`` bins its counts use, the
mean and 95% t-interval over batches of every metric (:func:`summarize_probe`), the entropy change attributed to
each side of Band (:func:`attribution`), and the Markdown tables and the figure ``bandpo probe`` writes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo_lab.experiments.report.document import markdown_table

P_OLD_BINS = (0.0, 1e-3, 1e-2, 0.2, 1.0 + 1e-9)
"""Edges of the ``p_old`` bins the probe reports (half-open ``[a, b)``; the last bin includes p = 1)."""
BIN_NAMES = ("p<1e-3", "1e-3<=p<0.01", "0.01<=p<0.2", "p>=0.2")

SUMMARY_METRICS = (
    "clip_frac",
    "clip_frac_up",
    "clip_frac_down",
    "tail_share",
    *(f"clip_frac[{b}]" for b in BIN_NAMES),
    "up_through_frac",
    "down_through_frac",
    "up_through_grad_share",
    "down_through_grad_share",
    "gain_pos_adv_p_below_0.2",
    "gain_pos_adv_p_below_0.01",
    "entropy_after",
    "kl_after",
)
BATCH_METRICS = (
    "p_old_below_0.2",
    "p_old_below_0.01",
    "p_old_below_1e-3",
    "pos_adv_p_old_below_0.2",
    "pos_adv_p_old_below_0.01",
    "entropy_old",
    "share_signal",
)


def summarize_probe(batches: Sequence[Mapping[str, Any]], rules: Sequence[str]) -> dict[str, Any]:
    """Mean and 95% t-interval over batches of every batch metric and every rule's metric (``None`` values, e.g.
    a tail share with nothing clipped, are left out and ``n`` says how many batches remain)."""
    from bandpo_lab.experiments.report.stats import mean_ci

    def stat(values: Sequence[Any]) -> dict[str, Any]:
        s = mean_ci([v for v in values if v is not None])
        return {"mean": s["mean"], "ci95": s["ci95"], "n": s["n"]}

    return {
        "by_update": {r: by_update([b["rules"][r]["per_update"] for b in batches]) for r in rules},
        "batch": {k: stat([b[k] for b in batches]) for k in BATCH_METRICS},
        "rules": {r: {k: stat([b["rules"][r][k] for b in batches]) for k in SUMMARY_METRICS} for r in rules},
        "attribution": {k: stat(v) for k, v in attribution(batches, rules).items()},
    }


def pool(updates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The counts of ``updates`` (the probe's per-update records) summed, then divided: the clip shares, overall, by
    side and by ``p_old`` bin, the tail share, and per side the tokens let through beyond GRPO's interval."""

    def total(key: str) -> Any:
        return sum(u[key] for u in updates)

    def binned(key: str) -> list[int]:
        return [sum(u[key][i] for u in updates) for i in range(len(BIN_NAMES))]

    live, clipped, mass = total("n_live"), total("n_clipped"), total("grad_mass")
    clip_bins = binned("clipped_by_bin")
    out: dict[str, Any] = {}
    for side in ("up", "down"):
        n = total(f"n_{side}_through")
        out[f"{side}_through_frac"] = n / live if live else 0.0
        out[f"{side}_through_grad_share"] = total(f"grad_mass_{side}_through") / mass if mass else 0.0
        out[f"n_{side}_through"] = n
        out[f"{side}_through_by_bin"] = binned(f"{side}_through_by_bin")
    out.update(
        {
            "clip_frac": clipped / live if live else 0.0,
            "clip_frac_up": total("n_up") / live if live else 0.0,
            "clip_frac_down": total("n_down") / live if live else 0.0,
            "tail_share": sum(clip_bins[:3]) / clipped if clipped else None,  # p_old < 0.2
            "n_clipped": clipped,
        }
    )
    for name, n_live, n_clip in zip(BIN_NAMES, binned("live_by_bin"), clip_bins):
        out[f"clip_frac[{name}]"] = n_clip / n_live if n_live else None
    return out


_BY_UPDATE_KEYS = (
    "n_up_through",
    "n_down_through",
    "clip_frac",
    "tail_share",
    "up_through_frac",
    "down_through_frac",
)


def by_update(runs: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per update index ``k`` (1..K), pooled over batches (:func:`pool`): the tokens with a non-zero advantage, the
    clipped share, the tail share of clipping (``p_old < 0.2``), and the per-side tokens let through beyond GRPO's
    interval as shares of those tokens. ``runs``: each batch's ``per_update`` list of one rule."""
    out = []
    for us in zip(*runs):
        p = pool(us)
        out.append(
            {
                "update": us[0]["update"],
                "n_live": sum(u["n_live"] for u in us),
                "n_clipped": p["n_clipped"],
                "n_tail_clipped": sum(sum(u["clipped_by_bin"][:3]) for u in us),
                **{k: p[k] for k in _BY_UPDATE_KEYS},
            }
        )
    return out


ATTRIBUTION_RULES = ("grpo", "band", "band_upper", "band_lower")
"""The rules :func:`attribution` needs, all four on the same batches."""
ATTRIBUTION_PARTS = {
    "upper": "H(band_upper) - H(grpo)",  # Band's upper side alone
    "lower": "H(band_lower) - H(grpo)",  # its lower side alone
    "both": "H(band) - H(grpo)",
    "interaction": "both - upper - lower",
}
"""The parts :func:`attribution` splits the entropy change into, with their definitions (H: ``entropy_after``)."""


def attribution(batches: Sequence[Mapping[str, Any]], rules: Sequence[str]) -> dict[str, list[float]]:
    """The entropy change after ``K`` updates attributed to each side of Band (:data:`ATTRIBUTION_PARTS`), per batch
    (paired: every rule starts from the same weights on the same batch), in nats. ``{}`` unless all of
    :data:`ATTRIBUTION_RULES` ran."""
    if not set(ATTRIBUTION_RULES) <= set(rules):
        return {}
    out: dict[str, list[float]] = {part: [] for part in ATTRIBUTION_PARTS}
    for b in batches:
        h = {r: b["rules"][r]["entropy_after"] for r in ATTRIBUTION_RULES}
        upper, lower, both = (h[r] - h["grpo"] for r in ("band_upper", "band_lower", "band"))
        for part, value in zip(out, (upper, lower, both, both - upper - lower)):
            out[part].append(value)
    return out


def fmt_ci(stat: Mapping[str, Any]) -> str:
    """``mean ± ci95 (n=..)`` to 3 significant digits, with ``n`` always printed; ``-`` when there is no value."""
    if stat["mean"] is None:
        return f"- (n={stat['n']})"
    if stat["ci95"] is None:
        return f"{stat['mean']:.3g} (n={stat['n']})"
    return f"{stat['mean']:.3g} ± {stat['ci95']:.3g} (n={stat['n']})"


def markdown(result: Mapping[str, Any], title: str) -> str:
    """The probe's tables: the batch's token distribution, then per rule its clipping, what it lets through beyond
    GRPO's interval, its clipping by update index and (with Band's sides) the entropy attribution."""
    summary = result["summary"]
    rules = summary["rules"]
    through = []
    for rule in rules:
        for side, name in (("up", "upper (A > 0, r > 1.2)"), ("down", "lower (A < 0, r < 0.8)")):
            per_batch = [b["rules"][rule] for b in result["batches"]]
            by_bin = [sum(r[f"{side}_through_by_bin"][i] for r in per_batch) for i in range(len(BIN_NAMES))]
            share = fmt_ci(rules[rule][f"{side}_through_grad_share"])
            through.append([rule, name, sum(by_bin), *by_bin, share])
    updates = []
    for rule, rows in summary.get("by_update", {}).items():
        for u in rows:
            clipped = f"{u['n_clipped']} ({100 * u['clip_frac']:.2f}%)"
            tail = "-" if u["tail_share"] is None else f"{100 * u['tail_share']:.0f}%"
            updates.append(
                [rule, u["update"], u["n_live"], clipped, tail, u["n_up_through"], u["n_down_through"]]
            )
    blocks = [
        f"# {title}",
        "Mean ± 95% t-interval over batches (n = batches with a value).",
        "## The sampled tokens",
        markdown_table(["metric", "value"], [[k, fmt_ci(summary["batch"][k])] for k in BATCH_METRICS]),
        "## Per rule, updates 2..K (clip shares pooled over updates) and after K updates",
        markdown_table(
            ["rule", *SUMMARY_METRICS],
            [[rule, *(fmt_ci(stats[c]) for c in SUMMARY_METRICS)] for rule, stats in rules.items()],
        ),
        "## Per side: tokens with a gradient where GRPO's [0.8, 1.2] would clip them (updates 2..K, all batches)",
        markdown_table(["rule", "side", "tokens", *BIN_NAMES, "share of the gradient mass"], through),
        "## By update index (all batches pooled; counts of tokens with a non-zero advantage)",
        markdown_table(
            ["rule", "update", "tokens", "clipped", "tail share of clipping", "up through", "down through"],
            updates,
        ),
    ]
    if summary.get("attribution"):
        blocks += [
            "## Entropy after K updates, attributed to Band's sides (nats, paired over batches)",
            markdown_table(
                ["part", "definition", "change"],
                [
                    [part, words, fmt_ci(summary["attribution"][part])]
                    for part, words in ATTRIBUTION_PARTS.items()
                ],
            ),
        ]
    return "\n\n".join(blocks) + "\n"


def figure(result: Mapping[str, Any], path: Path) -> Path:
    """Two panels: the histogram of ``log10 p_old`` of the sampled tokens, and each rule's clipped share by
    ``p_old`` bin (updates 2..K, mean over batches)."""
    from bandpo._optional import pyplot
    from bandpo_lab.plots import save_figure

    fig, (ax1, ax2) = pyplot().subplots(1, 2, figsize=(11, 4))
    values = [v for b in result["batches"] for v in b["p_old_values"]]
    logs = [math.log10(max(v, 1e-12)) for v in values]
    ax1.hist(logs, bins=40, color="0.4")
    for edge in (-3, -2, math.log10(0.2)):
        ax1.axvline(edge, color="k", lw=0.8, ls=":")
    ax1.set_xlabel("log10 p_old of the sampled token")
    ax1.set_ylabel("tokens")
    ax1.set_title(f"sampled tokens ({len(values)} over {len(result['batches'])} batches)")
    rules = list(result["summary"]["rules"])
    width = 0.8 / max(len(rules), 1)
    for j, rule in enumerate(rules):
        heights = [result["summary"]["rules"][rule][f"clip_frac[{b}]"]["mean"] or 0.0 for b in BIN_NAMES]
        ax2.bar([i + j * width for i in range(len(BIN_NAMES))], heights, width, label=rule)
    ax2.set_xticks([i + 0.4 - width / 2 for i in range(len(BIN_NAMES))], BIN_NAMES)
    ax2.set_ylabel("share of the bin's tokens clipped")
    ax2.set_title("clipped by p_old (updates 2..K)")
    ax2.legend()
    fig.tight_layout()
    return save_figure(fig, path)
