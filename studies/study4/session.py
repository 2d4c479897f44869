"""Study 4's per-session bookkeeping (docs/study.md, Study 4, "Resume"), one command each, from the main checkout:

    .venv/bin/python studies/study4/session.py resume    # the worktree at the study's commit, its runs/, the queues
    .venv/bin/python studies/study4/session.py status    # finished runs, and where each unfinished one stands
    .venv/bin/python studies/study4/session.py export    # finished runs into studies/study4/results, report rebuilt

``resume`` makes ``.venv`` if it is missing (``make setup``), recreates the worktree ``../study4`` at 083dcc6 (moves
one left at the earlier 5b5c294 or 59e12d9 there when no run is in flight) with a link to this checkout's ``.venv``, copies the committed export back into the worktree's ``runs/study/study4`` if
that is gone (finished runs are recognised by their fingerprints and skipped), removes every unfinished run that
started on the other kind of machine (native bf16 against emulated: a run computes on one kind from its first step
to its final evaluation, so it restarts from step 0 here), and starts ``configs/study/run_study4.sh`` in its own
session unless it is already running (the worktree's own path: the study's commits kept its files in
``configs/study/``). Its log goes to ``runs/study/run_study4.out`` in the worktree (ignored, so
the runs' provenance does not list it as a change to the checkout).

``status`` reads only step numbers, checkpoints and times: it prints no metric of any run, so checking on the study
is not an interim look at its outcomes.

``export`` runs ``bandpo compare --export`` in the worktree, drops the runs that have not finished from the
export, rebuilds the report with ``--report-only`` (unless :data:`INTERIM_REPORT` is off), runs the checks of
Studies 1-3 and the probe (:data:`CHECKS`), and prints for each finished run the time of its results and its
training + final-evaluation wall time (docs/study.md's Progress rows). It commits nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from bandpo_lab._files import read_jsonl
from bandpo_lab.experiments.compare.layout import RESULTS_FILE, TRAIN_DONE_FILE
from bandpo_lab.runtime import cpu_bf16_flags
from bandpo_lab.training.checkpoints import CHECKPOINT_PATTERN, checkpoint_dirs
from bandpo_lab.training.layout import METRICS_FILE

MAIN = Path(__file__).resolve().parents[2]


def _sibling(name: str) -> ModuleType:
    """``studies/study4/<name>.py`` as the module ``study4_<name>`` (the studies' folders are not packages, and
    Study 5 has modules of the same names)."""
    module_name = f"study4_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, Path(__file__).resolve().parent / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


machine_kind = _sibling("analysis").machine_kind
COMMIT = (
    "083dcc65fd6193b8100329c9b2894f8836e27642"  # the study's code (docs/study.md, Study 4: the deviations)
)
EARLIER = ("5b5c294fa68c0b866acfedd774ffd9c0b225be77", "59e12d9a60453a9ea8d162dfd0a08087f564a343")
"""The study's earlier commits, each replaced by a change that alters no number (59e12d9: the allocator's settings
around evaluations; 083dcc6: eager attention from float32 copies of the cache where bf16 is emulated): a worktree
left at one moves to :data:`COMMIT` when no run is in flight."""
CONFIG = "configs/study/study4.yaml"  # in the worktree: where the study's commits keep it
MAIN_CONFIG = "studies/study4/config.yaml"  # the same file in the main checkout, for the report
OUT = Path("runs/study/study4")  # in the worktree
EXPORT = Path("studies/study4/results")  # in the main checkout
PLANNED_RUNS = 66  # registered: GRPO and Band-KL on 30 seeds, Clip-Higher on 6 of them
QUEUE = "configs/study/run_study4.sh"  # in the worktree
CHECKS = ("studies/study1/checks.py", "studies/study3/checks.py", "scripts/probe_checks.py")
"""Run in the main checkout by ``export`` (one script, ``scripts/study_checks.py``, until the studies had folders)."""
LOG = Path("runs/study/run_study4.out")  # in the worktree; runs/ is ignored
INTERIM_REPORT = True
"""Whether ``export`` rebuilds the report of the runs exported so far (Study 5's registration allows no interim
look: it sets this off)."""


def this_machine_kind(cpuinfo: str | None = None) -> str:
    """``"native"`` where this CPU has native bf16 matrix instructions, else ``"emulated"`` (the study's commit
    emulates bf16 products there)."""
    return "native" if cpu_bf16_flags(cpuinfo) else "emulated"


def run_dirs(out: Path) -> list[Path]:
    """The run folders ``<out>/runs/<method>/seed<N>``, sorted."""
    return sorted(p for p in out.glob("runs/*/seed*") if p.is_dir())


def is_finished(run_dir: Path) -> bool:
    return (run_dir / RESULTS_FILE).is_file()


def last_step(run_dir: Path) -> int:
    """The last logged training step (0 if none), read from the ``step`` field alone of the metrics log."""
    steps = [row["step"] for row in read_jsonl(run_dir / METRICS_FILE) if isinstance(row.get("step"), int)]
    return max(steps, default=0)


def last_checkpoint(run_dir: Path) -> int | None:
    """The step of the run's newest ``checkpoint-<step>`` folder, ``None`` without one."""
    dirs = checkpoint_dirs(run_dir)
    return int(CHECKPOINT_PATTERN.match(dirs[-1].name).group(1)) if dirs else None  # type: ignore[union-attr]


