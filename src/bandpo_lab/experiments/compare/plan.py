"""The runs of a comparison (method x seed), their status on disk, and the plan file the report reads."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bandpo_lab._files import (
    file_lock,
    model_folder_problem,
    read_json_object,
    shared_folder_problem,
    write_json,
)
from bandpo_lab.experiments.compare.config import CompareConfig, CompareError, MethodSpec
from bandpo_lab.experiments.compare.layout import (
    BASELINE_DIR,
    COMPARE_CONFIG_FILE,
    PLAN_FILE,
    REPORT_DIR,
    RESULTS_FILE,
    RUN_DIR_FILES,
    RUN_SPEC_FILE,
    fingerprint,
    without_later_settings,
    written_by_compare,
)
from bandpo_lab.provenance import provenance

COMPARE_ENTRIES = (PLAN_FILE, COMPARE_CONFIG_FILE, BASELINE_DIR, REPORT_DIR, "runs")
"""What a comparison writes at the top of its output_dir."""


def output_dir_owner_problem(output_dir: str | Path) -> str | None:
    """Why a comparison may not write into ``output_dir``, or ``None``: it is new, an earlier comparison's (its
    ``compare_plan.json``, or a run's ``run_spec.json``), or holds none of :data:`COMPARE_ENTRIES` (the user's
    other files stay beside the comparison's). A user's ``report/`` would have its ``report.md`` replaced. Never a
    model's folder, nor the working or home directory (or one above them) holding other files
    (:func:`~bandpo_lab._files.model_folder_problem`, :func:`~bandpo_lab._files.shared_folder_problem`)."""
    problem = model_folder_problem(output_dir, "output_dir", "compare")
    if problem is not None:
        return problem
    out = Path(output_dir)
    if not out.is_dir():
        return None
    if written_by_compare(out):
        return None
    problem = shared_folder_problem(output_dir, "output_dir", "compare")
    if problem is not None:
        return problem
    taken = [name for name in COMPARE_ENTRIES if (out / name).exists()]
    if not taken:
        return None
    shown = ", ".join(name + ("/" if (out / name).is_dir() else "") for name in taken)
    return (
        f"output_dir {str(output_dir)!r} holds {shown}, not written by bandpo compare: a comparison writes its "
        f"own {', '.join(COMPARE_ENTRIES[:-1])} and {COMPARE_ENTRIES[-1]} there, replacing what it finds; choose "
        "another output_dir"
    )


@dataclass
class RunPlan:
    """One run: method x seed, its directory, the training config dict and the fingerprint of what it runs."""

    method: MethodSpec
    method_index: int
    seed: int
    run_dir: Path
    train_config: dict[str, Any]
    train_source: str | None
    fingerprint: str
    status: str = "new"  # new | partial | done | stale

    def spec(self, config: CompareConfig) -> dict[str, Any]:
        """What the run's process needs (written to ``run_spec.json``)."""
        return {
            "label": self.method.label,
            "method": self.method.method,
            "clip_rule": self.method.clip_rule,
            "params": self.method.params,
            "method_index": self.method_index,
            "seed": self.seed,
            "train_config": self.train_config,
            "train_source": self.train_source,
            "eval": dataclasses.asdict(config.eval),
            "curves": dataclasses.asdict(config.curves),
            "fingerprint": self.fingerprint,
        }


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    a, b = _flatten(without_later_settings(old)), _flatten(without_later_settings(new))
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def base_train_config(config: CompareConfig) -> Any:
    from bandpo_lab.training.config import ConfigError, load_train_config

    try:
        return load_train_config(config.train_config, config.train_overrides)
    except ConfigError as err:
        raise CompareError(f"train: {err}") from err


_SET_BY_COMPARE = {
    "output_dir": "set by bandpo compare: its output_dir/runs/<label>/seed<N>",
    "seed": "set by bandpo compare: its seeds",
}
"""Where a run's ``output_dir`` and ``seed`` come from, for the training config's errors."""


