"""Compare clip rules: train the same task with several methods over several seeds, evaluate, report.

The engine behind ``bandpo compare --config configs/compare-tiny.yaml``::

    from bandpo.eval.compare import load_compare_config, run_compare
    config = load_compare_config("configs/compare-tiny.yaml", ["seeds=[0]"])
    report_dir = run_compare(config)          # -> <output_dir>/report (report.md, report.html, figures, tables)

A compare config (YAML; ``key=value`` overrides with dotted keys apply on top, e.g. ``train.overrides.max_steps=8``)::

    output_dir: runs/compare-tiny          # relative to the working directory
    train:
      config: tiny.yaml                    # the base training recipe, relative to this file
      overrides: {max_steps: 60}           # training keys applied to every run (dotted keys allowed)
    methods:                               # default: all of DEFAULT_METHODS
      - {label: grpo, clip_rule: grpo}
      - {label: band-kl, clip_rule: band, params: {divergence: kl, delta: 0.05}}
      - {label: cispo, method: cispo, params: {epsilon_high: 5.0}}   # TRL-native: plain GRPOTrainer
    seeds: [0, 1, 2]
    reference: grpo                        # the label the others are compared against (default: the first)
    eval: {k: 16, ks: [1, 4, 16], temperature: 1.0, max_problems: 200}   # final evaluation of every run
    curves: {every: 20, k: 4, max_problems: 100}   # held-out accuracy during training (every: 0 turns it off)
    baseline: true                         # evaluate the starting policy once
    num_threads: 1                         # OMP_NUM_THREADS of the training processes (null: inherit)
    report: {smooth: 1}                    # rolling-mean window of the training curves

A method is any name of :data:`bandpo.training.methods.METHODS`: a clip rule (``clip_rule: NAME`` or
``method: NAME``, ``params`` its parameters, trained by ``BandPOTrainer``) or a TRL-native method (``method: cispo``,
``sapo``, ``gspo``; ``params`` the ``GRPOConfig`` fields it takes, e.g. ``{epsilon_high: 5.0}``; trained by plain
``GRPOTrainer`` with the same data, reward, callbacks, checkpoints and evaluation). Its runs log TRL's metrics and
not our clip diagnostics, which the report shows as ``-``.

Every run (method x seed) trains in its own process (``python -m bandpo.eval.compare RUN_SPEC``, log in the run's
``train.log``), in sequence, into ``<output_dir>/runs/<label>/seed<seed>/``: the model, checkpoints, ``metrics.jsonl``
(training logs), ``heldout.jsonl`` (the held-out curve), ``run_spec.json`` (what was run) and, once finished,
``results.json`` (the final evaluation: the marker of a finished run). A second ``bandpo compare`` with the same
config skips finished runs and resumes an interrupted one from its last checkpoint; a finished run whose config
differs from the current one is refused (``--redo`` retrains it). The starting policy's evaluation goes to
``<output_dir>/baseline/results.json``; the report (:func:`bandpo.eval.report.build_report`) to
``<output_dir>/report/``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bandpo.registry import did_you_mean
from bandpo.training.config import parse_scalar

__all__ = [
    "DEFAULT_METHODS",
    "PLAN_FILE",
    "RESULTS_FILE",
    "RUN_SPEC_FILE",
    "CompareConfig",
    "CompareError",
    "CurveSpec",
    "EvalSpec",
    "MethodSpec",
    "RunPlan",
    "export_results",
    "load_compare_config",
    "plan_runs",
    "run_compare",
    "validate_with_trainer",
]

RUN_SPEC_FILE = "run_spec.json"
RESULTS_FILE = "results.json"
HELDOUT_FILE = "heldout.jsonl"
TRAIN_DONE_FILE = "train_done.json"
LOG_FILE = "train.log"
PLAN_FILE = "compare_plan.json"
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class CompareError(ValueError):
    """A problem with the compare config or its output directory, found before training."""


# --------------------------------------------------------------------------------------------------- config
@dataclass
class MethodSpec:
    """One method with its parameters, under a label (also its directory name).

    Args:
        label: unique name in the report, letters / digits / ``_.+-``.
        clip_rule: a clip rule of :data:`bandpo.losses.CLIP_RULES` (grpo, clip_higher, dcpo, band, adaptive_band,
            ...); the same as ``method`` for a clip rule. After construction: the rule, or ``None`` for a
            TRL-native method.
        params: a clip rule's parameters (``make_clip_rule(clip_rule, **params)``), or the ``GRPOConfig`` fields a
            TRL-native method takes (``{epsilon_high: 5.0}`` for cispo); empty: its defaults.
        method: any name of :data:`bandpo.training.methods.METHODS`: a clip rule or a TRL-native method (cispo,
            sapo, gspo). After construction: the method's name, whichever key named it.
    """

    label: str
    clip_rule: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    method: str | None = None

    def __post_init__(self) -> None:
        from bandpo.training.methods import METHODS

        if not isinstance(self.label, str) or not _LABEL_RE.match(self.label):
            raise CompareError(
                f"methods: label must be letters, digits and _.+- (it names a directory), got {self.label!r}"
            )
        if not isinstance(self.params, Mapping):
            raise CompareError(f"methods[{self.label}].params must be a mapping, got {self.params!r}")
        self.params = dict(self.params)
        if self.method is None and self.clip_rule is None:
            raise CompareError(
                f"methods[{self.label}] needs method (a method name: {', '.join(METHODS.names())}) or clip_rule"
            )
        if self.method is not None and self.clip_rule is not None and self.method != self.clip_rule:
            raise CompareError(
                f"methods[{self.label}]: method={self.method!r} and clip_rule={self.clip_rule!r} name different "
                "methods: set one of them"
            )
        try:
            if self.method is not None:
                method: Any = METHODS.get(self.method)
            elif METHODS.is_trl_native(self.clip_rule):
                raise ValueError(
                    f"clip_rule={self.clip_rule!r} is a TRL-native method, not a clip rule: write method: "
                    f"{self.clip_rule} (its params are the GRPOConfig fields it takes)"
                )
            else:
                try:
                    method = METHODS.clip_rule(self.clip_rule)  # type: ignore[arg-type]
                except ValueError as err:
                    raise ValueError(
                        f"{err}; TRL-native methods (method: NAME): {', '.join(METHODS.trl_names())}"
                    ) from None
            method.check_params(copy.deepcopy(self.params))
        except (TypeError, ValueError) as err:
            raise CompareError(f"methods[{self.label}]: {err}") from err
        self.method = method.name
        self.clip_rule = None if METHODS.is_trl_native(method.name) else method.name

    def training_method(self) -> Any:
        """The method (:data:`bandpo.training.methods.METHODS`): how the runs are configured and trained."""
        from bandpo.training.methods import METHODS

        return METHODS.get(self.method)  # type: ignore[arg-type]

    def rule(self) -> Any:
        """The ``ClipRule`` object of a clip-rule method (``CompareError`` for a TRL-native method, which has none)."""
        from bandpo.losses import make_clip_rule

        if self.clip_rule is None:
            raise CompareError(
                f"methods[{self.label}]: method {self.method!r} is TRL-native and has no clip rule"
            )
        return make_clip_rule(self.clip_rule, **copy.deepcopy(self.params))

    def to_dict(self) -> dict[str, Any]:
        """``{label, clip_rule | method, params}`` as a compare config lists it (``clip_rule`` for a clip rule)."""
        key = "clip_rule" if self.clip_rule is not None else "method"
        return {"label": self.label, key: self.method, "params": copy.deepcopy(self.params)}


DEFAULT_METHODS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("grpo", "grpo", {}),
    ("clip_higher", "clip_higher", {}),
    ("dcpo", "dcpo", {}),
    ("band-kl", "band", {"divergence": "kl", "delta": 0.05}),
    ("band-tv", "band", {"divergence": "tv", "delta": 0.05}),
    ("band-chi2", "band", {"divergence": "chi2", "delta": 0.05}),
    ("adaptive_band", "adaptive_band", {"divergence": "kl", "delta": 0.05}),
)
"""``(label, clip_rule, params)`` of the methods compared when the config lists none: GRPO, Clip-Higher, DCPO,
Band with KL / TV / Pearson chi2 (delta 0.05) and entropy-adaptive Band-KL."""


def _int(name: str, value: object, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise CompareError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


@dataclass
class EvalSpec:
    """``eval:``: the final evaluation of every run (and of the starting policy).

    Args:
        k: samples per problem; ks: pass@j values (each <= k; default 1, 4, k); temperature: sampling temperature.
        dataset: a task name or a file / directory (default: the training task, on ``split``).
        split: the split of ``dataset`` (default ``test``).
        max_problems: first N problems (``None``: all). verifier, prompt_column, answer_column: for files.
        batch_size: prompts per generate call. seed: sampling seed. max_new_tokens: ``None``: the model's default.
    """

    k: int = 16
    ks: list[int] | None = None
    temperature: float = 1.0
    dataset: str | None = None
    split: str = "test"
    max_problems: int | None = None
    verifier: str | None = None
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    batch_size: int = 64
    seed: int = 0
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        from bandpo.eval.evaluate import EvalError

        try:
            settings = self.settings()
        except EvalError as err:
            raise CompareError(f"eval: {err}") from err
        self.ks = list(settings.ks or ())
        if self.max_problems is not None:
            _int("eval.max_problems", self.max_problems, 1)

    def settings(self, progress: bool = False) -> Any:
        """The :class:`bandpo.eval.evaluate.EvalSettings`."""
        from bandpo.eval.evaluate import EvalSettings

        return EvalSettings(
            k=self.k,
            ks=tuple(self.ks) if self.ks else None,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            seed=self.seed,
            progress=progress,
        )


@dataclass
class CurveSpec:
    """``curves:``: held-out accuracy during training, every ``every`` optimizer steps (and at steps 0 and the
    last), with ``k`` samples on the first ``max_problems`` problems of the eval dataset (``every: 0``: off)."""

    every: int = 0
    k: int = 4
    max_problems: int | None = 100

    def __post_init__(self) -> None:
        _int("curves.every", self.every, 0)
        _int("curves.k", self.k, 1)
        if self.max_problems is not None:
            _int("curves.max_problems", self.max_problems, 1)


@dataclass
class CompareConfig:
    """A compare config (module docstring). ``source`` is the YAML file, if any."""

    output_dir: str = "runs/compare"
    train_config: str = "configs/tiny.yaml"
    train_overrides: dict[str, Any] = field(default_factory=dict)
    methods: list[MethodSpec] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0])
    reference: str | None = None
    eval: EvalSpec = field(default_factory=EvalSpec)
    curves: CurveSpec = field(default_factory=CurveSpec)
    baseline: bool = True
    num_threads: int | None = None
    smooth: int = 1
    source: str | None = None

    def __post_init__(self) -> None:
        if not self.methods:
            self.methods = [MethodSpec(label, rule, dict(params)) for label, rule, params in DEFAULT_METHODS]
        labels = [m.label for m in self.methods]
        duplicates = sorted({x for x in labels if labels.count(x) > 1})
        if duplicates:
            raise CompareError(f"methods: labels must be unique, got {', '.join(duplicates)} more than once")
        if not isinstance(self.seeds, list) or not self.seeds:
            raise CompareError(f"seeds must be a non-empty list of integers >= 0, got {self.seeds!r}")
        for seed in self.seeds:
            _int("seeds entries", seed, 0)
        if len(set(self.seeds)) != len(self.seeds):
            raise CompareError(f"seeds must be distinct, got {self.seeds}")
        if self.reference is None:
            self.reference = "grpo" if "grpo" in labels else labels[0]
        elif self.reference not in labels:
            raise CompareError(
                f"reference must be one of the method labels ({', '.join(labels)}), got {self.reference!r}"
            )
        if self.num_threads is not None:
            _int("num_threads", self.num_threads, 1)
        _int("report.smooth", self.smooth, 1)
        if not isinstance(self.output_dir, str) or not self.output_dir.strip():
            raise CompareError(f"output_dir must be a directory path, got {self.output_dir!r}")

    def method(self, label: str) -> MethodSpec:
        for m in self.methods:
            if m.label == label:
                return m
        raise CompareError(
            f"no method labelled {label!r}; labels: {', '.join(m.label for m in self.methods)}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The config as YAML-ready nested dict (the file layout)."""
        return {
            "output_dir": self.output_dir,
            "train": {"config": self.train_config, "overrides": copy.deepcopy(self.train_overrides)},
            "methods": [m.to_dict() for m in self.methods],
            "seeds": list(self.seeds),
            "reference": self.reference,
            "eval": dataclasses.asdict(self.eval),
            "curves": dataclasses.asdict(self.curves),
            "baseline": self.baseline,
            "num_threads": self.num_threads,
            "report": {"smooth": self.smooth},
        }


