"""Tests for bandpo_lab.experiments.compare.config: presets, overrides, errors, TRL-native methods."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from synthetic_runs import CONFIGS

from bandpo.losses import make_clip_rule
from bandpo_lab.experiments.compare import (
    DEFAULT_METHODS,
    CompareError,
    load_compare_config,
    plan_runs,
)
from helpers import REPO


# ---------------------------------------------------------------------------------------------- the config
def test_presets_load_and_default_methods() -> None:
    tiny = load_compare_config(CONFIGS / "compare-tiny.yaml")
    assert [m.label for m in tiny.methods] == ["grpo", "band-kl"]
    assert tiny.reference == "grpo" and tiny.train_config == str((CONFIGS / "tiny.yaml").resolve())
    full = load_compare_config(CONFIGS / "compare-tiny-full.yaml")
    assert {m.method for m in full.methods} == {
        "grpo", "clip_higher", "dcpo", "band", "adaptive_band", "dppo_tv", "dppo_kl", "cispo", "sapo", "gspo",
    }  # fmt: skip
    assert {m.label for m in full.methods} >= {"dppo-tv", "dppo-kl", "cispo", "sapo", "gspo"}
    assert {m.params.get("divergence") for m in full.methods if m.clip_rule == "band"} == {"kl", "tv", "chi2"}
    assert {m.label for m in full.methods if m.clip_rule is None} == {"cispo", "sapo", "gspo"}  # TRL-native
    assert len(full.seeds) == 3
    default = load_compare_config(None, {"output_dir": "x"})
    assert [m.label for m in default.methods] == [label for label, _, _ in DEFAULT_METHODS]
    for m in default.methods:
        make_clip_rule(m.clip_rule, **m.params)  # every default rule builds


def test_a_built_in_recipe_is_named_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``compare-tiny`` names the shipped recipe, and its ``train.config`` is found beside it, not in the working
    directory."""
    monkeypatch.chdir(tmp_path)
    named = load_compare_config("compare-tiny")
    assert named == load_compare_config(CONFIGS / "compare-tiny.yaml")
    assert named.train_config == str((CONFIGS / "tiny.yaml").resolve())
    study = load_compare_config(REPO / "studies" / "study4" / "config.yaml")  # a study's config, by its path
    assert Path(study.train_config).resolve() == (CONFIGS / "smollm2-arith.yaml").resolve()
    with pytest.raises(
        CompareError, match=r"config '.*compare-tiniest' does not exist \(did you mean 'compare-tiny'\?\)"
    ):
        load_compare_config("compare-tiniest")
    with pytest.raises(
        CompareError,
        match=r"config '.*study/study4' does not exist; built-in recipes: compare-tiny, compare-tiny-full$",
    ):
        load_compare_config("study/study4")  # a study's config is no recipe (studies/, run from a clone)


def test_without_a_compare_file_the_training_recipe_is_found_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API without a file (``load_compare_config(None, ...)``) trains the ``tiny`` recipe from any folder, and
    takes another recipe's name or a path of the working directory."""
    monkeypatch.chdir(tmp_path)
    assert load_compare_config(None, {"output_dir": "x"}).train_config == str(CONFIGS / "tiny.yaml")
    named = load_compare_config(None, {"output_dir": "x", "train.config": "tiny-grpo"})
    assert named.train_config == str(CONFIGS / "tiny-grpo.yaml")
    (tmp_path / "mine.yaml").write_text("base: " + str(CONFIGS / "tiny.yaml") + "\n")
    assert load_compare_config(None, {"output_dir": "x", "train.config": "mine.yaml"}).train_config == str(
        tmp_path / "mine.yaml"
    )
    with pytest.raises(CompareError, match=r"train.config 'tinny' does not exist .*no such recipe either\)$"):
        load_compare_config(None, {"output_dir": "x", "train.config": "tinny"})