def plan_runs(config: CompareConfig) -> list[RunPlan]:
    """Every (method, seed) run with its training config, methods outer, and its status (``done``: finished with
    this config; ``stale``: finished or started with another config; ``partial``: started with this one; ``new``).

    Raises:
        CompareError: a training config the trainer refuses (checked for every run without loading a model).
    """
    from bandpo_lab.training.config import ConfigError, TrainConfig
    from bandpo_lab.training.methods import switch_keys

    base = base_train_config(config)
    base_dict = base.to_dict()
    base_method = base.training_method().name
    out_root = Path(config.output_dir)
    evals = {"eval": dataclasses.asdict(config.eval), "curves": dataclasses.asdict(config.curves)}
    plans = []
    for index, method in enumerate(config.methods):
        chosen = method.training_method()
        for seed in config.seeds_of(method):
            run_dir = out_root / "runs" / method.label / f"seed{seed}"
            d = copy.deepcopy(base_dict)
            # the recipe's method settings go, as when a config layer switches method
            for key in switch_keys(base_method, chosen.name):
                d.pop(key, None)
            d.update(chosen.config_entries(copy.deepcopy(method.params)))
            d["seed"] = seed
            d["output_dir"] = str(run_dir)
            try:
                train_config = TrainConfig.from_dict(d, source=base.source, origins=_SET_BY_COMPARE)
            except ConfigError as err:
                raise CompareError(f"methods[{method.label}] seed {seed}: {err}") from err
            last = train_config.trainer.get("max_steps")
            if (
                config.eval.at_steps
                and isinstance(last, int)
                and last > 0
                and config.eval.at_steps[-1] >= last
            ):
                raise CompareError(
                    f"eval.at_steps must be below the last optimizer step (max_steps {last}: the final "
                    f"evaluation is at the end), got {config.eval.at_steps}"
                )
            train_dict = json.loads(json.dumps(train_config.to_dict(), default=str))
            train = {k: v for k, v in train_dict.items() if k != "output_dir"}
            stamp = fingerprint({"train": train, **evals})
            plan = RunPlan(method, index, seed, run_dir, train_dict, base.source, stamp)
            plan.status = _status(plan)
            plans.append(plan)
    return plans


def _status(plan: RunPlan) -> str:
    results = plan.run_dir / RESULTS_FILE
    if results.is_file():
        try:
            done = json.loads(results.read_text())
        except json.JSONDecodeError:
            return "partial"
        return "done" if done.get("fingerprint") == plan.fingerprint else "stale"
    spec = plan.run_dir / RUN_SPEC_FILE
    if spec.is_file():  # started: with this config (resume it) or another one (its checkpoints do not fit)
        return "partial" if read_json_object(spec).get("fingerprint") == plan.fingerprint else "stale"
    return "partial" if plan.run_dir.exists() else "new"


def check_plans(config: CompareConfig, plans: Sequence[RunPlan], redo: bool = False) -> None:
    """Refuse runs (finished or started) made with another config, unless ``redo``, naming the keys that differ."""
    stale = [p for p in plans if p.status == "stale"]
    if not stale or redo:
        return
    p = stale[0]
    old_spec = read_json_object(p.run_dir / RUN_SPEC_FILE)  # {}: missing or torn, no keys to name
    old = {k: old_spec.get(k) for k in ("train_config", "eval", "curves")}
    new = {k: v for k, v in p.spec(config).items() if k in old}
    keys = [k for k in _differences(old, new) if not k.endswith("output_dir")] if old_spec else []
    differing = f" (differs in: {', '.join(keys[:8])})" if keys else ""
    raise CompareError(
        f"{len(stale)} run(s) in {config.output_dir!r} were made (or started) with another config, e.g. "
        f"{p.method.label} seed {p.seed}{differing}: choose another output_dir, or pass --redo to retrain them"
    )


