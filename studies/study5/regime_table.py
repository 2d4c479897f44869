"""The regime map's table (studies/study5/regime.md) from the probe exports of ``regime.sh``: for each update
pattern and learning rate, the tokens with a non-zero advantage that GRPO and Band-KL clip, pooled over the probe's
batches, in the first pass over the completions (updates 1..M, M mini-batches) and the second (M+1..2M, Study 4's
pattern only), with the tail's share of GRPO's clipping and Band's tokens let through beyond GRPO's [0.8, 1.2] on each
side. Counts are pooled over batches; shares come with their counts.

    .venv/bin/python studies/study5/regime_table.py studies/study5/regime
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PATTERNS = {
    "paper": "4 mini-batches of 16, each completion once",
    "study4": "8 mini-batches of 8, each twice",
}


def _pool(rows: list[dict], first: int, last: int) -> dict[str, int]:
    keep = [r for r in rows if first <= r["update"] <= last]
    return {
        k: sum(r[k] for r in keep)
        for k in ("n_live", "n_clipped", "n_tail_clipped", "n_up_through", "n_down_through")
    }


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}% ({part}/{whole})" if whole else "-"


def table(folder: Path) -> str:
    lines = [
        "| pattern | lr | pass | GRPO clipped | tail share of GRPO's clipping | Band-KL clipped | Band up through | Band down through |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in sorted(folder.glob("*-lr*/results.json")):
        name, lr = run.parent.name.split("-lr")
        data = json.loads(run.read_text())
        m, k = data["config"]["minibatches"], data["config"]["updates"]
        by = data["summary"]["by_update"]
        for label, first, last in (("1st", 1, m), ("2nd", m + 1, 2 * m)):
            if first > k:
                continue
            g, b = _pool(by["grpo"], first, last), _pool(by["band"], first, last)
            lines.append(
                f"| {name} ({PATTERNS.get(name, '?')}) | {lr} | {label} (updates {first}-{min(last, k)}) "
                f"| {_share(g['n_clipped'], g['n_live'])} | {_share(g['n_tail_clipped'], g['n_clipped'])} "
                f"| {_share(b['n_clipped'], b['n_live'])} | {b['n_up_through']} | {b['n_down_through']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folder", type=Path, help="the folder regime.sh wrote (one sub-folder per pattern and lr)"
    )
    print(table(parser.parse_args(argv).folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