def test_a_training_recipe_given_as_a_compare_config_says_so(tmp_path: Path) -> None:
    """Not an unknown-key error about ``model``: the file is the other kind, and where it belongs is named; a compare
    file with a mistyped key and no method list still gets the unknown-key error."""
    from bandpo_lab.config import shown_path

    with pytest.raises(CompareError) as err:
        load_compare_config(CONFIGS / "tiny.yaml")
    shown = shown_path(CONFIGS / "tiny.yaml")  # relative to the working directory where it lies below it
    assert str(err.value) == (
        f"compare config {shown} is a training config (it has the sections data, model, reward): run it with "
        f"bandpo train --config {shown}, or name it as a compare config's train.config"
    )
    typo = tmp_path / "c.yaml"
    typo.write_text("output_dir: x\nseedz: [1]\n")
    with pytest.raises(CompareError, match=r"unknown compare config key 'seedz' .*did you mean 'seeds'"):
        load_compare_config(typo)


def test_overrides() -> None:
    cfg = load_compare_config(
        CONFIGS / "compare-tiny.yaml",
        [
            "seeds=[3]",
            "eval.k=4",
            "eval.ks=[1,4]",
            "train.overrides.max_steps=2",
            "train.overrides.model.cache_dir=/c",
            "baseline=false",
        ],
    )
    assert cfg.baseline is False
    assert cfg.seeds == [3] and cfg.eval.k == 4 and cfg.eval.ks == [1, 4]
    assert cfg.train_overrides["max_steps"] == 2 and cfg.train_overrides["model.cache_dir"] == "/c"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["seedz=[1]"],
            r"unknown compare config key 'seedz' \(from the overrides\) \(did you mean 'seeds'\?\)",
        ),
        (
            ["eval.kk=3"],
            r"unknown compare config key 'eval.kk' \(from the overrides\) \(did you mean 'eval.k'\?\)",
        ),
        (
            ["methods=[{clip_rule: bnad}]"],
            r"unknown clip rule 'bnad' \(did you mean 'band'\?\); valid names: grpo",
        ),
        (
            ["methods=[{clip_rule: band, params: {delta: -1}}]"],
            r"methods\[band\] \(from the overrides\): delta must be",
        ),
        (["methods=[grpo, grpo]"], r"labels must be unique, got grpo"),
        (["reference=dcpo"], r"reference must be one of the method labels \(grpo, band-kl\), got 'dcpo'"),
        (["eval.ks=[1,16]"], r"eval: ks entry 16 is larger than k=8"),
        (["seeds=[]"], r"seeds must be a non-empty list"),
        # a mapping over the file's list: our message, not OmegaConf's ConfigTypeError
        (["seeds.0=3"], r"seeds must be a non-empty list of integers in \[0, 4294967295\], got \{'0': 3\}"),
        (["train.config=nope.yaml"], r"train.config 'nope.yaml' does not exist"),
        (["methods=[{label: 'a b', clip_rule: grpo}]"], r"label must be letters"),
        (
            ["methods=[{clip_rule: grpo, seeds: []}]"],
            r"methods\[grpo\].seeds \(from the overrides\) must be a non-empty list of integers",
        ),
        (
            ["methods=[{clip_rule: grpo, seeds: [-1]}]"],
            r"methods\[grpo\].seeds entries \(from the overrides\) must be an integer in \[0, 4294967295\] "
            r"\(numpy's seed range\), got -1",
        ),
        # as training's seed: a larger one passed the dry run, and each run failed at its final evaluation
        (
            ["eval.seed=99999999999999999999"],
            r"^eval.seed must be an integer in \[0, 4294967295\] \(numpy's seed range\), got 99999999999999999999$",
        ),
        (
            ["eval.seed=-1"],
            r"^eval.seed must be an integer in \[0, 4294967295\] \(numpy's seed range\), got -1$",
        ),
        (
            ["seeds=[4294967296]"],
            r"^seeds entries must be an integer in \[0, 4294967295\] \(numpy's seed range\), got 4294967296$",
        ),
        (["eval.at_steps=5"], r"eval.at_steps \(from the overrides\) must be a list, got 5"),
        (["eval.at_steps=[0, 4]"], r"eval.at_steps entries must be an integer >= 1, got 0"),
        (["eval.at_steps=[4, 2]"], r"eval.at_steps must be increasing and distinct, got \[4, 2\]"),
        # an empty or null output_dir was the directory 'None', anything but a bool a true baseline
        (["output_dir="], r"output_dir must be a directory path \(a non-empty string.*\), got None$"),
        (["output_dir=null"], r"output_dir must be a directory path .*, got None$"),
        (["baseline='false'"], r"^baseline must be true or false, got 'false'$"),
        (["baseline=nope"], r"^baseline must be true or false, got 'nope'$"),
        (["baseline=[0]"], r"^baseline must be true or false, got \[0\]$"),
        (
            ["num_threads=100000"],
            r"^num_threads must be an integer in \[1, \d+\] \(4 per CPU core; this machine has \d+\), got 100000$",
        ),
    ],
)
def test_config_errors_name_the_key_and_value(overrides: list[str], message: str) -> None:
    with pytest.raises(CompareError, match=message):
        load_compare_config(CONFIGS / "compare-tiny.yaml", overrides)