def progress(run_dir: Path) -> dict[str, Any]:
    """Where a run stands, without any of its metrics: finished or not, last logged step, newest checkpoint, the
    machine kind it computed on (``run_info.json``) and when its log last changed (UTC)."""
    log = run_dir / METRICS_FILE
    updated = None
    if log.is_file():
        updated = dt.datetime.fromtimestamp(log.stat().st_mtime, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    return {
        "run": f"{run_dir.parent.name}/{run_dir.name}",
        "finished": is_finished(run_dir),
        "step": last_step(run_dir),
        "checkpoint": last_checkpoint(run_dir),
        "kind": machine_kind(run_dir),
        "updated": updated,
    }


def to_restart(out: Path, kind: str) -> list[Path]:
    """Unfinished runs that started on the other kind of machine than ``kind``: they may not resume here."""
    return [r for r in run_dirs(out) if not is_finished(r) and machine_kind(r) not in (None, kind)]


def drop_unfinished(export: Path) -> list[Path]:
    """Remove the run folders of an export that have no ``results.json``; returns them."""
    dropped = [r for r in run_dirs(export) if not is_finished(r)]
    for r in dropped:
        shutil.rmtree(r)
    return dropped


def finished_rows(export: Path) -> list[str]:
    """``method/seedN: results at <UTC>, <train> + <eval> s ...`` for each finished run (no outcome): the end of
    training (``train_done.json``) plus the final evaluation's wall time."""
    rows = []
    for r in run_dirs(export):
        if not is_finished(r):
            continue
        results = json.loads((r / RESULTS_FILE).read_text())
        train, evaluation = (results.get(k) for k in ("train_wall_s", "eval_wall_s"))
        done = r / TRAIN_DONE_FILE
        finished = json.loads(done.read_text()).get("finished") if done.is_file() else None
        when = "?"
        if isinstance(finished, (int, float)) and isinstance(evaluation, (int, float)):
            when = dt.datetime.fromtimestamp(finished + evaluation, dt.timezone.utc).strftime(
                "%Y-%m-%d %H:%M"
            )
        wall = " + ".join(f"{w:,.0f}" if isinstance(w, (int, float)) else "?" for w in (train, evaluation))
        rows.append(
            f"{r.parent.name}/{r.name}: results at {when} UTC, {wall} s of training + final evaluation"
        )
    return rows


def queue_running() -> bool:
    """Whether a ``run_study4.sh`` process is alive on this machine."""
    return subprocess.run(["pgrep", "-f", QUEUE], capture_output=True).returncode == 0


_WORKER_RE = re.compile(r"compare\.worker \S*runs/([^/\s]+/seed\d+)/run_spec\.json")


def parse_workers(pgrep_output: str) -> set[str]:
    """``method/seedN`` of each run whose compare worker is in ``pgrep -af compare.worker``'s output."""
    return {m.group(1) for m in _WORKER_RE.finditer(pgrep_output)}


def running_workers() -> set[str]:
    """The runs (``method/seedN``) whose training worker is alive on this machine: how a session sees that a run
    is going without reading the queue logs (they print each finished run's result)."""
    done = subprocess.run(["pgrep", "-af", "compare.worker"], capture_output=True, text=True)
    return parse_workers(done.stdout)


def worktree_problem(head: str, alive: set[str], queue: bool) -> str | None:
    """Why ``resume`` may not go on with a worktree at ``head`` while the runs ``alive`` are in flight (``queue``:
    whether their queue runs), or ``None``: at :data:`COMMIT`, or at one of :data:`EARLIER` with no run in flight
    (it moves). Runs in flight without their queue (it was stopped to change the commit between seeds) finish
    first: a new queue would start them again beside themselves."""
    if alive and not queue:
        return (
            f"runs in flight without their queue ({', '.join(sorted(alive))}): resume when they have finished"
        )
    if head == COMMIT or (head in EARLIER and not alive):
        return None
    if head in EARLIER:
        return f"at the study's earlier {head[:7]} with runs in flight: resume when they have finished"
    return f"at {head or 'no commit'}, not the study's {COMMIT}"


def _env(pythonpath: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def _call(cmd: list[str], cwd: Path, pythonpath: Path | None = None) -> None:
    print("$", " ".join(cmd), f"(in {cwd})", flush=True)
    subprocess.run(cmd, cwd=cwd, env=_env(pythonpath), check=True)


def ensure_runs(worktree: Path, main: Path) -> bool:
    """Copy the committed export back as the worktree's output folder if that is gone and there is an export (a study
    with no finished run has none); ``True`` if copied."""
    if (worktree / OUT).exists() or not (main / EXPORT).is_dir():
        return False
    (worktree / OUT).parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(main / EXPORT, worktree / OUT)
    return True


def resume(main: Path, worktree: Path) -> int:
    venv = main / ".venv"
    if not (venv / "bin" / "bandpo").exists():
        _call(["make", "setup"], main)
    _call(["git", "worktree", "prune"], main)
    if not worktree.exists():
        _call(["git", "worktree", "add", "--detach", str(worktree), COMMIT], main)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=worktree, capture_output=True, text=True
    ).stdout.strip()
    alive = running_workers()
    problem = worktree_problem(head, alive, queue_running())
    if problem:
        print(f"error: {worktree}: {problem}", file=sys.stderr)
        return 2
    if head != COMMIT:
        print(f"moving {worktree} from the study's earlier {head[:7]} to {COMMIT[:7]} (no run in flight)")
        _call(["git", "checkout", "--quiet", "--detach", COMMIT], worktree)
    if not (worktree / ".venv").exists():
        (worktree / ".venv").symlink_to(venv.resolve())
    if ensure_runs(worktree, main):
        print(f"copied {main / EXPORT} to {worktree / OUT} (its finished runs are skipped)")
    kind = this_machine_kind()
    for run in to_restart(worktree / OUT, kind):
        print(
            f"removing {run}: unfinished, started on a machine with {machine_kind(run)} bf16, this one {kind}"
        )
        shutil.rmtree(run)
    bandpo = str(worktree / ".venv" / "bin" / "bandpo")
    _call(
        [bandpo, "compare", "--config", CONFIG, f"output_dir={OUT}", "--dry-run"], worktree, worktree / "src"
    )
    if queue_running():
        print(f"{QUEUE} is already running: not started again")
        return 0
    (worktree / LOG).parent.mkdir(parents=True, exist_ok=True)
    with open(worktree / LOG, "w") as log:
        subprocess.Popen(
            [QUEUE],
            cwd=worktree,
            env=_env(None),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    print(
        f"started {QUEUE} in {worktree} ({kind} bf16); log: {worktree / LOG}; queues: {worktree / OUT}.queue*.log"
    )
    return 0


def status(worktree: Path) -> int:
    out = worktree / OUT
    runs = [progress(r) for r in run_dirs(out)]
    done = sum(r["finished"] for r in runs)
    alive = running_workers()
    print(
        f"this machine: {this_machine_kind()} bf16; queue {'running' if queue_running() else 'not running'}"
    )
    print(f"{done} of {PLANNED_RUNS} runs finished in {out}")
    for r in runs:
        if not r["finished"]:
            ckpt = f"checkpoint at step {r['checkpoint']}" if r["checkpoint"] is not None else "no checkpoint"
            worker = "worker running" if r["run"] in alive else "no worker"
            print(
                f"  {r['run']}: step {r['step']}, {ckpt}, {r['kind'] or 'unknown'} bf16, log updated {r['updated']}, "
                f"{worker}"
            )
    return 0


def export(main: Path, worktree: Path) -> int:
    """The worktree's finished runs into the export (with the worktree's own ``bandpo``: its code wrote them), then
    the report rebuilt from the export by the main checkout's."""
    bandpo = str(main / ".venv" / "bin" / "bandpo")
    _call(
        [
            str(worktree / ".venv" / "bin" / "bandpo"),
            "compare",
            "--config",
            CONFIG,
            f"output_dir={OUT}",
            "--export",
            str(main / EXPORT),
            "--no-progress",
        ],
        worktree,
        worktree / "src",
    )
    for run in drop_unfinished(main / EXPORT):
        print(f"dropped unfinished {run.relative_to(main)} from the export")
    if not INTERIM_REPORT:
        shutil.rmtree(main / EXPORT / "report", ignore_errors=True)  # copied by --export
        print("no interim report: the report is built once, after the last run")
    else:
        _call(
            [
                bandpo,
                "compare",
                "--config",
                MAIN_CONFIG,
                f"output_dir={EXPORT}",
                "--report-only",
                "--no-progress",
            ],
            main,
        )
    for check in CHECKS:
        _call([str(main / ".venv" / "bin" / "python"), check], main)
    rows = finished_rows(main / EXPORT)
    print(f"{len(rows)} of {PLANNED_RUNS} runs finished and exported:")
    print("\n".join(f"  {row}" for row in rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("resume", "status", "export"))
    parser.add_argument("--worktree", type=Path, default=MAIN.parent / "study4", help="default: ../study4")
    args = parser.parse_args(argv)
    worktree = args.worktree.resolve()
    commands = {
        "resume": lambda: resume(MAIN, worktree),
        "status": lambda: status(worktree),
        "export": lambda: export(MAIN, worktree),
    }
    return commands[args.command]()


if __name__ == "__main__":
    sys.exit(main())
