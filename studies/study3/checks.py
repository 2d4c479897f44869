"""Study 3's numbers that docs/study.md and docs/results.md quote and its report does not print, recomputed from
the committed export: per-seed outcomes, the registered paired differences, the power its 5 seeds had and its
screens; each quoted number is asserted to round to what the docs write.

    python studies/study3/checks.py               # reads studies/study3/results
    python studies/study3/checks.py EXPORT        # another export of the study

Every number comes from ``bandpo_lab.experiments.report`` (``load_runs``, ``run_summary``, ``compare_methods``: the
same code as the reports) applied to the per-run files, and ``scripts/power.py``.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from bandpo_lab.experiments.report.runs import load_runs, run_summary
from bandpo_lab.experiments.report.stats import compare_methods

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
from power import minimum_detectable, power  # noqa: E402  (scripts/power.py)

EXPORT = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results"


def per_seed(export: Path, key: str) -> dict[str, dict[int, float]]:
    """``{label: {seed: value}}`` of one ``run_summary`` key."""
    out: dict[str, dict[int, float]] = {}
    for run in load_runs(export):
        value = run_summary(run).get(key)
        if value is not None:
            out.setdefault(run.label, {})[run.seed] = value
    return out


def diff(export: Path, key: str, ref: str, other: str, scale: float = 100.0) -> str:
    values = per_seed(export, key)
    c = compare_methods(values[ref], values[other])
    return f"{c['diff'] * scale:+.2f} [{c['lo'] * scale:+.2f}, {c['hi'] * scale:+.2f}] (paired, n = {c['n']})"


def smollm2() -> None:
    """Study 3 (SmolLM2-135M-Instruct): per-seed outcomes and the registered paired differences."""
    path = EXPORT
    if not path.is_dir():
        print("Study 3: no export at", path)
        return
    print("Study 3 (SmolLM2-135M-Instruct, arith): per seed, and Band-KL - GRPO paired 95% t intervals")
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


if __name__ == "__main__":
    smollm2()