def test_methods_written_as_an_empty_list_is_refused_not_read_as_the_defaults(tmp_path: Path) -> None:
    """``methods: []`` planned the seven default methods; it is refused in one line naming where it was written
    (an absent key keeps the defaults, and the message says so)."""
    path = tmp_path / "cmp.yaml"
    path.write_text(f"train:\n  config: {CONFIGS / 'tiny.yaml'}\nmethods: []\n")
    defaults = ", ".join(label for label, _, _ in DEFAULT_METHODS)
    with pytest.raises(CompareError) as err:
        load_compare_config(path)
    assert str(err.value) == (
        f"methods (in {path}:3) is an empty list: name at least one method, or leave the key out for the 7 default "
        f"methods ({defaults})"
    )
    with pytest.raises(CompareError, match=r"^methods \(from the overrides\) is an empty list"):
        load_compare_config(CONFIGS / "compare-tiny.yaml", ["methods=[]"])
    path.write_text(f"train:\n  config: {CONFIGS / 'tiny.yaml'}\n")
    assert len(load_compare_config(path).methods) == len(DEFAULT_METHODS)


def test_training_config_errors_are_found_when_planning(tmp_path: Path) -> None:
    cfg = load_compare_config(
        CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path}", "train.overrides.learning_rat=0.1"]
    )
    with pytest.raises(
        CompareError, match=r"train: unknown config key 'learning_rat' .*\(did you mean 'learning_rate'\?\)"
    ):
        plan_runs(cfg)


