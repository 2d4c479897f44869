"""The mechanism run's Markdown tables: every entry states the number of seeds its statistic is over."""

from __future__ import annotations

import re

from mechanism_report import markdown_tables


def _row(rule: str, metric: str, value: float, seeds: int, **kw) -> dict:
    row = {
        "scenario": "rare_reward",
        "updates_per_batch": 8,
        "lr": 3.0,
        "rare_p": 0.01,
        "rule": rule,
        "metric": metric,
        "stat": "median",
        "value": value,
        "ci_low": value - 1,
        "ci_high": value + 1,
        "seeds": seeds,
        "paired": None,
    }
    row.update(kw)
    return row


def _entries(markdown: str, metric: str) -> list[str]:
    """The table cells (rule columns) of one metric's only data row."""
    block = markdown.split(f"### {metric} ")[1].split("\n\n")[1]
    data_row = block.splitlines()[2]
    return [c.strip() for c in data_row.strip("|").split("|")][1:]


def test_every_entry_prints_its_seed_count_also_when_all_rules_share_it() -> None:
    rows = [
        _row("grpo", "steps_to_find", 25.5, 30),
        _row("band", "steps_to_find", 13.0, 30),
        _row("grpo", "steps_to_find_if_found", 12.5, 18),
        _row("band", "steps_to_find_if_found", 3.0, 19),
    ]
    md = markdown_tables(rows)
    assert _entries(md, "steps_to_find") == ["25.5 [24.5, 26.5] n=30", "13 [12, 14] n=30"]
    assert _entries(md, "steps_to_find_if_found") == ["12.5 [11.5, 13.5] n=18", "3 [2, 4] n=19"]


def test_seed_count_comes_before_the_paired_comparison() -> None:
    rows = [
        _row(
            "grpo",
            "mean_entropy",
            0.9,
            30,
            paired="ratio",
            paired_value=1.0,
            paired_ci_low=1.0,
            paired_ci_high=1.0,
        ),
        _row(
            "band",
            "mean_entropy",
            0.5,
            30,
            paired="ratio",
            paired_value=0.57,
            paired_ci_low=0.55,
            paired_ci_high=0.59,
        ),
    ]
    grpo, band = _entries(markdown_tables(rows), "mean_entropy")
    assert grpo == "0.9 [-0.1, 1.9] n=30"  # the reference rule gets no comparison with itself
    assert band == "0.5 [-0.5, 1.5] n=30 (x0.57 [0.55, 0.59] vs grpo)"
    assert all(re.search(r"\] n=\d+", e) for e in (grpo, band))