_TOP_KEYS = (
    "output_dir",
    "train",
    "methods",
    "seeds",
    "reference",
    "eval",
    "curves",
    "baseline",
    "num_threads",
    "report",
)
_SECTION_KEYS = {
    "train": ("config", "overrides"),
    "eval": tuple(f.name for f in dataclasses.fields(EvalSpec)),
    "curves": tuple(f.name for f in dataclasses.fields(CurveSpec)),
    "report": ("smooth",),
}


def _apply_overrides(data: dict[str, Any], overrides: Iterable[str] | Mapping[str, Any]) -> None:
    """Set dotted keys: ``seeds=[0]``, ``eval.k=8``, ``train.overrides.max_steps=4`` (the part after
    ``train.overrides.`` is one training key, dots kept: ``train.overrides.model.path=/m``)."""
    items: list[tuple[str, Any]] = []
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
    else:
        for text in overrides:
            if "=" not in text:
                raise CompareError(f"overrides must look like key=value (e.g. seeds=[0]), got {text!r}")
            key, _, value = text.partition("=")
            items.append((key.strip(), parse_scalar(value)))
    for key, value in items:
        if key.startswith("train.overrides."):
            train = data.setdefault("train", {}) or {}
            data["train"] = train
            train.setdefault("overrides", {})
            if train["overrides"] is None:
                train["overrides"] = {}
            train["overrides"][key[len("train.overrides.") :]] = value
            continue
        parts = key.split(".")
        head = parts[0]
        if head not in _TOP_KEYS:
            raise CompareError(
                f"unknown compare config key {key!r}{did_you_mean(head, _TOP_KEYS)}; keys: {', '.join(_TOP_KEYS)}"
            )
        target = data
        for part in parts[:-1]:
            if not isinstance(target.get(part), dict):
                target[part] = {}
            target = target[part]
        target[parts[-1]] = value