def test_compare_config_takes_trl_native_methods(tmp_path: Path) -> None:
    methods = (
        "methods=[{clip_rule: grpo, params: {eps_low: 0.2, eps_high: 0.2}}, "
        "{label: cispo-4, method: cispo, params: {epsilon_high: 4.0}}, {method: gspo}, "
        "{label: kl, method: band, params: {divergence: kl}}]"
    )
    cfg = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path}", "seeds=[0]", methods])
    assert [(m.label, m.method, m.clip_rule) for m in cfg.methods] == [
        ("grpo", "grpo", "grpo"),
        ("cispo-4", "cispo", None),
        ("gspo", "gspo", None),
        ("kl", "band", "band"),
    ]
    grpo, cispo, gspo, kl = plan_runs(cfg)
    t = cispo.train_config
    assert t["method"] == "cispo" and t["epsilon_high"] == 4.0
    for key in ("clip_rule", "clip_rule_kwargs", "band_divergence", "band_delta", "loss_type"):
        assert key not in t, key  # the recipe's clip rule and the field CISPO sets
    assert t["beta"] == 0.1 and t["max_steps"] == 40  # the same recipe as the clip rules
    assert gspo.train_config["method"] == "gspo" and "epsilon" not in gspo.train_config  # its defaults
    assert "method" not in grpo.train_config and grpo.train_config["loss_type"] == "grpo"
    assert kl.train_config["clip_rule"] == "band" and kl.train_config["clip_rule_kwargs"] == {
        "divergence": "kl"
    }
    spec = cispo.spec(cfg)
    assert (spec["method"], spec["clip_rule"], spec["params"]) == ("cispo", None, {"epsilon_high": 4.0})
    listed = cfg.to_dict()["methods"]
    assert listed[1] == {"label": "cispo-4", "method": "cispo", "params": {"epsilon_high": 4.0}}
    assert listed[0] == {"label": "grpo", "clip_rule": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}}
    # the same method from the same recipe plans the same run whatever the other methods are
    alone = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path}", "seeds=[0]"])
    assert plan_runs(alone)[0].fingerprint == grpo.fingerprint


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ("[{method: cipso}]", r"unknown method 'cipso' \(did you mean 'cispo'\?\); clip rules: grpo"),
        (
            "[{clip_rule: cispo}]",
            r"methods\[cispo\] \(from the overrides\): clip_rule='cispo' is TRL's CISPO.*a TRL-native method.*method: cispo",
        ),
        (
            "[{clip_rule: bnad}]",
            r"unknown clip rule 'bnad'.*TRL-native methods \(method: NAME\): cispo, sapo",
        ),
        (
            "[{method: cispo, params: {band_delta: 0.1}}]",
            r"methods\[cispo\] \(from the overrides\): unknown parameter 'band_delta' for method 'cispo'.*its parameters .*: epsilon_high",
        ),
        ("[{method: sapo, params: {loss_type: dapo}}]", r"unknown parameter 'loss_type' for method 'sapo'"),
        (
            "[{method: cispo, params: {epsilon_high: 0.5}}]",
            r"epsilon_high must be a finite number >= 1 for method 'cispo'.*got 0.5",
        ),
        ("[{method: gspo, params: {epsilon: 0}}]", r"epsilon must be a finite number in \(0, 1\)"),
        ("[{method: grpo, clip_rule: band}]", r"method='grpo' and clip_rule='band' name different methods"),
        (
            "[{label: x}]",
            r"methods\[0\] \(from the overrides\) needs method \(a method name: grpo, .*cispo, sapo, gspo\)",
        ),
        (
            "[{metod: cispo}]",
            r"^unknown compare config key 'methods.0.metod' \(from the overrides\) \(did you mean 'methods.0.method'"
            r"\?\)\. Keys of methods.0: label, method, clip_rule, params, seeds$",
        ),
        (
            "[grpo, {method: cispo, seeds: x}]",
            r"^methods.1.seeds \(from the overrides\) must be a list or null, got 'x'$",
        ),
        (
            "[{method: cispo, params: [1]}]",
            r"^methods.0.params \(from the overrides\) must be a mapping or null",
        ),
        ("[5]", r"^methods\[0\] \(from the overrides\) must be a mapping with method or clip_rule"),
    ],
)
def test_method_errors_name_the_value_and_what_is_allowed(methods: str, message: str) -> None:
    with pytest.raises(CompareError, match=message):
        load_compare_config(CONFIGS / "compare-tiny.yaml", [f"methods={methods}"])


def test_full_preset_plans_every_method() -> None:
    cfg = load_compare_config(CONFIGS / "compare-tiny-full.yaml", ["seeds=[0]", "output_dir=/nonexistent/x"])
    plans = plan_runs(cfg)
    assert [p.method.label for p in plans] == [m.label for m in cfg.methods]
    by_label = {p.method.label: p.train_config for p in plans}
    assert by_label["dppo-kl"]["clip_rule"] == "dppo_kl" and by_label["dppo-tv"]["clip_rule"] == "dppo_tv"
    assert {label: by_label[label].get("method") for label in ("cispo", "sapo", "gspo")} == {
        "cispo": "cispo",
        "sapo": "sapo",
        "gspo": "gspo",
    }


