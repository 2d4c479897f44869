"""The compare config: methods, seeds, evaluation, held-out curves (its keys: docs/trl.md)."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bandpo.validation import check_int_in
from bandpo_lab._files import expand_path, recipe_kind
from bandpo_lab.config import (
    OVERRIDES_LABEL,
    ConfigError,
    build_dataclass,
    config_file,
    located,
    merge,
    override_layer,
    parse_scalar,
    read_layers,
    shown_path,
    split_override,
    unknown_key,
    where,
)
from bandpo_lab.runtime.seeds import SEED_MAX, check_seed
from bandpo_lab.runtime.threads import check_threads

_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class CompareError(ValueError):
    """A problem with the compare config or its output directory, found before training."""


def _check_seeds(name: str, entries: str, seeds: Any) -> None:
    if not isinstance(seeds, list) or not seeds:
        raise CompareError(f"{name} must be a non-empty list of integers in [0, {SEED_MAX}], got {seeds!r}")
    for seed in seeds:
        check_seed(entries, seed, error=CompareError)


@dataclass
class MethodSpec:
    """One method with its parameters, under a label (unique, letters / digits / ``_.+-``: its directory name).

    ``method`` (any name of :data:`bandpo_lab.training.methods.METHODS`) or ``clip_rule`` names it; after
    construction ``method`` is its name and ``clip_rule`` the same, or ``None`` for a TRL-native method. ``params``:
    the rule's parameters and radius schedule, or the ``GRPOConfig`` fields a TRL-native method takes. ``seeds``:
    its own seeds (``None``: the config's). ``where`` (``in FILE:LINE``) is named by its errors.
    """

    label: str
    clip_rule: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    method: str | None = None
    seeds: list[int] | None = None
    where: str | None = field(default=None, compare=False, repr=False)

    def _name(self, suffix: str = "") -> str:
        """``methods[LABEL]SUFFIX (in FILE:LINE)``: how errors name this entry (or one of its keys)."""
        return located(f"methods[{self.label}]{suffix}", self.where)

    def __post_init__(self) -> None:
        from bandpo_lab.training.methods import METHODS

        if not isinstance(self.label, str) or not _LABEL_RE.match(self.label):
            raise CompareError(
                f"{located('methods', self.where)}: label must be letters, digits and _.+- (it names a directory), got {self.label!r}"
            )
        name = self._name()
        if not isinstance(self.params, Mapping):
            raise CompareError(f"{self._name('.params')} must be a mapping, got {self.params!r}")
        self.params = dict(self.params)
        if self.seeds is not None:
            _check_seeds(self._name(".seeds"), self._name(".seeds entries"), self.seeds)
        if self.method is None and self.clip_rule is None:
            raise CompareError(
                f"{name} needs method (a method name: {', '.join(METHODS.names())}) or clip_rule"
            )
        if self.method is not None and self.clip_rule is not None and self.method != self.clip_rule:
            raise CompareError(
                f"{name}: method={self.method!r} and clip_rule={self.clip_rule!r} name different "
                "methods: set one of them"
            )
        try:
            if self.method is not None:
                method: Any = METHODS.get(self.method)
            else:
                method = METHODS.clip_rule(self.clip_rule)  # type: ignore[arg-type]
            method.check_params(copy.deepcopy(self.params))
        except (TypeError, ValueError) as err:
            raise CompareError(f"{name}: {err}") from err
        self.method = method.name
        self.clip_rule = None if METHODS.is_trl_native(method.name) else method.name

    def training_method(self) -> Any:
        """The method (:data:`bandpo_lab.training.methods.METHODS`): how the runs are configured and trained."""
        from bandpo_lab.training.methods import METHODS

        return METHODS.get(self.method)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """``{label, clip_rule | method, params}`` as a compare config lists it (``clip_rule`` for a clip rule)."""
        key = "clip_rule" if self.clip_rule is not None else "method"
        out = {"label": self.label, key: self.method, "params": copy.deepcopy(self.params)}
        return out if self.seeds is None else {**out, "seeds": list(self.seeds)}


DEFAULT_METHODS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("grpo", "grpo", {}),
    ("clip_higher", "clip_higher", {}),
    ("dcpo", "dcpo", {}),
    ("band-kl", "band", {"divergence": "kl", "delta": 0.05}),
    ("band-tv", "band", {"divergence": "tv", "delta": 0.05}),
    ("band-chi2", "band", {"divergence": "chi2", "delta": 0.05}),
    ("adaptive_band", "adaptive_band", {"divergence": "kl", "delta": 0.05}),
)
"""``(label, clip_rule, params)`` of the methods compared when the config lists none."""


@dataclass
class EvalSpec:
    """``eval:``: the final evaluation of every run (and of the starting policy), as ``bandpo eval``'s settings;
    ``dataset`` defaults to the training task (on ``split``), ``max_problems`` to all; ``at_steps``: optimizer steps
    (each below the last) at which each run is also evaluated during training (docs/trl.md: the late mean)."""

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
    precision: str = "auto"
    at_steps: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        from bandpo_lab.eval.errors import EvalError

        # numpy's, as training's seed: a larger one passed and each run failed at its final evaluation
        check_seed("eval.seed", self.seed, error=CompareError)
        try:
            settings = self.settings()
        except EvalError as err:
            raise CompareError(f"eval: {err}") from err
        self.ks = list(settings.ks or ())
        if self.max_problems is not None:
            check_int_in("eval.max_problems", self.max_problems, 1, error=CompareError)
        if not isinstance(self.at_steps, list):
            raise CompareError(f"eval.at_steps must be a list of optimizer steps >= 1, got {self.at_steps!r}")
        for step in self.at_steps:
            check_int_in("eval.at_steps entries", step, 1, error=CompareError)
        if self.at_steps != sorted(set(self.at_steps)):
            raise CompareError(f"eval.at_steps must be increasing and distinct, got {self.at_steps}")

    def settings(self, k: int | None = None, progress: bool = False) -> Any:
        """The :class:`bandpo_lab.eval.settings.EvalSettings`; with ``k``, these for ``k`` samples (pass@1 and
        pass@k: the held-out curves)."""
        from bandpo_lab.eval.settings import EvalSettings

        ks = self.ks if k is None else sorted({1, k})
        return EvalSettings(
            k=self.k if k is None else k,
            ks=tuple(ks) if ks else None,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            seed=self.seed,
            precision=self.precision,
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
        check_int_in("curves.every", self.every, 0, error=CompareError)
        check_int_in("curves.k", self.k, 1, error=CompareError)
        if self.max_problems is not None:
            check_int_in("curves.max_problems", self.max_problems, 1, error=CompareError)


@dataclass
class CompareConfig:
    """A compare config (docs/trl.md). ``source`` is the YAML file, if any."""

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
        _check_seeds("seeds", "seeds entries", self.seeds)
        if len(set(self.seeds)) != len(self.seeds):
            raise CompareError(f"seeds must be distinct, got {self.seeds}")
        if self.reference is None:
            self.reference = "grpo" if "grpo" in labels else labels[0]
        elif self.reference not in labels:
            raise CompareError(
                f"reference must be one of the method labels ({', '.join(labels)}), got {self.reference!r}"
            )
        if self.num_threads is not None:
            check_threads("num_threads", self.num_threads, CompareError)
        check_int_in("report.smooth", self.smooth, 1, error=CompareError)
        if not isinstance(self.output_dir, str) or not self.output_dir.strip():
            raise CompareError(
                "output_dir must be a directory path (a non-empty string; quote a name YAML reads as a number), "
                f"got {self.output_dir!r}"
            )
        # ~ and $VARS expanded once, as each run's training config reads its output_dir below this one
        expanded = expand_path(self.output_dir, "output_dir", CompareError)
        if expanded != Path(self.output_dir):
            self.output_dir = str(expanded)
        if not isinstance(self.baseline, bool):
            raise CompareError(f"baseline must be true or false, got {self.baseline!r}")

    def seeds_of(self, method: MethodSpec) -> list[int]:
        """The seeds ``method`` runs on: the config's ``seeds``, or those of them in the method's own ``seeds``."""
        return [s for s in self.seeds if method.seeds is None or s in method.seeds]

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


@dataclass
class _TrainSection:
    """``train:``: the training recipe and the overrides every run applies to it."""

    config: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class _ReportSection:
    smooth: int = 1


@dataclass
class _MethodEntry:
    """An entry of ``methods:`` as written (a bare name is ``{method: NAME}``): :class:`MethodSpec`'s arguments."""

    label: str | None = None
    method: str | None = None
    clip_rule: str | None = None
    params: dict[str, Any] | None = None
    seeds: list[int] | None = None


_SECTIONS: dict[str, type] = {
    "train": _TrainSection,
    "eval": EvalSpec,
    "curves": CurveSpec,
    "report": _ReportSection,
}
_TOP_KEYS = ("output_dir", "methods", "seeds", "reference", "baseline", "num_threads", *_SECTIONS)
_OVERRIDES_PREFIX = "train.overrides."


def _read(
    path: str | Path | None, overrides: Iterable[str] | Mapping[str, Any]
) -> tuple[dict[str, Any], Any, dict[str, str]]:
    """The file and the overrides merged (:mod:`bandpo_lab.config`), top-level keys checked, the sections built, and
    where each key was set. ``train.overrides.KEY=VALUE`` sets one training key, dots kept (``model.path``)."""
    items = (
        list(overrides.items())
        if isinstance(overrides, Mapping)
        else [split_override(text, "e.g. seeds=[0]") for text in overrides]
    )
    read = {k: parse_scalar(v, located(k, OVERRIDES_LABEL)) if isinstance(v, str) else v for k, v in items}
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    layers = (
        read_layers(path, what="compare config", base_key=None, kind="compare") if path is not None else []
    )
    from bandpo_lab.training.sections import SECTIONS as TRAIN_SECTIONS

    file_keys = {k for layer in layers for k in layer.values}
    sections = sorted(file_keys & set(TRAIN_SECTIONS))
    if recipe_kind(file_keys) == "train" and sections:  # a training recipe, not a mistyped compare key
        shown = shown_path(Path(str(path)))
        raise ConfigError(
            f"compare config {shown} is a training config (it has the sections {', '.join(sections)}): run it "
            f"with bandpo train --config {shown}, or name it as a compare config's train.config"
        )
    for layer in [
        *layers,
        override_layer({k: v for k, v in read.items() if not k.startswith(_OVERRIDES_PREFIX)}),
    ]:
        merge(values, origins, layer)
    for key in values:
        if key not in _TOP_KEYS:
            at = where(origins, key)
            raise unknown_key(key, _TOP_KEYS, "compare config", at, known=f"; keys: {', '.join(_TOP_KEYS)}")
    for name, cls in _SECTIONS.items():
        values[name] = build_dataclass(cls, values.get(name), name, origins, "compare config")
    train = values["train"]
    train.overrides.update(
        {k[len(_OVERRIDES_PREFIX) :]: v for k, v in read.items() if k.startswith(_OVERRIDES_PREFIX)}
    )
    _check_no_method_overrides(train.overrides, origins, read)
    return values, train, origins


def _check_no_method_overrides(
    overrides: Mapping[str, Any], origins: Mapping[str, str], read: Mapping[str, Any]
) -> None:
    """``ConfigError`` for a method key in ``train.overrides`` (every run takes its method from ``methods[]``)."""
    from bandpo.integrations.trl_spec import TRL_NAMES
    from bandpo_lab.training.methods import CLIP_RULE_KEYS, METHOD_KEY

    for key in overrides:
        if key not in CLIP_RULE_KEYS and key != METHOD_KEY:
            continue
        dotted = _OVERRIDES_PREFIX + key
        at = OVERRIDES_LABEL if dotted in read else where(origins, dotted)
        if key in (METHOD_KEY, "clip_rule"):
            instead = "choose each run's method in methods[] (clip_rule or method)"
        elif key == "clip_rule_kwargs":
            instead = "set the rule's parameters as methods[].params"
        else:
            instead = f"set it as methods[].params.{TRL_NAMES[key]} on the methods it applies to"
        raise ConfigError(
            f"{located(dotted, at)} is a setting of the method, which every run takes from its methods[] entry "
            f"(the recipe's own method settings are dropped, so it would have no effect): {instead}"
        )


def load_compare_config(
    path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()
) -> CompareConfig:
    """Read a compare config (a file, or a built-in recipe's name: ``compare-tiny``) and apply ``key=value``
    overrides; ``train.config`` is resolved as docs/trl.md says.

    Raises:
        CompareError: unreadable file, unknown key (with the closest valid key), bad value, unknown clip rule or
            parameter, duplicate labels, a missing training config.
    """
    if path is not None:
        path = config_file(path)  # a built-in recipe's name: train.config is beside it
    try:
        data, train, origins = _read(path, overrides)
    except ConfigError as err:
        raise CompareError(str(err)) from err
    base_dir = Path.cwd() if path is None else Path(path).resolve().parent
    train_path = train.config or "tiny.yaml"
    # a file beside the compare config (or, without one, here), else a built-in recipe's name (tiny, the default)
    resolved = config_file(expand_path(train_path, "train.config", CompareError), base_dir, "train.config")
    if not resolved.is_file():
        beside = "the compare config's directory" if path is not None else "the working directory"
        raise CompareError(
            f"train.config {train_path!r} does not exist (resolved to {str(resolved)!r}, relative to {beside}; no "
            "such recipe either)"
        )
    methods_raw = data.get("methods")
    if methods_raw is None:  # absent (or null): the default methods
        methods_raw = []
    elif methods_raw == []:  # not read as "the defaults": a list emptied by mistake would run seven methods
        raise CompareError(
            f"{located('methods', where(origins, 'methods'))} is an empty list: name at least one method, or leave "
            f"the key out for the {len(DEFAULT_METHODS)} default methods ({', '.join(m[0] for m in DEFAULT_METHODS)})"
        )
    if not isinstance(methods_raw, list):
        raise CompareError(f"methods must be a list of {{label, method, params}}, got {methods_raw!r}")
    methods = []
    for i, item in enumerate(methods_raw):
        found = where(origins, f"methods.{i}")
        at = None if found == "default" else found
        entry = located(f"methods[{i}]", at)
        if isinstance(item, str):
            item = {"method": item}
        if not isinstance(item, Mapping):
            raise CompareError(
                f"{entry} must be a mapping with method or clip_rule (and label, params), got {item!r}"
            )
        try:  # each key known and typed, named with its file:line (bandpo_lab.config)
            written = build_dataclass(_MethodEntry, item, f"methods.{i}", origins, "compare config")
        except ConfigError as err:
            raise CompareError(str(err)) from None
        name = written.method or written.clip_rule
        if name is None:
            from bandpo_lab.training.methods import METHODS

            raise CompareError(
                f"{entry} needs method (a method name: {', '.join(METHODS.names())}), got {item!r}"
            )
        params = written.params or {}
        methods.append(
            MethodSpec(
                label=written.label or _default_label(name, params),
                clip_rule=written.clip_rule,
                params=params,
                method=written.method,
                seeds=written.seeds,
                where=at,
            )
        )

    top = {key: value for key, value in data.items() if key not in (*_SECTIONS, "methods")}  # as written
    if isinstance(top.get("seeds"), int) and not isinstance(top["seeds"], bool):
        top["seeds"] = [top["seeds"]]
    return CompareConfig(
        train_config=str(resolved),
        train_overrides=dict(train.overrides),
        methods=methods,
        eval=data["eval"],
        curves=data["curves"],
        smooth=data["report"].smooth,
        source=None if path is None else str(path),
        **top,
    )


def _default_label(rule: str, params: Mapping[str, Any]) -> str:
    divergence = params.get("divergence")
    return f"{rule}-{divergence}" if divergence else str(rule)
