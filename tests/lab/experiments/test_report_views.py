"""The report's views (Markdown, HTML, CSV) against recorded output and against each other.

``report_expected/`` holds files written by the report before it was split into data and views (the single module
``bandpo_lab/experiments/report.py``, commit 79969ac) from the synthetic directories built here; the package must
reproduce them byte for byte. After an intended change of the report's text or tables, rewrite them with
``BANDPO_UPDATE_EXPECTED=1 pytest tests/lab/experiments/test_report_views.py`` and review the diff.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import pytest
from synthetic_runs import make_run

from bandpo_lab.experiments.report import build_report

EXPECTED = Path(__file__).parent / "report_expected"
FILES = ("report.md", "results.md", "results.csv", "runs.csv")


def _check_recorded(report: Path, case: str, name: str) -> None:
    expected = EXPECTED / case / name
    actual = (report / name).read_text()
    if os.environ.get("BANDPO_UPDATE_EXPECTED"):
        expected.write_text(actual)
    assert actual == expected.read_text(), f"{name} differs from {expected}"


@pytest.mark.parametrize("name", FILES)
def test_report_of_three_methods_is_the_recorded_one(report: Path, name: str) -> None:
    """The shared fixture (3 methods x 3 seeds, baseline, held-out curves, reference grpo, smooth 2)."""
    _check_recorded(report, "three_methods", name)


def test_report_without_a_win_and_with_a_missing_run_is_the_recorded_one(tmp_path: Path) -> None:
    """Two seeds that do not separate the methods, an unfinished third seed, no baseline, no figures."""
    root = tmp_path / "cmp"
    for seed in (0, 1):
        make_run(root, "grpo", "grpo", {}, seed, 0, 0.2 + 0.01 * seed, 0.0)
        make_run(root, "band-kl", "band", {"divergence": "kl"}, seed, 1, 0.19 + 0.03 * seed, 0.01)
    make_run(root, "band-kl", "band", {"divergence": "kl"}, 2, 1, 0.0, 0.01, finished=False)
    report = build_report(root, seeds=[0, 1, 2], figures=False)
    for name in FILES:
        _check_recorded(report, "no_win", name)


# ------------------------------------------------------------------------------------------ md vs html
def _markdown_items(text: str) -> list[tuple[str, ...]]:
    """The document in ``report.md``: headings, paragraphs, list items, table rows (cells), figure captions."""
    items: list[tuple[str, ...]] = []
    caption = None
    for line in text.splitlines():
        if not line or line.startswith("|---"):
            continue
        if line.startswith("#"):
            level, _, title = line.partition(" ")
            items.append((f"h{len(level)}", title))
        elif line.startswith("| "):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            items.append(("row", *[c.strip().replace("\\|", "|") for c in cells]))
        elif line.startswith("- "):
            items.append(("li", line[2:]))
        elif m := re.fullmatch(r"!\[(.*)\]\(figures/[\w.]+\)", line):
            caption = m.group(1)
            items.append(("figure", caption))
        elif line == f"*{caption}*":
            caption = None  # the caption under the image
        else:
            items.append(("p", line))
    return items


def _html_items(text: str) -> list[tuple[str, ...]]:
    """The same items read from ``report.html``."""
    items: list[tuple[str, ...]] = []
    for m in re.finditer(r"<(h[123]|p|li|tr|figure)>(.*?)</\1>", text, flags=re.DOTALL):
        tag, inner = m.groups()
        if tag == "tr":
            items.append(("row", *[html.unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", inner)]))
        elif tag == "figure":
            alt = re.search(r"<img alt='(.*?)' src='data:image/png;base64,", inner)
            caption = re.search(r"<figcaption>(.*?)</figcaption>", inner)
            assert alt and caption and alt.group(1) == caption.group(1)
            items.append(("figure", html.unescape(caption.group(1))))
        else:
            items.append((tag, html.unescape(inner)))
    return items


def test_markdown_and_html_show_the_same_document(report: Path) -> None:
    md = _markdown_items((report / "report.md").read_text())
    page = _html_items((report / "report.html").read_text())
    assert md == page
    rows = [item for item in md if item[0] == "row"]
    assert len(rows) == 2 + 4 + 9  # two headers, starting policy + 3 methods, 9 runs
    assert len({len(r) for r in rows}) == 1  # every row has every column
    assert sum(item[0] == "figure" for item in md) == len(list((report / "figures").glob("*.png")))


def test_markdown_escapes_pipes_and_html_escapes_markup(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    make_run(root, "grpo", "grpo", {}, 0, 0, 0.1, 0.0)
    make_run(root, "a|b<c>", "band", {"divergence": "kl"}, 0, 1, 0.2, 0.01)
    report = build_report(root, figures=False)
    md = (report / "report.md").read_text()
    assert "| a\\|b<c> | 0 |" in md
    page = (report / "report.html").read_text()
    assert "<td>a|b&lt;c&gt;</td>" in page and "a|b<c>" not in page
    assert _markdown_items(md) == _html_items(page)


def test_draw_run_plots_the_rows_it_has(tmp_path: Path) -> None:
    """One run's figure (bandpo demo's training.png): TRL's ``entropy`` stands in for ``policy/entropy``, non-finite
    values and rows without a step are skipped, and no file is written when no row has a plotted key."""
    from bandpo_lab.experiments.report.figures import draw_run, run_curves

    rows = [
        {"step": 1, "reward": 0.1, "entropy": 1.0},
        {"step": 2, "reward": float("nan"), "entropy": 0.9, "policy/entropy": 0.8, "clip/frac": 0.01},
        {"reward": 5.0},
    ]
    reward, entropy, clipped = run_curves(rows)
    assert reward == ([1], [0.1]) and entropy == ([1, 2], [1.0, 0.8]) and clipped == ([2], [1.0])  # clip in %
    assert draw_run(rows, tmp_path / "a.png", "a")
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert not draw_run([{"step": 1, "loss": 0.3}, {"reward": 1.0}], tmp_path / "b.png", "b")
    assert not (tmp_path / "b.png").exists()


def test_a_cell_with_fewer_values_than_seeds_names_its_count(tmp_path: Path) -> None:
    """A run without the evaluation entropy: the cell's mean and interval are over 2 seeds, not the row's 3."""
    import json

    from bandpo_lab.experiments.report import ReportData
    from bandpo_lab.experiments.report.document import results_markdown

    for seed, mean in enumerate((0.10, 0.12, 0.11)):
        make_run(tmp_path, "grpo", "grpo", {}, seed, 0, mean, 0.01 * seed)
    results = tmp_path / "runs" / "grpo" / "seed2" / "results.json"
    payload = json.loads(results.read_text())
    del payload["metrics"]["entropy"]
    results.write_text(json.dumps(payload))
    (row,) = [
        line for line in results_markdown(ReportData.load(tmp_path)).splitlines() if line.startswith("| grpo")
    ]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3" and cells[2] == "11.0 ± 2.5"  # mean@8 over all 3 seeds: no count
    assert cells[8] == "0.495 ± 0.064 (n=2)"  # entropy 0.5 and 0.49 only


def test_a_comparison_without_interval_does_not_claim_one_seed_per_method(tmp_path: Path) -> None:
    """grpo on 3 seeds, band-kl on 1: no interval, because band-kl has one seed; grpo has three."""
    for seed, mean in enumerate((0.10, 0.12, 0.11)):
        make_run(tmp_path, "grpo", "grpo", {}, seed, 0, mean, 0.0)
    make_run(tmp_path, "band-kl", "band", {}, 0, 1, 0.15, 0.0)
    text = (build_report(tmp_path, seeds=[0]) / "report.md").read_text()
    assert "per method" not in text
    assert "a single seed on a side and not 2 in common: no confidence interval" in text
    assert "With a single seed on a side no difference on mean@8 can be called significant." in text