def test_evaluations_at_steps_must_come_before_the_last_step() -> None:
    """The final evaluation is at the end of training: an ``eval.at_steps`` entry at or beyond ``max_steps`` is
    refused when the runs are planned (before any training), naming the setting and the step count."""
    from bandpo_lab.experiments.compare import plan_runs

    config = load_compare_config(
        CONFIGS / "compare-tiny.yaml", ["eval.at_steps=[10, 60]", "train.overrides.max_steps=60"]
    )
    with pytest.raises(
        CompareError, match=r"eval.at_steps must be below the last optimizer step \(max_steps 60"
    ):
        plan_runs(config)
    ok = load_compare_config(
        CONFIGS / "compare-tiny.yaml", ["eval.at_steps=[10, 59]", "train.overrides.max_steps=60"]
    )
    assert len(plan_runs(ok)) == len(ok.methods) * len(ok.seeds)


def test_a_method_on_fewer_seeds_plans_only_those_the_config_also_lists() -> None:
    """``methods[i].seeds``: the method runs on its own seeds that are also in the config's ``seeds`` (a ``seeds=``
    override narrows every method), the others on all of them; the plan file records each method's seeds."""
    from bandpo_lab.experiments.compare import plan_runs

    methods = (
        "methods=[{label: grpo, clip_rule: grpo}, {label: ch, clip_rule: clip_higher, seeds: [1, 2, 9]}]"
    )
    config = load_compare_config(CONFIGS / "compare-tiny.yaml", [methods, "seeds=[0, 1, 2]"])
    grpo, ch = config.methods
    assert config.seeds_of(ch) == [1, 2] and config.seeds_of(grpo) == [0, 1, 2]
    assert [(p.method.label, p.seed) for p in plan_runs(config)] == [
        ("grpo", 0), ("grpo", 1), ("grpo", 2), ("ch", 1), ("ch", 2),
    ]  # fmt: skip
    assert ch.to_dict()["seeds"] == [1, 2, 9] and "seeds" not in grpo.to_dict()
    narrowed = load_compare_config(CONFIGS / "compare-tiny.yaml", [methods, "seeds=[0]"])
    assert [(p.method.label, p.seed) for p in plan_runs(narrowed)] == [("grpo", 0)]


def test_method_errors_name_the_file_and_line_of_their_entry(tmp_path: Path) -> None:
    """An entry of ``methods`` is named with the line where it starts, like every other key of the file."""
    path = tmp_path / "cmp.yaml"
    path.write_text(
        f"train:\n  config: {CONFIGS / 'tiny.yaml'}\nmethods:\n  - grpo\n"
        "  - {clip_rule: band, params: {delta: -1}}\n"
    )
    with pytest.raises(
        CompareError, match=rf"^methods\[band\] \(in {re.escape(str(path))}:5\): delta must be"
    ):
        load_compare_config(path)
    path.write_text(
        f"train:\n  config: {CONFIGS / 'tiny.yaml'}\nmethods:\n  - grpo\n  - label: x\n    prams: {{}}\n"
    )
    with pytest.raises(
        CompareError,
        match=rf"^unknown compare config key 'methods.1.prams' \(in {re.escape(str(path))}:6\) \(did you mean",
    ):
        load_compare_config(path)
    path.write_text(f"train:\n  config: {CONFIGS / 'tiny.yaml'}\nmethods:\n  - method: grpo\n    seeds: 3\n")
    with pytest.raises(
        CompareError, match=rf"^methods.0.seeds \(in {re.escape(str(path))}:5\) must be a list"
    ):
        load_compare_config(path)