def validate_with_trainer(plans: Sequence[RunPlan], locked_ok: bool = False, redo: bool = False) -> None:
    """Every unfinished run's config through ``prepare`` (no model loaded); ``locked_ok``: skip a run whose
    directory another live process holds (``--dry-run``). With ``redo``, a ``stale`` run is checked as the fresh
    run it becomes, and a run that cannot resume with its config becomes ``stale``; without, the latter is refused
    naming ``--redo``.

    Raises:
        CompareError: the first run the trainer refuses, naming its method and seed.
    """
    from bandpo_lab.training.config import ConfigError, TrainConfig
    from bandpo_lab.training.lock import OutputDirLockedError
    from bandpo_lab.training.run import prepare

    for plan in plans:
        if plan.status == "done":
            continue
        train_config = TrainConfig.from_dict(plan.train_config, source=plan.train_source)
        fresh = plan.status == "stale" and redo  # discarded before it trains
        try:
            prepare(train_config, resume=not fresh, overwrite=fresh, caller_files=RUN_DIR_FILES)
        except ConfigError as err:
            if locked_ok and isinstance(err, OutputDirLockedError):
                continue
            if fresh or not _starts_afresh(train_config):
                raise CompareError(f"methods[{plan.method.label}] seed {plan.seed}: {err}") from err
            if not redo:  # the settings are fine; the run started in its directory cannot continue with them
                raise CompareError(
                    f"methods[{plan.method.label}] seed {plan.seed}: the run started in {str(plan.run_dir)!r} "
                    f"cannot resume with this config ({_resume_problem(plan, train_config, err)}): pass --redo "
                    "to retrain it from scratch, or choose another output_dir"
                ) from err
            plan.status = "stale"


def _starts_afresh(train_config: Any) -> bool:
    """Whether ``train_config`` passes ``prepare`` as a fresh run (its output directory's earlier run discarded)."""
    from bandpo_lab.training.config import ConfigError
    from bandpo_lab.training.run import prepare

    try:
        prepare(train_config, overwrite=True, caller_files=RUN_DIR_FILES)
    except ConfigError:
        return False
    return True


def _resume_problem(plan: RunPlan, train_config: Any, err: Exception) -> str:
    """Why the run cannot resume: the training settings that changed since it started, else the trainer's words."""
    from bandpo_lab.training.layout import CONFIG_FILE
    from bandpo_lab.training.resume import ConfigChanges, config_changes

    try:
        saved = yaml.safe_load((plan.run_dir / CONFIG_FILE).read_text())
        altering = config_changes(saved, yaml.safe_load(train_config.to_yaml())).altering
    except (OSError, yaml.YAMLError, AttributeError, TypeError):
        altering = {}
    if altering:
        return f"it started with other training settings: {ConfigChanges.describe(altering)}"
    return str(err)


