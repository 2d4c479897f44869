"""Study 5's per-session bookkeeping (studies/study5/README.md, "Resume"), one command each, from the main checkout:

    .venv/bin/python studies/study5/session.py resume   # the worktree ../study5 at the registration commit, queues
    .venv/bin/python studies/study5/session.py status   # finished runs, and where each unfinished one stands
    .venv/bin/python studies/study5/session.py export   # finished runs into studies/study5/results, no report;
                                                        # then their checkpoints removed from the worktree

Study 4's bookkeeping (``studies/study4/session.py``) with Study 5's commit, config, folders and queue script, and
finer machine kinds: ``amx``, ``avx512_bf16`` or ``emulated`` (the registration's "Machines": an unfinished run
that started on another kind restarts from step 0). ``status`` reads only step numbers, checkpoints and times.

The worktree gets an environment of its own, ``../study5-venv`` (``make setup`` run in the worktree: its editable
install points at the worktree's ``src``), linked as the worktree's ``.venv``. Study 4 linked the main checkout's
environment, whose ``bandpo`` command imports whatever main's layout names (``bandpo_lab.cli.main`` once the lab
moved there): through it a run would take main's lab with the worktree's library. ``resume`` builds that
environment where the link is missing or points elsewhere, before the queue starts.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

from bandpo_lab.runtime import cpu_bf16_flags

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("study4_session", ROOT / "studies" / "study4" / "session.py")
assert _spec is not None and _spec.loader is not None
s4 = importlib.util.module_from_spec(_spec)
sys.modules["study4_session"] = s4
_spec.loader.exec_module(s4)

_STUDY4_KIND = s4.machine_kind  # native / emulated, before configure() replaces it with the finer kinds below

COMMIT = "276b465e16b7033a4743d51d847c95b123599bf4"
"""The registration commit (studies/study5/README.md), named by the commit that follows it on main."""


def this_machine_kind(cpuinfo: str | None = None) -> str:
    """``amx``, ``avx512_bf16`` or ``emulated``: the registration's machine kinds."""
    flags = cpu_bf16_flags(cpuinfo)
    return "amx" if "amx_bf16" in flags else "avx512_bf16" if flags else "emulated"


def machine_kind(run_dir: Path) -> str | None:
    """The kind a run computed on, from ``run_info.json``'s precision (``None`` where it does not say)."""
    native = _STUDY4_KIND(run_dir)
    if native != "native":
        return native
    reason = str(
        (s4.json.loads((run_dir / "run_info.json").read_text()).get("precision") or {}).get("reason")
    )
    return "amx" if re.search(r"\bamx_bf16\b", reason) else "avx512_bf16"


def own_environment(worktree: Path) -> Path:
    """The worktree's own environment ``<worktree>/../study5-venv``, built with the worktree's ``make setup`` if
    missing, and the worktree's ``.venv`` linked to it (replacing a link to another environment); returns it."""
    venv = worktree.parent / "study5-venv"
    if not (venv / ".installed").exists():
        s4._call(["make", "setup", f"VENV={venv}"], worktree)
    link = worktree / ".venv"
    if link.is_symlink() and link.resolve() != venv.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(venv)
    return venv


CONVERT = (
    "from bandpo.models import builtin_model_dir; from bandpo.training.tasks import default_cache_dir; "
    "print(builtin_model_dir('smollm2-135m', default_cache_dir()))"
)
"""The registration commit's own conversion of the built-in model into its cache (the package was still ``bandpo``
there). Its checks before training refuse the chat prompts of a model not converted yet (fixed on main after the
registration, ``284f02a``), so ``resume`` converts it first on a fresh machine: the same conversion the first run
would make."""


def convert_model(venv: Path, worktree: Path) -> None:
    """Convert SmolLM2 with the worktree's code where its cache lacks it (a no-op when converted)."""
    s4._call([str(venv / "bin" / "python"), "-c", CONVERT], worktree, worktree / "src")


def prune_checkpoints(worktree: Path, export: Path) -> list[Path]:
    """Remove the ``checkpoint-*`` folders of the worktree's finished runs whose ``results.json`` the export holds
    byte for byte (committed from main); returns them. A run's last checkpoint (1.6 GB: weights, optimizer, RNG)
    serves only to resume it, and a finished run never resumes; its final model and files stay. Without this, 30
    runs' checkpoints filled the disk and a run failed writing its checkpoint-40 (2026-12-07 01:01 UTC)."""
    removed = []
    for run in s4.run_dirs(worktree / s4.OUT):
        exported = export / "runs" / run.parent.name / run.name / s4.RESULTS_FILE
        done = s4.is_finished(run) and (run / s4.TRAIN_DONE_FILE).is_file()
        if done and exported.is_file() and exported.read_bytes() == (run / s4.RESULTS_FILE).read_bytes():
            for checkpoint in sorted(run.glob("checkpoint-*")):
                shutil.rmtree(checkpoint)
                removed.append(checkpoint)
    return removed


def free_disk(path: Path) -> str:
    """``N GB free`` on ``path``'s file system."""
    return f"{shutil.disk_usage(path).free / 1e9:.1f} GB free"


def configure() -> None:
    """Point Study 4's bookkeeping at Study 5."""
    s4.COMMIT = COMMIT
    s4.EARLIER = ()
    s4.CONFIG = s4.MAIN_CONFIG = "studies/study5/config.yaml"
    s4.OUT = Path("runs/study/study5")
    s4.EXPORT = Path("studies/study5/results")
    s4.PLANNED_RUNS = 72
    s4.INTERIM_REPORT = False  # no interim look (the registration); the report comes after the 72nd run
    s4.QUEUE = "studies/study5/run.sh"
    s4.LOG = Path("runs/study/run_study5.out")
    s4.this_machine_kind = this_machine_kind
    s4.machine_kind = machine_kind


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if COMMIT is None and argv[:1] == ["resume"]:
        print("error: studies/study5/session.py names no registration commit yet", file=sys.stderr)
        return 2
    configure()
    if not any(a.startswith("--worktree") for a in argv):
        argv = [*argv, "--worktree", str(s4.MAIN.parent / "study5")]
    given = next(a for a in reversed(argv) if a.startswith("--worktree"))
    worktree = Path(given.partition("=")[2] or argv[argv.index(given) + 1]).resolve()
    if argv[:1] == ["resume"]:
        if not worktree.exists():
            s4._call(["git", "worktree", "add", "--detach", str(worktree), COMMIT], s4.MAIN)
        venv = own_environment(worktree)
        convert_model(venv, worktree)
    code = s4.main(argv)
    if code == 0 and argv[:1] == ["export"]:
        removed = prune_checkpoints(worktree, s4.MAIN / s4.EXPORT)
        print(f"removed {len(removed)} checkpoint(s) of exported finished runs from {worktree / s4.OUT}")
    if code == 0 and worktree.exists():
        print(f"disk: {free_disk(worktree)} (a run writes about 2.1 GB, its checkpoints 1.6 GB of it)")
    return code


if __name__ == "__main__":
    sys.exit(main())