def test_a_method_takes_its_radius_schedule_in_its_params(tmp_path: Path) -> None:
    """``params.delta_schedule`` / ``delta_end`` / ``delta_hold_frac`` become the run's ``band_delta_*`` keys (its
    rule's parameters stay in ``clip_rule_kwargs``); a schedule the rule cannot take is refused when the config is
    read, naming bandpo's names."""
    methods = (
        "methods=[{label: grpo, clip_rule: grpo}, {label: band-decay, clip_rule: band, params: {divergence: kl, "
        "delta: 0.2, delta_schedule: hold_then_linear, delta_end: 0.02, delta_hold_frac: 0.5}}]"
    )
    cfg = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path}", methods, "seeds=[0]"])
    grpo, band = (plan.train_config for plan in plan_runs(cfg))
    assert band["clip_rule_kwargs"] == {"divergence": "kl", "delta": 0.2}
    assert (band["band_delta_schedule"], band["band_delta_end"], band["band_delta_hold_frac"]) == (
        "hold_then_linear", 0.02, 0.5
    )  # fmt: skip
    assert not any(key.startswith("band_") for key in grpo)
    assert make_clip_rule("band", **band["clip_rule_kwargs"]).delta == 0.2
    for params, message in (
        ("{delta_schedule: linear}", "delta_end must be set"),
        ("{delta_schedule: lin, delta_end: 0.02}", "unknown radius schedule 'lin' (did you mean 'linear'?)"),
    ):
        with pytest.raises(CompareError, match=re.escape(message)):
            load_compare_config(None, [f"methods=[{{label: b, clip_rule: band, params: {params}}}]"])
    with pytest.raises(CompareError, match=r"grpo\(.*\) has no delta parameter"):
        load_compare_config(
            None, ["methods=[{clip_rule: grpo, params: {delta_schedule: linear, delta_end: 0.1}}]"]
        )


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("band_delta=0.1", "set it as methods[].params.delta on the methods it applies to"),
        (
            "band_delta_schedule=linear",
            "set it as methods[].params.delta_schedule on the methods it applies to",
        ),
        ("clip_rule_kwargs={delta: 0.1}", "set the rule's parameters as methods[].params"),
        ("clip_rule=grpo", "choose each run's method in methods[] (clip_rule or method)"),
        ("method=cispo", "choose each run's method in methods[] (clip_rule or method)"),
    ],
)
def test_train_overrides_may_not_set_the_method_or_its_settings(
    key: str, instead: str, tmp_path: Path
) -> None:
    """Every run drops the recipe's method settings for its methods[] entry's, so such a key would silently have no
    effect (a schedule set there never ran): refused, from the command line or from the file, with where it went."""
    name = key.split("=")[0]
    with pytest.raises(CompareError) as err:
        load_compare_config(CONFIGS / "compare-tiny.yaml", [f"train.overrides.{key}"])
    assert str(err.value) == (
        f"train.overrides.{name} (from the overrides) is a setting of the method, which every run takes from its "
        f"methods[] entry (the recipe's own method settings are dropped, so it would have no effect): {instead}"
    )
    path = tmp_path / "c.yaml"
    path.write_text(
        f"train:\n  config: {CONFIGS / 'tiny.yaml'}\n  overrides:\n    {key.replace('=', ': ')}\n"
    )
    with pytest.raises(
        CompareError, match=rf"^train\.overrides\.{name} \(in .*c\.yaml:4\) is a setting of the"
    ):
        load_compare_config(path)


def test_a_compare_config_saved_in_latin_1_is_refused_naming_the_file_and_the_byte_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cmp.yaml"
    path.write_bytes(f"train:\n  config: {CONFIGS / 'tiny.yaml'}\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(
        CompareError, match=rf"^compare config {re.escape(repr(str(path)))} is not UTF-8 text: byte 0xe9"
    ):
        load_compare_config(path)


def test_train_config_tiny_in_a_users_compare_file_reads_the_built_in_recipe(tmp_path: Path) -> None:
    """``train.config: tiny`` in a compare file elsewhere was looked for beside it only; now the recipe is read
    where no such file is there (a file beside it still wins)."""
    path = tmp_path / "cmp.yaml"
    path.write_text("train:\n  config: tiny\nmethods: [grpo]\n")
    assert load_compare_config(path).train_config == str(CONFIGS / "tiny.yaml")
    (tmp_path / "tiny.yaml").write_text("max_steps: 2\n")
    with pytest.warns(UserWarning, match=r"^train.config 'tiny' reads the file .*tiny.yaml, which shadows"):
        assert load_compare_config(path).train_config == str(tmp_path / "tiny.yaml")