def check_eval_data(config: CompareConfig, plans: Sequence[RunPlan]) -> None:
    """Before anything trains: the evaluation data loads (as the runs read it, once per task and options), and
    ``eval.precision`` suits the machine (:func:`bandpo_lab.runtime.bf16_problem`).

    Raises:
        CompareError: an unknown dataset or split, a missing file or column, a dataset whose verifier can score
            none of its problems (``eval: ...``); bf16 on such a CPU.
    """
    import torch

    from bandpo_lab.eval.datasets import unscorable_reason
    from bandpo_lab.experiments.compare.worker import eval_dataset
    from bandpo_lab.runtime import bf16_problem

    if any(plan.status != "done" for plan in plans):  # evaluated on the GPU where there is one
        problem = bf16_problem(config.eval.precision, "eval.precision", on_gpu=torch.cuda.is_available())
        if problem is not None:
            raise CompareError(problem)
    seen = set()
    for plan in plans:
        data = plan.train_config.get("data") or {}
        key = json.dumps([data.get("task"), data.get("task_options")], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            dataset = eval_dataset(config.eval, plan.train_config, config.eval.max_problems)
            reason = unscorable_reason(dataset)  # else every run trains, then its evaluation scores nothing
            if reason is not None:
                raise CompareError(f"eval: dataset {dataset.name!r}: {reason}")


# ------------------------------------------------------------------------------------------------ the driver
def write_plan(config: CompareConfig, plans: Sequence[RunPlan]) -> Path:
    """Write ``compare_config.yaml`` (this call's config) and ``compare_plan.json`` (this call's ``config`` and
    ``source``; the study's methods, seeds, reference and runs over every call, :func:`_over_calls`; ``calls``)."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / COMPARE_CONFIG_FILE).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    plan = {
        "config": config.to_dict(),
        "source": config.source,
        "reference": config.reference,
        "methods": [
            {"label": m.label, "method": m.method, "clip_rule": m.clip_rule, "params": m.params}
            | ({} if m.seeds is None else {"seeds": config.seeds_of(m)})
            for m in config.methods
        ],
        "seeds": list(config.seeds),
        "runs": [
            {"label": p.method.label, "seed": p.seed, "dir": str(p.run_dir), "fingerprint": p.fingerprint}
            for p in plans
        ],
    }
    call = queue_call(config, plans)  # before the lock: provenance runs git
    with file_lock(out / (PLAN_FILE + ".lock")):  # another queue of this comparison may be writing it
        earlier = read_json_object(out / PLAN_FILE)
        plan = {**plan, **_over_calls(earlier, plan), "calls": [*earlier_calls(earlier), call]}
        write_json(out / PLAN_FILE, plan)
    return out / PLAN_FILE


def _over_calls(earlier: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """``methods``, ``seeds``, ``runs`` and ``reference`` of the plan ``earlier`` and this call's (``now``) together,
    in the order first planned; a method's and a run's entry are the latest call's (a method's ``seeds``: the
    union of its calls', kept when fewer than all). The reference is this call's, unless the earlier one is a
    method this call does not run."""
    methods_before = [m for m in earlier.get("methods") or [] if isinstance(m, dict) and "label" in m]
    if not methods_before:
        return {k: now[k] for k in ("methods", "seeds", "runs", "reference")}
    seeds = list(dict.fromkeys([*(earlier.get("seeds") or []), *now["seeds"]]))
    entries = {m["label"]: m for m in methods_before} | {m["label"]: m for m in now["methods"]}
    own: dict[str, set[Any]] = {}
    for plan, methods in ((earlier, methods_before), (now, now["methods"])):
        for m in methods:
            own.setdefault(m["label"], set()).update(m.get("seeds", plan.get("seeds") or []))
    methods = []
    for label, entry in entries.items():
        entry = {k: v for k, v in entry.items() if k != "seeds"}
        if own[label] != set(seeds):
            entry["seeds"] = [s for s in seeds if s in own[label]]
        methods.append(entry)
    runs = [r for r in earlier.get("runs") or [] if isinstance(r, dict)] + list(now["runs"])
    runs = list({(r.get("label"), r.get("seed")): r for r in runs}.values())
    reference = earlier.get("reference")
    if reference not in entries or reference in {m["label"] for m in now["methods"]}:
        reference = now["reference"]
    return {"methods": methods, "seeds": seeds, "runs": runs, "reference": reference}


def queue_call(config: CompareConfig, plans: Sequence[RunPlan]) -> dict[str, Any]:
    """This call's ``time``, ``argv``, ``provenance``, ``config`` and ``queued`` runs (``"<label> seed <seed>"``)."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": list(sys.argv),
        "provenance": provenance(),
        "config": config.to_dict(),
        "queued": [f"{p.method.label} seed {p.seed}" for p in plans if p.status != "done"],
    }


def earlier_calls(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``calls`` of an existing plan (``[]`` for none); one written before calls were kept counts as one call
    with its config, nothing else recorded."""
    calls = plan.get("calls")
    if isinstance(calls, list):
        return [c for c in calls if isinstance(c, dict)]
    if not plan:
        return []
    return [{"time": None, "argv": None, "provenance": None, "config": plan.get("config"), "queued": None}]
