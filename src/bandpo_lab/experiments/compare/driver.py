"""The comparison's driver: every unfinished run in its own process, the baseline, then the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bandpo
import bandpo_lab
from bandpo_lab._files import write_json
from bandpo_lab.experiments.compare.baseline import evaluate_baseline
from bandpo_lab.experiments.compare.config import CompareConfig, CompareError
from bandpo_lab.experiments.compare.layout import (
    LOG_FILE,
    OVERWRITE_FLAG,
    RESULTS_FILE,
    RUN_SPEC_FILE,
    discard_compare_files,
)
from bandpo_lab.experiments.compare.plan import (
    check_eval_data,
    check_plans,
    plan_runs,
    validate_with_trainer,
    write_plan,
)
from bandpo_lab.experiments.compare.worker import headline


def _child_env(config: CompareConfig) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if config.num_threads is not None:
        env["OMP_NUM_THREADS"] = str(config.num_threads)
        env["MKL_NUM_THREADS"] = str(config.num_threads)
    # The workers import the library and the lab this process imported (a checkout's src/ before an installed copy).
    roots = dict.fromkeys(str(Path(pkg.__file__).resolve().parents[1]) for pkg in (bandpo, bandpo_lab))
    env["PYTHONPATH"] = os.pathsep.join([*roots, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def _run_count(config: CompareConfig) -> str:
    """``"2 methods x 3 seeds"``, and the methods on their own seeds: ``"..., band-kl on 1 seed"``."""
    own = "".join(
        f", {m.label} on {len(config.seeds_of(m))} seed{'s' * (len(config.seeds_of(m)) != 1)}"
        for m in config.methods
        if config.seeds_of(m) != config.seeds
    )
    return f"{len(config.methods)} methods x {len(config.seeds)} seeds{own}"


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line[-300:] for line in lines[-n:])


def run_compare(
    config: CompareConfig,
    *,
    redo: bool = False,
    report_only: bool = False,
    progress: bool = True,
    log: Any = None,
) -> Path:
    """Run every (method, seed) not finished yet, each in its own process, evaluate the baseline, build the report
    and return its directory (``bandpo compare``'s options; ``log``: the file of the one-line messages, default
    ``sys.stdout``). Runs that failed are listed in the report and on ``log``.

    Raises:
        CompareError: bad config (the training settings of every run, the eval dataset and split: all checked
            before anything trains), or runs made with another config (without ``redo``).
    """
    from tqdm.auto import tqdm

    from bandpo_lab.experiments.report import build_report

    log = log or sys.stdout

    def say(text: str) -> None:
        print(text, file=log, flush=True)

    plans = plan_runs(config)
    check_plans(config, plans, redo=redo)
    failures: list[str] = []
    if not report_only:
        check_eval_data(config, plans)
        validate_with_trainer(plans, redo=redo)
        write_plan(config, plans)
        todo = [p for p in plans if p.status != "done"]
        done = len(plans) - len(todo)
        say(
            f"bandpo compare: {_run_count(config)} = {len(plans)} runs in {config.output_dir} ({done} finished "
            f"already, {len(todo)} to run)"
        )
        if config.baseline:
            say("bandpo compare: evaluating the starting policy (baseline)")
            try:
                evaluate_baseline(config, progress=progress)
            except CompareError:  # a config error: the runs would meet it too
                raise
            except Exception as err:  # the comparison itself does not depend on it
                say(f"bandpo compare: warning: baseline evaluation failed: {err}")
        env = _child_env(config)
        bar = tqdm(
            total=len(todo), unit="run", desc="compare", disable=not progress, dynamic_ncols=True, file=log
        )
        with bar:
            for plan in todo:
                run = f"{plan.method.label} seed {plan.seed}"
                bar.set_postfix_str(run)
                fresh = plan.status == "stale"  # --redo: its earlier run goes, the user's files stay
                if fresh and plan.run_dir.is_dir():
                    left = discard_compare_files(plan.run_dir)
                    kept = f"; left as they are (not bandpo's): {', '.join(left)}" if left else ""
                    bar.write(
                        f"  {run}: --redo: retraining from scratch in {plan.run_dir} (its earlier run's "
                        f"checkpoints, logs and results are discarded){kept}",
                        file=log,
                    )
                plan.run_dir.mkdir(parents=True, exist_ok=True)
                spec_path = plan.run_dir / RUN_SPEC_FILE
                write_json(spec_path, plan.spec(config))
                log_path = plan.run_dir / LOG_FILE
                start = time.time()
                with log_path.open("a") as out:
                    out.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {run}\n")
                    out.flush()
                    # --redo: the training run's own files go as bandpo train --overwrite discards them
                    worker = [sys.executable, "-m", "bandpo_lab.experiments.compare.worker"]
                    worker += [*([OVERWRITE_FLAG] if fresh else []), str(spec_path)]
                    proc = subprocess.Popen(worker, stdout=out, stderr=subprocess.STDOUT, env=env)
                    try:
                        rc = proc.wait()
                    except KeyboardInterrupt:
                        proc.terminate()
                        proc.wait()
                        raise
                elapsed = time.time() - start
                if rc == 0 and (plan.run_dir / RESULTS_FILE).is_file():
                    metrics = json.loads((plan.run_dir / RESULTS_FILE).read_text())["metrics"]
                    bar.write(f"  {run}: {headline(metrics, config.eval.k)} ({elapsed:.0f} s)")
                else:
                    failures.append(run)
                    bar.write(f"  {run}: FAILED (exit code {rc}); log {log_path}:\n{_tail(log_path)}")
                bar.update(1)
    report_dir = build_report(
        config.output_dir,
        reference=config.reference,
        smooth=config.smooth,
        methods=[m.label for m in config.methods],
        seeds=list(config.seeds),
        method_seeds={m.label: config.seeds_of(m) for m in config.methods if m.seeds is not None},
        rules={m.label: (m.method, m.params) for m in config.methods},
    )
    say(f"bandpo compare: report in {report_dir / 'report.md'} and {report_dir / 'report.html'}")
    if failures:
        say(f"bandpo compare: {len(failures)} run(s) failed: {', '.join(failures)}")
    return report_dir
