"""The SkyRL adapter's policy-loss time against SkyRL's own ``regular`` loss, measured in the same run.

Run in the SkyRL environment (Python 3.12): ``make bench-skyrl`` (or ``.venv-skyrl/bin/python
benchmarks/skyrl_loss.py``). Every case is the registered loss called as SkyRL 0.4.0's worker calls it
(``fn(log_probs, old_log_probs, advantages, config, loss_mask, rollout_logprobs)``), forward and backward, its
metrics included (bandpo's: ``clip_ratio`` and every ``bandpo.clip_metrics`` diagnostic but in the ``(basic)`` and
``(none)`` cases, one host transfer; SkyRL's
``regular``: ``clip_ratio``, one ``.item()``). Cases are timed in turn, the best block of ``--rounds`` rounds each
(``bench_timing.measure``: ``torch.utils.benchmark``), and printed as ratios to ``regular``. ``bandpo_grpo (basic)``
and ``(none)`` are the same loss at the lighter diagnostics levels (``trainer.algorithm.bandpo.diagnostics``): where
the adapter's time goes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, also when loaded as a module
from bench_timing import best, measure, sample_logp

from bandpo.validation import check_int_in
from bandpo_lab.cli._args import add_deprecated_spelling

#: label -> (policy_loss_type, further trainer.algorithm overrides)
CASES: dict[str, tuple[str, dict[str, str]]] = {
    "regular (SkyRL)": ("regular", {}),
    "dual_clip (SkyRL)": ("dual_clip", {}),
    "dppo (SkyRL, binary_kl)": ("dppo", {"dppo.dppo_type": "binary_kl"}),
    "bandpo_grpo": ("bandpo_grpo", {}),
    "bandpo_grpo (basic)": ("bandpo_grpo", {"bandpo.diagnostics": "basic"}),
    "bandpo_grpo (none)": ("bandpo_grpo", {"bandpo.diagnostics": "none"}),
    "bandpo (band kl, table)": ("bandpo", {}),
    "bandpo (band kl, scheduled)": ("bandpo", {"bandpo.step_delta": "0.04"}),
    "bandpo (band tv)": ("bandpo", {"bandpo.divergence": "tv"}),
    "bandpo_dcpo": ("bandpo_dcpo", {}),
    "bandpo_dppo_kl": ("bandpo_dppo_kl", {}),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked (``--rounds`` and the shape >= 1) before SkyRL is imported or any input is built."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=2, default=[64, 4096], metavar=("B", "T"))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--output", type=Path, default=None, metavar="FILE", help="also write the rows as JSON here"
    )
    add_deprecated_spelling(parser, "--json", "--output")
    args = parser.parse_args(argv)
    try:
        check_int_in("--rounds", args.rounds, 1)
        check_int_in("--shape B", args.shape[0], 1)
        check_int_in("--shape T", args.shape[1], 1)
    except ValueError as err:
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    import bandpo.integrations.skyrl as bskyrl

    bskyrl.register()
    b, t = args.shape
    g = torch.Generator().manual_seed(0)
    old = sample_logp(b * t).view(b, t)
    logp = (old + 0.05 * torch.randn(b, t, generator=g)).clamp(max=0)
    # token_mean: SkyRL divides the advantages by the token count before the loss (its masked sum is the mean)
    adv = (torch.randn(b, generator=g)[:, None] / (b * t)).expand(b, t).contiguous()
    mask = torch.ones(b, t)

    steps: dict[str, Callable[[], object]] = {}
    for label, (name, overrides) in CASES.items():
        cli = [f"trainer.algorithm.policy_loss_type={name}"]
        cli += [f"trainer.algorithm.{key}={value}" for key, value in overrides.items()]
        cfg = bskyrl.BandPOSkyRLConfig.from_cli_overrides(cli).trainer.algorithm
        fn = PolicyLossRegistry.get(name)

        def step(fn=fn, cfg=cfg) -> None:
            lp = logp.clone().requires_grad_(True)
            loss, _ = fn(lp, old, adv, config=cfg, loss_mask=mask, rollout_logprobs=None)
            loss.backward()

        steps[label] = step

    times = {label: best(m) for label, m in measure(steps, rounds=args.rounds).items()}
    base = times["regular (SkyRL)"]
    rows = [{"case": label, "ms": 1e3 * sec, "x_regular": sec / base} for label, sec in times.items()]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, B={b}, T={t}, float32, fwd + bwd with "
        f"metrics, best block of {args.rounds} rounds of the cases in turn"
    )
    print(f"{'case':<30} {'ms':>9} {'x regular':>10}")
    for row in rows:
        print(f"{row['case']:<30} {row['ms']:>9.2f} {row['x_regular']:>10.3f}")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