def load_compare_config(
    path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()
) -> CompareConfig:
    """Read a compare config (module docstring) and apply ``key=value`` overrides.

    ``train.config`` is resolved relative to the file (``configs/tiny.yaml`` from ``configs/compare-tiny.yaml``
    is written ``tiny.yaml``); ``output_dir`` relative to the working directory.

    Raises:
        CompareError: unreadable file, unknown key (with the closest valid key), bad value, unknown clip rule or
            parameter, duplicate labels, a missing training config.
    """
    data: dict[str, Any] = {}
    base_dir = Path.cwd()
    source = None
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise CompareError(f"compare config {str(path)!r} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as err:
            raise CompareError(f"compare config {str(path)!r} is not valid YAML: {err}") from err
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise CompareError(
                f"compare config {str(path)!r} must hold a mapping, got {type(loaded).__name__}"
            )
        data = loaded
        base_dir = p.resolve().parent
        source = str(path)
    _apply_overrides(data, overrides)
    for key, value in data.items():
        if key not in _TOP_KEYS:
            raise CompareError(
                f"unknown compare config key {key!r}{did_you_mean(key, _TOP_KEYS)}; keys: {', '.join(_TOP_KEYS)}"
            )
        if key in _SECTION_KEYS:
            if value is None:
                data[key] = value = {}
            if not isinstance(value, dict):
                raise CompareError(
                    f"{key} must be a mapping of {', '.join(_SECTION_KEYS[key])}, got {value!r}"
                )
            for sub in value:
                if sub not in _SECTION_KEYS[key]:
                    raise CompareError(
                        f"unknown compare config key {key}.{sub}{did_you_mean(str(sub), _SECTION_KEYS[key])}; keys of "
                        f"{key}: {', '.join(_SECTION_KEYS[key])}"
                    )
    train = data.get("train", {})
    train_path = train.get("config", "tiny.yaml" if path is not None else "configs/tiny.yaml")
    if not isinstance(train_path, str):
        raise CompareError(f"train.config must be a path to a training config, got {train_path!r}")
    resolved = (base_dir / os.path.expandvars(train_path)).expanduser()
    if not resolved.is_file():
        raise CompareError(
            f"train.config {train_path!r} does not exist (resolved to {str(resolved)!r}; relative to the compare "
            "config's directory)"
        )
    train_overrides = train.get("overrides") or {}
    if not isinstance(train_overrides, dict):
        raise CompareError(f"train.overrides must be a mapping of training keys, got {train_overrides!r}")
    methods_raw = data.get("methods") or []
    if not isinstance(methods_raw, list):
        raise CompareError(f"methods must be a list of {{label, method, params}}, got {methods_raw!r}")
    methods = []
    keys = ("label", "method", "clip_rule", "params")
    for i, item in enumerate(methods_raw):
        if isinstance(item, str):
            item = {"method": item}
        if not isinstance(item, dict):
            raise CompareError(
                f"methods[{i}] must be a mapping with method or clip_rule (and label, params), got {item!r}"
            )
        unknown = sorted(map(str, set(item) - set(keys)))
        if unknown:
            raise CompareError(
                f"methods[{i}] has unknown key(s) {', '.join(unknown)}{did_you_mean(unknown[0], keys)}; keys: "
                f"{', '.join(keys)}"
            )
        name = item.get("method", item.get("clip_rule"))
        if name is None:
            from bandpo.training.methods import METHODS

            raise CompareError(
                f"methods[{i}] needs method (a method name: {', '.join(METHODS.names())}), got {item!r}"
            )
        params = item.get("params") or {}
        label = item.get("label") or _default_label(str(name), params)
        methods.append(
            MethodSpec(label=label, clip_rule=item.get("clip_rule"), params=params, method=item.get("method"))
        )

    def section(name: str, cls: type) -> Any:
        try:
            return cls(**(data.get(name) or {}))
        except TypeError as err:
            raise CompareError(f"{name}: {err}") from err

    seeds = data.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    return CompareConfig(
        output_dir=str(data.get("output_dir", "runs/compare")),
        train_config=str(resolved),
        train_overrides=dict(train_overrides),
        methods=methods,
        seeds=seeds,
        reference=data.get("reference"),
        eval=section("eval", EvalSpec),
        curves=section("curves", CurveSpec),
        baseline=bool(data.get("baseline", True)),
        num_threads=data.get("num_threads"),
        smooth=(data.get("report") or {}).get("smooth", 1),
        source=source,
    )


def _default_label(rule: str, params: Mapping[str, Any]) -> str:
    divergence = params.get("divergence")
    return f"{rule}-{divergence}" if divergence else str(rule)


# ---------------------------------------------------------------------------------------------------- plan
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


def _fingerprint(payload: Any) -> str:
    blob = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    a, b = _flatten(old), _flatten(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _base_train_config(config: CompareConfig) -> Any:
    from bandpo.training.config import ConfigError, load_train_config

    try:
        return load_train_config(config.train_config, config.train_overrides)
    except ConfigError as err:
        raise CompareError(f"train: {err}") from err


def plan_runs(config: CompareConfig) -> list[RunPlan]:
    """Every (method, seed) run with its training config, in order (methods outer, seeds inner), and its status
    (``done``: finished with this config; ``stale``: finished or started with another config; ``partial``:
    started with this config, resumed; ``new``).

    Raises:
        CompareError: a training config the trainer refuses (checked for every run without loading a model).
    """
    from bandpo.training.config import ConfigError, TrainConfig
    from bandpo.training.methods import switch_keys

    base = _base_train_config(config)
    base_dict = base.to_dict()
    base_method = base.training_method().name
    out_root = Path(config.output_dir)
    plans = []
    for index, method in enumerate(config.methods):
        chosen = method.training_method()
        for seed in config.seeds:
            run_dir = out_root / "runs" / method.label / f"seed{seed}"
            d = copy.deepcopy(base_dict)
            # the recipe's method settings go, as when a config layer switches method
            for key in switch_keys(base_method, chosen.name):
                d.pop(key, None)
            d.update(chosen.config_entries(copy.deepcopy(method.params)))
            d["seed"] = seed
            d["output_dir"] = str(run_dir)
            try:
                train_config = TrainConfig.from_dict(d, source=base.source)
            except ConfigError as err:
                raise CompareError(f"methods[{method.label}] seed {seed}: {err}") from err
            train_dict = json.loads(json.dumps(train_config.to_dict(), default=str))
            payload = {
                "train": {k: v for k, v in train_dict.items() if k != "output_dir"},
                "eval": dataclasses.asdict(config.eval),
                "curves": dataclasses.asdict(config.curves),
            }
            plan = RunPlan(method, index, seed, run_dir, train_dict, base.source, _fingerprint(payload))
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
        try:
            same = json.loads(spec.read_text()).get("fingerprint") == plan.fingerprint
        except json.JSONDecodeError:
            same = False
        return "partial" if same else "stale"
    return "partial" if plan.run_dir.exists() else "new"


def check_plans(config: CompareConfig, plans: Sequence[RunPlan], redo: bool = False) -> None:
    """Refuse runs (finished or started) made with another config, unless ``redo``, naming the keys that differ."""
    stale = [p for p in plans if p.status == "stale"]
    if not stale or redo:
        return
    p = stale[0]
    differing = ""
    try:
        old_spec = json.loads((p.run_dir / RUN_SPEC_FILE).read_text())
        old = {k: old_spec.get(k) for k in ("train_config", "eval", "curves")}
        new = {k: v for k, v in p.spec(config).items() if k in old}
        keys = [k for k in _differences(old, new) if not k.endswith("output_dir")]
        differing = f" (differs in: {', '.join(keys[:8])})" if keys else ""
    except (OSError, json.JSONDecodeError):
        pass
    raise CompareError(
        f"{len(stale)} run(s) in {config.output_dir!r} were made (or started) with another config, e.g. "
        f"{p.method.label} seed {p.seed}{differing}: choose another output_dir, or pass --redo to retrain them"
    )


def validate_with_trainer(plans: Sequence[RunPlan], locked_ok: bool = False) -> None:
    """Every unfinished run's config through ``prepare`` (batch arithmetic, the method's TRL config, reward, data;
    no model loaded). ``locked_ok``: a run whose directory another live process holds (a comparison in progress)
    is skipped instead of refused (for ``--dry-run``)."""
    from bandpo.training.config import ConfigError, TrainConfig
    from bandpo.training.lock import OutputDirLockedError
    from bandpo.training.run import prepare

    for plan in plans:
        if plan.status == "done":
            continue
        try:
            prepare(TrainConfig.from_dict(plan.train_config, source=plan.train_source), resume=True)
        except ConfigError as err:
            if locked_ok and isinstance(err, OutputDirLockedError):
                continue
            raise CompareError(f"methods[{plan.method.label}] seed {plan.seed}: {err}") from err


# ------------------------------------------------------------------------------------------------ eval data
def eval_dataset(spec: Mapping[str, Any], train_config: Mapping[str, Any], max_problems: int | None) -> Any:
    """The eval dataset of ``spec`` (an ``EvalSpec`` dict): its ``dataset``, or the training task's ``split``."""
    from bandpo.eval.evaluate import EvalError, load_eval_dataset

    data = train_config.get("data") or {}
    dataset = spec.get("dataset")
    task_options = None
    if dataset is None:
        if not data.get("task"):
            raise CompareError(
                "eval.dataset is required when training on files (data.path): name a task or an eval file"
            )
        dataset = data["task"]
    if dataset == data.get("task"):
        task_options = data.get("task_options") or {}
    try:
        return load_eval_dataset(
            dataset,
            split=spec.get("split", "test"),
            verifier=spec.get("verifier"),
            prompt_column=spec.get("prompt_column", "prompt"),
            answer_column=spec.get("answer_column", "answer"),
            task_options=task_options,
            max_problems=max_problems,
        )
    except EvalError as err:
        raise CompareError(f"eval: {err}") from err


def _eval_settings(spec: Mapping[str, Any], k: int | None = None, progress: bool = False) -> Any:
    from bandpo.eval.evaluate import EvalSettings

    ks = spec.get("ks") if k is None else sorted({1, k})
    return EvalSettings(
        k=spec["k"] if k is None else k,
        ks=tuple(ks) if ks else None,
        temperature=spec["temperature"],
        max_new_tokens=spec.get("max_new_tokens"),
        batch_size=spec.get("batch_size", 64),
        seed=spec.get("seed", 0),
        progress=progress,
    )


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------- held-out curve
def _heldout_callback(path: Path, dataset: Any, settings: Any, every: int) -> Any:
    """A ``TrainerCallback`` that evaluates the policy being trained at step 0, every ``every`` optimizer steps and
    at the last step, appending ``{"step", **overall metrics}`` rows to ``path`` (rows after the step a resumed run
    restarts from are dropped first)."""
    from transformers import TrainerCallback

    from bandpo.eval.evaluate import evaluate_model

    class HeldoutCallback(TrainerCallback):
        def __init__(self) -> None:
            self.done: set[int] = set()

        def _evaluate(self, step: int, model: Any, tokenizer: Any) -> None:
            if step in self.done or model is None or tokenizer is None:
                return
            self.done.add(step)
            out = evaluate_model(model, tokenizer, [dataset], settings)
            row = {"step": step, "time": round(time.time(), 3), **out["overall"]}
            with path.open("a") as f:
                f.write(json.dumps(row) + "\n")

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            from bandpo.training.callbacks import read_metrics

            keep = (
                [r for r in read_metrics(path) if r.get("step", 0) <= state.global_step]
                if state.global_step
                else []
            )
            self.done = {int(r["step"]) for r in keep}
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
            os.replace(tmp, path)
            if state.global_step == 0:
                self._evaluate(0, kwargs.get("model"), kwargs.get("processing_class"))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step = state.global_step
            if (every and step % every == 0) or step >= state.max_steps:
                self._evaluate(step, kwargs.get("model"), kwargs.get("processing_class"))

    return HeldoutCallback()


# ------------------------------------------------------------------------------------------- one run (child)
def run_one(spec_path: str | Path) -> int:
    """Train one run and evaluate its final policy (the child process of :func:`run_compare`).

    Reads ``run_spec.json``; trains into its directory (resuming from the last checkpoint, skipped when
    ``train_done.json`` says training finished), then writes ``results.json`` (atomically, last)."""
    import torch

    from bandpo.eval.evaluate import evaluate_model_dir
    from bandpo.training.config import TrainConfig
    from bandpo.training.run import train

    spec_path = Path(spec_path)
    spec = json.loads(spec_path.read_text())
    run_dir = spec_path.parent
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    config = TrainConfig.from_dict(spec["train_config"], source=spec.get("train_source"))
    curves = spec["curves"]
    start = time.time()
    done_marker = run_dir / TRAIN_DONE_FILE
    if not (done_marker.is_file() and (run_dir / "config.json").is_file()):
        callbacks = []
        if curves.get("every", 0):
            data = eval_dataset(spec["eval"], spec["train_config"], curves.get("max_problems"))
            settings = _eval_settings(spec["eval"], k=curves["k"])
            callbacks.append(
                _heldout_callback(run_dir / HELDOUT_FILE, data, settings, curves.get("every", 0))
            )
        train(config, resume=True, callbacks=callbacks)
        _write_json(done_marker, {"wall_time_s": round(time.time() - start, 2), "finished": time.time()})
    train_info = json.loads(done_marker.read_text())
    eval_start = time.time()
    data = eval_dataset(spec["eval"], spec["train_config"], spec["eval"].get("max_problems"))
    result = evaluate_model_dir(run_dir, [data], _eval_settings(spec["eval"], progress=True))
    metrics = result["overall"]
    _write_json(
        run_dir / RESULTS_FILE,
        {
            "label": spec["label"],
            "method": spec.get("method", spec["clip_rule"]),
            "clip_rule": spec["clip_rule"],
            "params": spec["params"],
            "seed": spec["seed"],
            "fingerprint": spec["fingerprint"],
            "dataset": data.name,
            "settings": result["settings"],
            "metrics": metrics,
            "train_wall_s": train_info.get("wall_time_s"),
            "eval_wall_s": round(time.time() - eval_start, 2),
        },
    )
    print(
        f"bandpo compare: {spec['label']} seed {spec['seed']}: {_headline(metrics, spec['eval']['k'])}",
        flush=True,
    )
    return 0


def _headline(metrics: Mapping[str, Any], k: int) -> str:
    parts = []
    for key in (f"mean@{k}", "pass@1", f"pass@{k}"):
        if metrics.get(key) is not None:
            parts.append(f"{key} {100 * metrics[key]:.1f}%")
    if metrics.get("entropy") is not None:
        parts.append(f"entropy {metrics['entropy']:.3f}")
    return ", ".join(parts) or "no metrics"


# --------------------------------------------------------------------------------------------- the baseline
def _starting_model(train_config: Any) -> Path:
    from bandpo.training.tasks import build_task_model, default_cache_dir

    if train_config.model.uses_task_model:
        cache = (
            Path(train_config.model.cache_dir).expanduser()
            if train_config.model.cache_dir
            else default_cache_dir()
        )
        return build_task_model(
            train_config.data.task, train_config.data.task_options, train_config.model.warm_start, cache
        )
    return Path(str(train_config.model.path))


def evaluate_baseline(config: CompareConfig, progress: bool = True) -> dict[str, Any] | None:
    """Evaluate the starting policy once (``<output_dir>/baseline/results.json``, reused when its fingerprint
    matches). Returns the results, or ``None`` for a Hugging Face id that is not a local directory."""

    base = _base_train_config(config)
    model = _starting_model(base)
    if not model.is_dir():
        return None
    spec = dataclasses.asdict(config.eval)
    train_dict = json.loads(json.dumps(base.to_dict(), default=str))
    fingerprint = _fingerprint({"model": str(model.resolve()), "eval": spec, "data": train_dict.get("data")})
    out_dir = Path(config.output_dir) / "baseline"
    path = out_dir / RESULTS_FILE
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("fingerprint") == fingerprint:
            return old
    out_dir.mkdir(parents=True, exist_ok=True)
    with _torch_threads(config.num_threads):
        return _evaluate_baseline(config, model, spec, train_dict, fingerprint, path, progress)


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Use ``n`` torch threads inside the block (the runs get ``OMP_NUM_THREADS``; this process needs the same on a
    busy machine: sampling with oversubscribed threads measured 15x slower here)."""
    import torch

    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _evaluate_baseline(
    config: CompareConfig,
    model: Path,
    spec: dict[str, Any],
    train_dict: dict[str, Any],
    fingerprint: str,
    path: Path,
    progress: bool,
) -> dict[str, Any]:
    from bandpo.eval.evaluate import evaluate_model_dir

    data = eval_dataset(spec, train_dict, config.eval.max_problems)
    result = evaluate_model_dir(model, [data], _eval_settings(spec, progress=progress))
    out = {
        "label": "baseline",
        "model": str(model),
        "fingerprint": fingerprint,
        "dataset": data.name,
        "settings": result["settings"],
        "metrics": result["overall"],
        "eval_wall_s": result["wall_time_s"],
    }
    if config.curves.every:
        curve = evaluate_model_dir(
            model,
            [eval_dataset(spec, train_dict, config.curves.max_problems)],
            _eval_settings(spec, k=config.curves.k),
        )
        out["curve_metrics"] = curve["overall"]
    _write_json(path, out)
    return out


# ------------------------------------------------------------------------------------------------ the driver
def write_plan(config: CompareConfig, plans: Sequence[RunPlan]) -> Path:
    """``<output_dir>/compare_plan.json``: the config and the runs (the report reads method order, reference and
    eval settings from it); also ``compare_config.yaml``."""
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare_config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    plan = {
        "config": config.to_dict(),
        "source": config.source,
        "reference": config.reference,
        "methods": [
            {"label": m.label, "method": m.method, "clip_rule": m.clip_rule, "params": m.params}
            for m in config.methods
        ],
        "seeds": list(config.seeds),
        "runs": [
            {"label": p.method.label, "seed": p.seed, "dir": str(p.run_dir), "fingerprint": p.fingerprint}
            for p in plans
        ],
    }
    _write_json(out / PLAN_FILE, plan)
    return out / PLAN_FILE


def _discard(run_dir: Path) -> None:
    import shutil

    if run_dir.is_dir():
        shutil.rmtree(run_dir)


def _child_env(config: CompareConfig) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if config.num_threads is not None:
        env["OMP_NUM_THREADS"] = str(config.num_threads)
        env["MKL_NUM_THREADS"] = str(config.num_threads)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line[-300:] for line in lines[-n:])


# ------------------------------------------------------------------------------------------------ export
def export_results(output_dir: str | Path, dest: str | Path) -> list[Path]:
    """Copy the compact results of a comparison into ``dest``: what the report needs, not the models.

    Writes, in the layout of ``output_dir``: the plan, the baseline evaluation, for every started run its
    spec, training config, final evaluation, held-out curve and the training log ``metrics.jsonl`` gzipped
    (``metrics.jsonl.gz``, byte-for-byte reproducible), and the report directory if there is one (but its
    ``report.html``, which embeds the figures again). A report
    rebuilt from ``dest`` (``bandpo compare --config ... output_dir=DEST --report-only``) equals one built
    from ``output_dir``.

    Returns:
        The files written.

    Raises:
        CompareError: ``output_dir`` holds no runs, or ``dest`` is inside it or the same directory.
    """
    import gzip
    import shutil

    from bandpo.training.run import CONFIG_FILE

    # what is kept of a run directory besides its training log (no weights, no checkpoints)
    run_files = (RUN_SPEC_FILE, RESULTS_FILE, TRAIN_DONE_FILE, HELDOUT_FILE, CONFIG_FILE)
    src, out = Path(output_dir).resolve(), Path(dest).resolve()
    if out == src or src in out.parents:
        raise CompareError(
            f"export destination {str(dest)!r} must be outside the output_dir {str(output_dir)!r}"
        )
    run_dirs = sorted(p.parent for p in src.glob(f"runs/*/seed*/{RUN_SPEC_FILE}"))
    if not run_dirs:
        raise CompareError(
            f"nothing to export: no runs in {str(output_dir)!r} (runs/<label>/seed<n>/{RUN_SPEC_FILE})"
        )
    written: list[Path] = []

    def copy(path: Path) -> None:
        target = out / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        written.append(target)

    for path in (src / PLAN_FILE, src / "baseline" / RESULTS_FILE):
        if path.is_file():
            copy(path)
    for run_dir in run_dirs:
        for name in run_files:
            if (run_dir / name).is_file():
                copy(run_dir / name)
        metrics = run_dir / "metrics.jsonl"
        if metrics.is_file():
            target = out / metrics.relative_to(src).with_name("metrics.jsonl.gz")
            target.write_bytes(gzip.compress(metrics.read_bytes(), compresslevel=9, mtime=0))
            written.append(target)
    report = src / "report"
    if report.is_dir():  # report.html is left out: it embeds the figures a second time (rebuild it from here)
        for path in sorted(p for p in report.rglob("*") if p.is_file() and p.suffix != ".html"):
            copy(path)
    return written


def run_compare(
    config: CompareConfig,
    *,
    redo: bool = False,
    report_only: bool = False,
    progress: bool = True,
    log: Any = None,
) -> Path:
    """Run every (method, seed) not finished yet, evaluate the baseline, and build the report.

    Args:
        config: from :func:`load_compare_config`.
        redo: retrain finished runs whose config differs from ``config`` (otherwise they are refused).
        report_only: train nothing; build the report from the runs that exist.
        progress: progress bar over runs (with ETA) and over the baseline evaluation.
        log: a file for the one-line messages (default ``sys.stdout``).

    Returns:
        The report directory. Runs that failed are listed in the report and on ``log``; training logs are in each
        run's ``train.log``.

    Raises:
        CompareError: bad config, or finished runs made with another config (without ``redo``).
    """
    from tqdm.auto import tqdm

    from bandpo.eval.report import build_report

    log = log or sys.stdout

    def say(text: str) -> None:
        print(text, file=log, flush=True)

    plans = plan_runs(config)
    check_plans(config, plans, redo=redo)
    failures: list[str] = []
    if not report_only:
        validate_with_trainer(plans)
        write_plan(config, plans)
        todo = [p for p in plans if p.status != "done"]
        done = len(plans) - len(todo)
        say(
            f"bandpo compare: {len(config.methods)} methods x {len(config.seeds)} seeds = {len(plans)} runs in "
            f"{config.output_dir} ({done} finished already, {len(todo)} to run)"
        )
        if config.baseline:
            say("bandpo compare: evaluating the starting policy (baseline)")
            try:
                evaluate_baseline(config, progress=progress)
            except Exception as err:  # the comparison itself does not depend on it
                say(f"bandpo compare: warning: baseline evaluation failed: {err}")
        env = _child_env(config)
        bar = tqdm(
            total=len(todo), unit="run", desc="compare", disable=not progress, dynamic_ncols=True, file=log
        )
        try:
            for plan in todo:
                bar.set_postfix_str(f"{plan.method.label} seed {plan.seed}")
                if plan.status == "stale":
                    _discard(plan.run_dir)
                plan.run_dir.mkdir(parents=True, exist_ok=True)
                _write_json(plan.run_dir / RUN_SPEC_FILE, plan.spec(config))
                log_path = plan.run_dir / LOG_FILE
                start = time.time()
                with log_path.open("a") as out:
                    out.write(
                        f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {plan.method.label} seed {plan.seed}\n"
                    )
                    out.flush()
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "bandpo.eval.compare", str(plan.run_dir / RUN_SPEC_FILE)],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                    try:
                        rc = proc.wait()
                    except KeyboardInterrupt:
                        proc.terminate()
                        proc.wait()
                        raise
                elapsed = time.time() - start
                if rc == 0 and (plan.run_dir / RESULTS_FILE).is_file():
                    metrics = json.loads((plan.run_dir / RESULTS_FILE).read_text())["metrics"]
                    bar.write(
                        f"  {plan.method.label} seed {plan.seed}: {_headline(metrics, config.eval.k)} ({elapsed:.0f} s)"
                    )
                else:
                    failures.append(f"{plan.method.label} seed {plan.seed}")
                    bar.write(
                        f"  {plan.method.label} seed {plan.seed}: FAILED (exit code {rc}); log {log_path}:\n{_tail(log_path)}"
                    )
                bar.update(1)
        finally:
            bar.close()
    report_dir = build_report(
        config.output_dir,
        reference=config.reference,
        smooth=config.smooth,
        methods=[m.label for m in config.methods],
        seeds=list(config.seeds),
        rules={m.label: (m.method, m.params) for m in config.methods},
    )
    say(f"bandpo compare: report in {report_dir / 'report.md'} and {report_dir / 'report.html'}")
    if failures:
        say(f"bandpo compare: {len(failures)} run(s) failed: {', '.join(failures)}")
    return report_dir


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(
            "usage: python -m bandpo.eval.compare RUN_SPEC.json (started by bandpo compare)", file=sys.stderr
        )
        sys.exit(2)
    sys.exit(run_one(sys.argv[1]))
