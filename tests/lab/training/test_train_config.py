"""Tests for ``bandpo_lab.training.config`` (YAML, overrides, types, typo suggestions) and the checks of
``bandpo_lab.training.run.prepare`` that run before any model loads."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from train_helpers import BANDPO_RUN_INFO, fake_checkpoint, fake_run_info

from helpers import CONFIGS
from helpers.tiny import save_countdown_model_dir

pytest.importorskip("trl")

from bandpo.integrations.trl import BandPOConfig
from bandpo_lab.config import shown_path
from bandpo_lab.training.config import ConfigError, TrainConfig, load_train_config
from bandpo_lab.training.run import prepare

TINY = CONFIGS / "tiny.yaml"
REAL_SCALE = ["qwen2.5-3b-instruct.yaml", "deepseek-r1-distill-qwen-1.5b.yaml"]


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------------------------- the recipes
def test_tiny_config_loads_and_builds_trl_args() -> None:
    config = load_train_config(TINY)
    assert config.data.task == "countdown" and config.model.uses_task_model
    assert config.reward.name == "countdown"
    args = BandPOConfig(**config.trainer_kwargs())
    rule = args.build_clip_rule()
    assert (rule.name, rule.divergence, rule.delta, rule.cap) == ("band", "kl", 0.05, 10.0)
    assert args.clipping_can_bind, "tiny.yaml must make off-policy updates, or no clip rule binds"
    assert args.disable_tqdm is False  # the progress bar is on
    assert args.report_to == ["tensorboard"]
    assert args.generation_batch_size % args.num_generations == 0


def test_tiny_grpo_differs_only_in_the_clip_rule() -> None:
    band, grpo = load_train_config(TINY), load_train_config(CONFIGS / "tiny-grpo.yaml")
    rule = BandPOConfig(**grpo.trainer_kwargs()).build_clip_rule()
    assert (rule.name, rule.eps_low, rule.eps_high) == ("grpo", 0.2, 0.2)
    rule_keys = {"clip_rule", "clip_rule_kwargs", "band_divergence", "band_delta", "band_cap", "output_dir"}
    strip = lambda c: {k: v for k, v in c.trainer.items() if k not in rule_keys}  # noqa: E731
    assert strip(band) == strip(grpo)
    assert (band.model, band.data, band.reward) == (grpo.model, grpo.data, grpo.reward)


@pytest.mark.parametrize("name", REAL_SCALE)
def test_real_scale_recipes_mirror_the_authors(name: str) -> None:
    """docs/method.md#recipe on 8 GPUs: 256 prompts x 16 per rollout, 4 mini-batches of 64, lr 1e-6, KL 0.001, ..."""
    text = (CONFIGS / name).read_text()
    assert "NOT RUNNABLE" in text and "8 GPUs" in text
    config = load_train_config(CONFIGS / name)
    t = config.trainer
    gpus = 8
    assert t["num_generations"] == 16
    rollout = t["per_device_train_batch_size"] * gpus * t["steps_per_generation"]
    step = t["per_device_train_batch_size"] * gpus * t["gradient_accumulation_steps"]
    assert rollout == 256 * 16 and step == 64 * 16
    assert t["steps_per_generation"] // t["gradient_accumulation_steps"] == 4 and t["num_iterations"] == 1
    expected = {
        "learning_rate": 1e-6,
        "lr_scheduler_type": "constant",
        "weight_decay": 0.01,
        "max_grad_norm": 1.0,
        "temperature": 1.0,
        "max_completion_length": 4096,
        "beta": 0.001,
        "loss_type": "grpo",
        "clip_rule": "band",
        "band_divergence": "kl",
        "band_delta": 0.05,
        "band_cap": 10.0,
        "delta": 10.0,
        "use_vllm": True,
    }
    assert {k: t[k] for k in expected} == expected
    assert config.reward.name == "dapo"
    assert config.data.answer_column == "reward_model.ground_truth"
    BandPOConfig(
        **config.trainer_kwargs()
    )  # every TRL setting is valid (vLLM is needed only at trainer init)


# ------------------------------------------------------------------------------------------------ overrides
@pytest.mark.parametrize(
    ("override", "get", "expected"),
    [
        ("learning_rate=1e-5", lambda c: c.trainer["learning_rate"], 1e-5),
        ("max_steps=7", lambda c: c.trainer["max_steps"], 7),
        ("logging_steps=2", lambda c: c.trainer["logging_steps"], 2.0),
        ("activation_checkpointing=true", lambda c: c.trainer["activation_checkpointing"], True),
        ("band_relax=[0.2, 0.28]", lambda c: c.trainer["band_relax"], [0.2, 0.28]),
        ("max_completion_length=null", lambda c: c.trainer["max_completion_length"], None),
        ("report_to=[tensorboard, wandb]", lambda c: c.trainer["report_to"], ["tensorboard", "wandb"]),
        ("report_to=none", lambda c: c.trainer["report_to"], "none"),
        ('clip_rule_kwargs={"method": "auto"}', lambda c: c.trainer["clip_rule_kwargs"], {"method": "auto"}),
        ("clip_rule_kwargs.method=auto", lambda c: c.trainer["clip_rule_kwargs"], {"method": "auto"}),
        ("model.dtype=bfloat16", lambda c: c.model.dtype, "bfloat16"),
        ("model.warm_start.max_steps=5", lambda c: c.model.warm_start, {"max_steps": 5}),
        ("data.task_options.n_train=50", lambda c: c.data.task_options["n_train"], 50),
        ("data.max_samples=10", lambda c: c.data.max_samples, 10),
        ("reward.options.incorrect_reward=0", lambda c: c.reward.options, {"incorrect_reward": 0}),
        ("reward.failure_reward=-1", lambda c: c.reward.failure_reward, -1.0),
    ],
)
def test_overrides_take_the_field_type(override: str, get: Any, expected: Any) -> None:
    value = get(load_train_config(TINY, [override]))
    assert value == expected and type(value) is type(expected)


def test_yaml_values_take_the_field_type(tmp_path: Path) -> None:
    # YAML 1.1 reads 1e-6 as a string and 10 as an int: both become the field's type.
    path = write_yaml(tmp_path / "c.yaml", "base: " + str(TINY) + "\nlearning_rate: 1e-6\nsave_steps: 10\n")
    config = load_train_config(path)
    assert config.trainer["learning_rate"] == 1e-6 and config.trainer["save_steps"] == 10.0


def test_override_mapping_and_with_overrides() -> None:
    config = load_train_config(TINY, {"max_steps": 3, "model.dtype": "float16"})
    assert config.trainer["max_steps"] == 3 and config.model.dtype == "float16"
    changed = config.with_overrides(["seed=5", "data.task_options.seed=1"])
    assert changed.trainer["seed"] == 5 and changed.data.task_options["seed"] == 1
    assert config.trainer["seed"] == 0, "with_overrides must not change the original"
    assert TrainConfig.from_dict(changed.to_dict(), source=changed.source) == changed
    # where each key was set survives with_overrides, for the messages
    assert (
        changed.where("seed") == "from the overrides" and changed.where("max_steps") == "from the overrides"
    )
    assert changed.where("learning_rate") == f"in {shown_path(TINY)}:{_line_of(TINY, 'learning_rate:')}"
    assert changed.locate("learning_rate must be > 0") == (
        f"learning_rate must be > 0 (learning_rate: in {shown_path(TINY)}:{_line_of(TINY, 'learning_rate:')})"
    )
    assert (
        changed.locate("nothing named here; max_steps_x, model.seed")
        == "nothing named here; max_steps_x, model.seed"
    )


def _line_of(path: Path, start: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(start))


def test_switching_the_clip_rule_resets_its_parameters() -> None:
    config = load_train_config(TINY, ["clip_rule=grpo"])
    assert not any(k.startswith("band_") for k in config.trainer)
    assert (
        BandPOConfig(**config.trainer_kwargs()).build_clip_rule().describe()
        == "grpo(eps_low=0.2, eps_high=0.2)"
    )
    config = load_train_config(TINY, ["clip_rule=clip_higher", "clip_rule_kwargs.eps_high=0.3"])
    assert config.trainer["clip_rule_kwargs"] == {"eps_high": 0.3}
    # Same rule: the parameters stay.
    assert load_train_config(TINY, ["clip_rule=band"]).trainer["band_delta"] == 0.05
    assert load_train_config(TINY, ["band_delta=0.1"]).trainer["band_divergence"] == "kl"


def test_base_inheritance_and_cycle(tmp_path: Path) -> None:
    write_yaml(tmp_path / "a.yaml", "base: b.yaml\nseed: 1\n")
    write_yaml(tmp_path / "b.yaml", f"base: {TINY}\nseed: 2\nmodel: {{dtype: float16}}\n")
    config = load_train_config(tmp_path / "a.yaml")
    assert config.trainer["seed"] == 1 and config.model.dtype == "float16" and config.model.path == "tiny"
    assert config.output_dir == Path("runs/tiny")  # inherited
    write_yaml(tmp_path / "c.yaml", "base: d.yaml\n")
    write_yaml(tmp_path / "d.yaml", "base: c.yaml\n")
    with pytest.raises(ConfigError, match=r"config base: cycle"):
        load_train_config(tmp_path / "c.yaml")


def test_default_output_dir_is_named_after_the_config(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "my-run.yaml", "data: {task: countdown}\n")
    assert load_train_config(path).output_dir == Path("runs/my-run")


@pytest.mark.parametrize(
    ("overrides", "text", "key", "at"),
    [
        (["output_dir=~"], "", "output_dir", "from the overrides"),
        (["output_dir=null"], "", "output_dir", "from the overrides"),
        ([], "output_dir: ~\n", "output_dir", "in {file}:2 as ~"),
        ([], "output_dir: null\n", "output_dir", "in {file}:2"),
        (["model.cache_dir=~"], "", "model.cache_dir", "from the overrides"),
        ([], "model:\n  cache_dir: ~\n", "model.cache_dir", "in {file}:3 as ~"),
    ],
)
def test_a_null_path_is_refused_naming_the_key_and_yamls_tilde(
    tmp_path: Path, overrides: list[str], text: str, key: str, at: str
) -> None:
    """``output_dir: ~`` (YAML's null) silently became the default output_dir (the dry run said "ok ... output_dir
    runs/tiny"), and ``model.cache_dir: ~`` the default cache, where an empty value is refused."""
    path = write_yaml(tmp_path / "my.yaml", f"base: {TINY}\n{text}")
    with pytest.raises(ConfigError) as info:
        load_train_config(path, overrides)
    message = str(info.value)
    assert message.startswith(f"{key} ({at.format(file=shown_path(path))}) must be a directory path, got ")
    assert "YAML reads ~ as null, not as your home folder" in message and "quote a path" in message


def test_a_saved_run_configs_null_cache_dir_stays_the_default() -> None:
    """A run's train_config.yaml writes ``cache_dir: null`` (null spelled out): it loads again, as the default."""
    config = load_train_config(TINY)
    assert "cache_dir: null" in config.to_yaml()
    again = TrainConfig.from_dict(
        yaml.safe_load(config.to_yaml()), origins={"model.cache_dir": "in saved.yaml:3"}
    )
    assert again.model.cache_dir is None
    assert load_train_config(TINY, ["model.cache_dir=null"]).model.cache_dir is None


# --------------------------------------------------------------------------------------------- config errors
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            ["learning_rat=1e-5"],
            r"unknown config key 'learning_rat' \(from the overrides\) \(did you mean 'learning_rate'\?\)",
        ),
        (["num_generation=4"], r"did you mean 'num_generations'\?"),
        (
            ["model.pth=/m"],
            r"unknown config key 'model.pth'.*did you mean 'model.path'\?.*Keys of model: path, dtype",
        ),
        (["data.prompt_colum=q"], r"did you mean 'data.prompt_column'\?"),
        (["modle.path=/m"], r"unknown config key 'modle'.*did you mean 'model'\?"),
        (["learning_rate=fast"], r"learning_rate \(from the overrides\) must be a number, got 'fast'"),
        (["max_steps=1.5"], r"max_steps \(from the overrides\) must be an integer, got '1.5'"),
        (["gradient_checkpointing=maybe"], r"gradient_checkpointing .*must be true or false, got 'maybe'"),
        (["model.dtype=fp8"], r"model.dtype must be one of auto, float32, bfloat16, float16, got 'fp8'"),
        (["data.format=csv"], r"data.format must be one of auto, jsonl, json, parquet, got 'csv'"),
        (["data.task=sudoku"], r"data.task: unknown task 'sudoku'; valid names: countdown"),
        (
            ["data.path=x.jsonl", "data.task=countdown"],
            r"data.task='countdown' and data.path='x.jsonl' are exclusive",
        ),
        (["data.split=validation"], r"data.split must be one of train, test for task 'countdown'"),
        (["data.prompt_template=no field"], r"data.prompt_template must contain \{prompt\}"),
        (
            ["data.prompt_template={prompt.x}"],
            r"^data.prompt_template must be a format string whose only field is \{prompt\} .*, got "
            r"'\{prompt.x\}': AttributeError",
        ),
        (
            ["data.prompt_template={prompt.upper:x}"],
            r"^data.prompt_template must be a format string whose only field is \{prompt\} .*: TypeError",
        ),
        (
            ["data.task_options.n_trian=5"],
            r"unknown config key 'data.task_options.n_trian' \(did you mean 'data.task_options.n_train'\?\)",
        ),
        (["data.task_options.n_train=100000"], r"data.task_options: n_train \+ n_test must be <= 1345"),
        (
            ["resume_from_checkpoint=x"],
            r"resume_from_checkpoint .* cannot be set in a config: use `bandpo train --resume`",
        ),
        (["max_steps"], r"overrides must be key=value"),
    ],
)
def test_config_errors(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_train_config(TINY, overrides)


@pytest.mark.parametrize("rule", ["band", "adaptive_band"])
@pytest.mark.parametrize("value", ["-1", "0.1", "1", "nan"])
def test_trl_delta_as_a_radius_is_refused_next_to_a_band_rule(rule: str, value: str) -> None:
    """TRL's ``delta`` (GRPOConfig's two-sided clamp, INTELLECT-2's) is not Band's radius, which is also called
    ``delta``: a clamp of the ratio at or below 1 next to a rule with a radius is refused, naming band_delta /
    clip_rule_kwargs.delta. An upper clamp > 1 stays (the real-scale recipes' ``delta: 10``, verl's dual clip)."""
    with pytest.raises(ConfigError) as err:
        load_train_config(TINY, [f"clip_rule={rule}", f"delta={value}"])
    assert str(err.value) == (
        f"delta={float(value)!r} (from the overrides) is TRL's two-sided clamp of the ratio (GRPOConfig.delta, "
        f"INTELLECT-2's), not Band's radius: clip_rule={rule!r} takes its radius from band_delta (or "
        "clip_rule_kwargs.delta); next to a Band rule TRL's delta must be a finite number > 1 (an upper clamp of "
        "the ratio, e.g. 10) or null"
    )
    assert load_train_config(TINY, [f"clip_rule={rule}", "delta=null"]).trainer["delta"] is None
    assert load_train_config(TINY, [f"clip_rule={rule}", "delta=10"]).trainer["delta"] == 10.0


@pytest.mark.parametrize(
    "overrides", [["clip_rule=grpo"], ["clip_rule=dcpo"], ["clip_rule=dppo_kl"], ["method=gspo"]]
)
@pytest.mark.parametrize("value", ["-1", "0.5", "1", "nan"])
def test_trl_delta_at_or_below_one_is_refused_for_every_method(overrides: list[str], value: str) -> None:
    """TRL does not check its ``delta``: a clamp of the ratio at or below 1 would silently change the objective of
    any rule or TRL-native method. Refused at load time in one line; the radius's name is given."""
    with pytest.raises(ConfigError) as err:
        load_train_config(TINY, [*overrides, f"delta={value}"])
    assert str(err.value) == (
        f"delta={float(value)!r} (from the overrides) is TRL's two-sided clamp of the ratio (GRPOConfig.delta, "
        "INTELLECT-2's): it must be a finite number > 1 (an upper clamp of the ratio, e.g. 10) or null; Band's radius "
        "is band_delta, with clip_rule: band"
    )


def test_trl_delta_is_explained_in_the_printed_config() -> None:
    """Printed (and saved) next to band_delta, TRL's delta says what it is; the YAML still loads the same."""
    config = load_train_config(TINY, ["delta=2"])
    text = config.to_yaml()
    assert "\ndelta: 2.0  # TRL's two-sided clamp of the ratio; Band's radius is band_delta\n" in text
    assert yaml.safe_load(text) == config.to_dict()
    assert "TRL's two-sided clamp" not in load_train_config(TINY).to_yaml()


@pytest.mark.parametrize("overrides", [["clip_rule=grpo", "delta=1.5"], ["method=gspo", "delta=1.5"]])
def test_trl_delta_stays_available_to_methods_without_a_radius(overrides: list[str]) -> None:
    config = load_train_config(TINY, overrides)
    assert config.trainer["delta"] == 1.5
    assert config.training_method().config_class()(**config.trainer_kwargs()).delta == 1.5


def test_clip_rule_kwargs_next_to_the_band_shortcut_names_the_shortcut() -> None:
    """``clip_rule_kwargs.delta=0.1`` (once the README's example of a dotted override) on tiny.yaml, which sets
    band_delta: refused at load time, saying to use band_delta (BandPOConfig's own message, later, said only "set it
    once")."""
    with pytest.raises(ConfigError) as err:
        load_train_config(TINY, ["clip_rule_kwargs.delta=0.1"])
    assert re.fullmatch(
        r"clip_rule_kwargs.delta=0.1 \(from the overrides\) and band_delta=0.05 \(in .*tiny.yaml:\d+\) both set "
        r"the clip rule's 'delta': set it once, with band_delta \(e.g. band_delta=0.1\), or with band_delta=null "
        r"and clip_rule_kwargs.delta",
        str(err.value),
    ), str(err.value)
    with pytest.raises(ConfigError, match=r"clip_rule_kwargs.divergence='tv' .* and band_divergence='kl'"):
        load_train_config(TINY, ['clip_rule_kwargs={"divergence": "tv"}'])
    for overrides in (["band_delta=0.1"], ["band_delta=null", "clip_rule_kwargs.delta=0.1"]):
        rule = BandPOConfig(**load_train_config(TINY, overrides).trainer_kwargs()).build_clip_rule()
        assert rule.delta == 0.1


@pytest.mark.parametrize(
    ("model", "output", "how"),
    [
        ("models/m", "models/m", "is"),
        ("models/m", "./models/../models/m/", "is"),  # the same folder, written another way
        ("link", "models/m", "is"),  # a symlink to the model folder
        ("models/m", "models/m/run", "is inside"),
        ("runs/a/checkpoint-4", "runs/a", "holds"),  # a checkpoint of the run dir, which --overwrite deletes
    ],
)
def test_model_path_x_output_dir_x_is_refused(
    model: str, output: str, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``model.path=X output_dir=X`` was accepted and the final model written over the input model: refused when
    the config is read, also when one folder lies inside the other (after symlinks and ``..``)."""
    monkeypatch.chdir(tmp_path)
    for folder in ("models/m", "runs/a/checkpoint-4"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "models/m")
    with pytest.raises(ConfigError) as err:
        load_train_config(TINY, [f"model.path={model}", f"output_dir={output}"])
    assert str(err.value) == (
        f"output_dir {str(Path(output))!r} {how} the model folder model.path {model!r}: the run would write over "
        "the model it trains; choose an output_dir outside the model folder that does not hold it (from the "
        "overrides)"
    )
    assert load_train_config(TINY, [f"model.path={model}", "output_dir=runs/b"]).output_dir == Path("runs/b")
    assert load_train_config(TINY, ["model.path=org/name", "output_dir=org"]).output_dir == Path(
        "org"
    )  # a hub id


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a_file = tmp_path / "README.md"
    a_file.write_text("keep me")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_train_config(TINY, ["output_dir=README.md"])
    assert str(err.value) == (
        "output_dir 'README.md' is a file; it must be a directory (or not exist yet) (from the overrides)"
    )
    with pytest.raises(ConfigError) as err:
        load_train_config(TINY, ["output_dir=README.md/run"])
    assert str(err.value) == (
        "output_dir 'README.md/run' is inside 'README.md', which is a file; output_dir must be a directory (or not "
        "exist yet) (from the overrides)"
    )
    with pytest.raises(ConfigError) as err:  # output_dir=$OUT with OUT unset: it silently meant runs/tiny
        load_train_config(TINY, ["output_dir="])
    assert str(err.value) == (
        "output_dir (from the overrides) must be a directory path, got ''; leave it out for runs/tiny"
    )
    assert load_train_config(TINY, ["output_dir=runs/new"]).output_dir == Path("runs/new")  # created later
    assert a_file.read_text() == "keep me" and not (tmp_path / "runs").exists()


def test_typo_in_the_file_names_the_file(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "typo.yaml", "data: {task: countdown}\nnum_generatoins: 8\n")
    with pytest.raises(
        ConfigError, match=rf"'num_generatoins' \(in {tmp_path}/typo.yaml:2\).*'num_generations'"
    ):
        load_train_config(path)
    path = write_yaml(tmp_path / "typo2.yaml", "data: {task: countdown, prompt_colunm: q}\n")
    with pytest.raises(
        ConfigError, match=r"'data.prompt_colunm' \(in .*typo2.yaml:1\).*'data.prompt_column'"
    ):
        load_train_config(path)


def test_missing_config_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope.yaml' does not exist"):
        load_train_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"is not valid YAML"):
        load_train_config(write_yaml(tmp_path / "bad.yaml", "a: [1, 2\n"))
    with pytest.raises(ConfigError, match=r"has no data section"):
        load_train_config(write_yaml(tmp_path / "empty.yaml", "seed: 1\n"))


def test_a_train_config_saved_in_latin_1_is_refused_naming_the_file_and_the_byte_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("data:\n  task: countdown\nrun_name: café\n".encode("latin-1"))
    with pytest.raises(
        ConfigError, match=r"^config file '.*latin1.yaml' is not UTF-8 text: byte 0xe9 at byte offset 37 "
    ):
        load_train_config(path)


# ------------------------------------------------------------------------------ prepare: checks before loading
def run_dir(tmp_path: Path) -> list[str]:
    return [f"output_dir={tmp_path / 'out'}", "report_to=none"]


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            ["per_device_train_batch_size=6", "num_generations=4", "steps_per_generation=1"],
            r"num_generations=4 must divide the generation batch: per_device_train_batch_size \(6\) x processes "
            r"\(1\) x steps_per_generation \(1\) = 6 completions.*per_device_train_batch_size=8",
        ),
        (["num_generations=1"], r"num_generations must be an integer >= 2"),
        (["band_delta=-1"], r"delta must be a finite number > 0, got -1"),
        (
            ["reward.name=dapoo"],
            r"reward.name: unknown reward 'dapoo' \(did you mean 'dapo'\?\); valid names: .*dapo.*boxed.*countdown",
        ),
        (
            ["reward.name=dapo", "reward.options.incorect_reward=0"],
            r"^reward.options: reward 'dapo' has no option\(s\) \['incorect_reward'\]; valid options",
        ),
        (
            ["reward.name=dapo", "reward.options.correct_reward=.nan"],
            r"^reward.options: correct_reward must be a finite number, got nan",
        ),
        (
            ["reward.name=[dapo,boxed]", "reward.options.boxed.correct_reward=.nan"],
            r"^reward.options.boxed: correct_reward must be a finite number, got nan",
        ),
        (
            ["model.warm_start.n_layer=2"],
            r"unknown config key 'model.warm_start.n_layer' \(did you mean 'model.warm_start.n_layers'\?\)",
        ),
        # the warm start's own checks named the bare field ("n_layers must be ..."), not model.warm_start
        (
            ["model.warm_start.n_layers=0"],
            r"^model.warm_start.n_layers must be an integer in \[1, 64\], got 0 \(from the overrides\)$",
        ),
        (
            ["model.warm_start={hidden_size: 10, n_heads: 4}"],
            r"^model.warm_start.hidden_size / n_heads must be an even integer .* \(from the overrides\)$",
        ),
        (["model.path=/does/not/exist"], r"model.path '/does/not/exist' does not exist"),
        (["model.path=nobody/no-such-model"], r"not a local directory and not in the Hugging Face cache"),
    ],
)
def test_prepare_errors(
    tmp_path: Path, overrides: list[str], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    config = load_train_config(TINY, run_dir(tmp_path) + overrides)
    with pytest.raises(ConfigError, match=match):
        prepare(config)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "use_vllm=true",
            "use_vllm=True (from the overrides) samples with vLLM, which is not installed here "
            "(import vllm finds nothing): install it (pip install vllm) or leave use_vllm unset",
        ),
        (
            "use_liger_kernel=true",
            "use_liger_kernel=True (from the overrides) computes the loss with Liger's "
            "kernels, which is not installed here (import liger_kernel finds nothing): install it (pip install "
            "liger-kernel) or leave use_liger_kernel unset",
        ),
        (
            "deepspeed=ds.json",
            "deepspeed='ds.json' (from the overrides) trains with DeepSpeed, which is not "
            "installed here (import deepspeed finds nothing): install it (pip install deepspeed) or leave deepspeed "
            "unset",
        ),
    ],
)
def test_dry_run_with_a_setting_whose_library_is_missing_is_refused(
    override: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM passed and the trainer's ImportError came once the model had loaded; DeepSpeed's came as a traceback
    on a dry run."""
    from bandpo_lab.training.preflight import LIBRARY_SETTINGS

    module = next(m for key, m, _, _ in LIBRARY_SETTINGS if override.startswith(f"{key}="))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a)
    )
    config = load_train_config(TINY, [*run_dir(tmp_path), override])
    with pytest.raises(ConfigError) as err:
        prepare(config)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("use_liger_kernel", "runs Liger's Triton kernels, which need a GPU"),
        (
            "fp16",
            "is CUDA's float16 autocast, which does nothing on a CPU (the run would train in float32 and save "
            "fp16: true)",
        ),
    ],
)
def test_gpu_only_settings_on_a_cpu_are_refused(
    key: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed, Liger's Triton kernels stopped the first step on a CPU ("0 active drivers"); ``fp16: true``
    trained in float32 and reported success."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "liger_kernel" else real(name, *a)
    )
    monkeypatch.setattr("bandpo_lab.training.run._cuda_available", lambda: False)
    with pytest.raises(ConfigError) as err:
        prepare(load_train_config(TINY, [*run_dir(tmp_path), f"{key}=true"]))
    assert (
        str(err.value) == f"{key}=true (from the overrides) {why}; this run is on the CPU: leave {key} unset"
    )


@pytest.mark.parametrize("installed", [False, True])
def test_flash_attention_without_its_library_is_refused(
    installed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It passed the dry run, and ``from_pretrained`` raised an ImportError once the run had started."""

    def is_flash_attn_2_available() -> bool:
        return installed

    monkeypatch.setattr("transformers.utils.is_flash_attn_2_available", is_flash_attn_2_available)
    config = load_train_config(TINY, [*run_dir(tmp_path), "model.attn_implementation=flash_attention_2"])
    if installed:
        prepare(config)
        return
    with pytest.raises(ConfigError) as err:
        prepare(config)
    assert str(err.value) == (
        "model.attn_implementation='flash_attention_2' (from the overrides) needs the flash-attn package and a CUDA "
        "GPU, which this machine lacks (transformers' is_flash_attn_2_available() is False): use sdpa or eager"
    )


@pytest.mark.parametrize("key", ["model.attn_implementation", "model_init_kwargs.attn_implementation"])
def test_dry_run_with_an_attention_transformers_lacks_is_refused_naming_the_ones_it_has(
    tmp_path: Path, key: str
) -> None:
    """It passed, and ``from_pretrained`` refused ``foo`` once the model had loaded."""
    with pytest.raises(ConfigError) as err:
        prepare(load_train_config(TINY, [*run_dir(tmp_path), f"{key}=eagr"]))
    assert re.fullmatch(
        rf"{re.escape(key)}='eagr' \(from the overrides\) is not an attention implementation transformers knows "
        r"\(did you mean 'eager'\?\): one of eager, (\w+, )*sdpa, .*or a kernel from the Hub \(org/name\)",
        str(err.value),
    ), err.value
    for accepted in ("sdpa", "kernels-community/flash-attn2"):  # a name transformers has, a Hub kernel
        prepare(load_train_config(TINY, [*run_dir(tmp_path), f"{key}={accepted}"]))


def test_prepare_errors_with_files(tmp_path: Path) -> None:
    model_dir = save_countdown_model_dir(tmp_path / "model")
    data = jsonl(tmp_path / "d.jsonl", [{"question": "1,2,3:6=", "solution": "1+2+3"}])
    config_file = write_yaml(
        tmp_path / "files.yaml", f"model: {{path: {model_dir}}}\ndata: {{path: {data}}}\nreport_to: none\n"
    )
    base = [f"output_dir={tmp_path / 'out'}"]

    def check(overrides: list[str], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            prepare(load_train_config(config_file, [*base, *overrides]))

    check([], r"reward.name is required with data.path: a registered name \(dapo, boxed")
    check(
        ["reward.name=countdown"],
        r"data.prompt_column='prompt' is not a column of data.path .*d.jsonl'; its columns: question, solution",
    )
    check(["reward.name=dapo", "data.prompt_column=question"], r"data.answer_column='answer' is not a column")
    check(
        [f"data.path={tmp_path / 'missing.jsonl'}", "reward.name=dapo"],
        r"data.path '.*missing.jsonl' does not exist",
    )
    check(
        ["reward.name=countdown", "model.warm_start.max_steps=3"],
        r"model.warm_start=.* applies to the task model only",
    )
    check(
        ["model.path=tiny", "reward.name=dapo"],
        r"model.path='tiny' means the built-in task's own model, but data.task",
    )
    (tmp_path / "empty_model").mkdir()
    check(
        [f"model.path={tmp_path / 'empty_model'}", "reward.name=dapo"], r"is a directory without config.json"
    )
    # config.json alone passed: a model without weights failed in from_pretrained, inside the run's lock; one
    # without a tokenizer, or with one transformers cannot read, with transformers' traceback
    for name, drop, match in [
        (
            "no_weights",
            "model.safetensors",
            r"^model.path '.*' is not a model transformers can load: no model weights",
        ),
        ("no_tokenizer", "tokenizer*", r"^model.path '.*' has no tokenizer \(looked for tokenizer.json, "),
    ]:
        broken = shutil.copytree(model_dir, tmp_path / name)
        for path in broken.glob(drop):
            path.unlink()
        check([f"model.path={broken}", "reward.name=dapo"], match)
    unreadable = shutil.copytree(model_dir, tmp_path / "bad_tokenizer")
    (unreadable / "tokenizer.json").write_text("{not json")
    check(
        [
            f"model.path={unreadable}",
            "reward.name=dapo",
            "data.prompt_column=question",
            "data.answer_column=solution",
        ],
        r"^model.path '.*bad_tokenizer': its tokenizer cannot be loaded: ",
    )
    ok = prepare(
        load_train_config(
            config_file,
            [*base, "reward.name=dapo", "data.prompt_column=question", "data.answer_column=solution"],
        )
    )
    assert ok.dataset[0] == {
        "prompt": "1,2,3:6=",
        "answer": "1+2+3",
    }  # the tiny tokenizer has no chat template
    assert ok.model_path == str(model_dir) and ok.resume_from is None
    # Switching tiny.yaml from its task to files by overrides drops the task and its options.
    switched = load_train_config(TINY, [f"data.path={data}", f"model.path={model_dir}"])
    assert switched.data.task is None and switched.data.task_options == {}


def test_prepare_refuses_to_mix_runs(tmp_path: Path) -> None:
    fake_checkpoint(tmp_path / "out", 4)
    config = load_train_config(TINY, run_dir(tmp_path))
    with pytest.raises(
        ConfigError, match=r"already holds checkpoints \(last: checkpoint-4\).*--resume.*--overwrite"
    ):
        prepare(config)
    assert prepare(config, resume=True).resume_from == tmp_path / "out" / "checkpoint-4"
    assert prepare(config, overwrite=True).resume_from is None
    with pytest.raises(ConfigError, match=r"resume and overwrite are exclusive"):
        prepare(config, resume=True, overwrite=True)


@pytest.mark.parametrize(
    ("files", "holds"),
    [
        (
            {"run_info.json": json.dumps(BANDPO_RUN_INFO), "metrics.jsonl": '{"step": 5, "loss": 0.1}\n'},
            r"logged metrics \(metrics.jsonl\)",
        ),
        (  # a run folder of a `bandpo compare --export`: its log is gzipped
            {"run_info.json": json.dumps(BANDPO_RUN_INFO), "metrics.jsonl.gz": '{"step": 5, "loss": 0.1}\n'},
            r"logged metrics \(metrics.jsonl.gz\)",
        ),
        (
            {"run_info.json": json.dumps({**BANDPO_RUN_INFO, "finished": {"global_step": 8}})},
            r"a finished run \(run_info.json\)",
        ),
    ],
)
def test_prepare_refuses_a_directory_an_earlier_run_finished_in_without_checkpoints(
    files: dict[str, str], holds: str, tmp_path: Path
) -> None:
    """A run with save_strategy: no leaves its metrics and run info but no checkpoint: a fresh run there was
    accepted and wrote over them."""
    out = tmp_path / "out"
    out.mkdir()
    for name, text in files.items():
        if name.endswith(".gz"):
            (out / name).write_bytes(gzip.compress(text.encode()))
        else:
            (out / name).write_text(text)
    config = load_train_config(TINY, run_dir(tmp_path))
    with pytest.raises(
        ConfigError,
        match=rf"^output_dir '{out}' already holds {holds} from an earlier run: pass --resume to continue it, "
        r"--overwrite to discard it, or choose another output_dir$",
    ):
        prepare(config)
    assert prepare(config, overwrite=True).resume_from is None
    prepare(config, resume=True)


def test_prepare_accepts_a_directory_with_nothing_of_an_earlier_run(tmp_path: Path) -> None:
    """An empty metrics.jsonl and the run info of a run that never finished (killed before its first log) are
    not an earlier run to keep."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").write_text("")
    fake_run_info(out, model_path="m")
    assert prepare(load_train_config(TINY, run_dir(tmp_path))).resume_from is None


@pytest.mark.parametrize(
    ("files", "listed"),
    [
        ({"README.md": "# my notes"}, "README.md"),
        # a copy of a `bandpo compare` export: its README.md was replaced by the trainer's model card
        (
            {
                "README.md": "# study",
                "compare_plan.json": "{}",
                "runs/band/seed0/run_info.json": "{}",
                "runs/band/seed0/metrics.jsonl.gz": "",
            },
            "README.md, compare_plan.json, runs/",
        ),
    ],
)
def test_a_fresh_run_into_a_folder_of_the_users_files_is_refused(
    files: dict[str, str], listed: str, tmp_path: Path
) -> None:
    """A run into a folder holding only files bandpo did not write replaced its README.md with the trainer's model
    card: refused before any work, with --overwrite and --resume too (neither makes the user's files a run's)."""
    out = tmp_path / "out"
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    config = load_train_config(TINY, run_dir(tmp_path))
    message = (
        rf"^output_dir '{out}' holds files bandpo did not write \({re.escape(listed)}\): it must be an empty or new "
        r"folder, or an earlier bandpo training run's folder \(with --overwrite or --resume\); choose another "
        r"output_dir$"
    )
    for flags in ({}, {"overwrite": True}, {"resume": True}):
        with pytest.raises(ConfigError, match=message):
            prepare(config, **flags)
    assert (out / "README.md").read_text() == files["README.md"]


def test_a_fresh_run_shares_a_folder_with_an_earlier_runs_or_its_callers_files(tmp_path: Path) -> None:
    """What bandpo wrote is no reason to refuse: the lock file a killed run left, an earlier run's train_config.yaml
    (and the files beside it), the files a comparison wrote before its run trains (``caller_files``)."""
    out = tmp_path / "out"
    out.mkdir()
    config = load_train_config(TINY, run_dir(tmp_path))
    (out / ".bandpo-train.lock").write_text("")
    prepare(config)
    (out / "run_spec.json").write_text("{}")
    prepare(config, caller_files=("run_spec.json",))
    with pytest.raises(ConfigError, match=r"holds files bandpo did not write \(run_spec.json\)"):
        prepare(config)
    (out / "train_config.yaml").write_text("{}")
    (out / "README.md").write_text("the earlier run's model card")
    fake_run_info(out)
    prepare(config)


@pytest.mark.parametrize("kind", ["a user's train_config.yaml", "another trainer's checkpoints"])
def test_files_named_like_a_runs_do_not_make_a_folder_bandpos(kind: str, tmp_path: Path) -> None:
    """A folder counted as an earlier run's when it held a file named like a run's (train_config.yaml,
    metrics.jsonl) or a checkpoint-<step> of any trainer: --overwrite deleted a plain TRL run's checkpoints and a
    fresh run replaced the user's README.md. Only a run_info.json with bandpo's provenance marks a run's folder;
    --resume still continues another trainer's checkpoints (it deletes nothing of them)."""
    out = tmp_path / "out"
    if kind == "another trainer's checkpoints":
        fake_checkpoint(out, 4, bandpo_run=False)
        listed = "checkpoint-4/"
    else:
        out.mkdir()
        (out / "train_config.yaml").write_text("my: settings\n")
        listed = "train_config.yaml"
    (out / "README.md").write_text("# my run")
    config = load_train_config(TINY, run_dir(tmp_path))
    message = rf"^output_dir '{out}' holds files bandpo did not write \(README.md, {re.escape(listed)}\)"
    hint = "; another trainer's checkpoints can be continued with --resume"
    for flags in ({}, {"overwrite": True}):
        with pytest.raises(ConfigError, match=message) as info:
            prepare(config, **flags)
        assert str(info.value).endswith(hint) == (kind == "another trainer's checkpoints")
    if kind == "another trainer's checkpoints":
        assert prepare(config, resume=True).resume_from == out / "checkpoint-4"
    else:
        with pytest.raises(ConfigError, match=message):
            prepare(config, resume=True)
    assert (out / "README.md").read_text() == "# my run"


@pytest.mark.parametrize("written", ["~/runs/a", "$RUNS_ROOT/a"])
def test_a_home_or_variable_output_dir_is_the_directory_the_trainer_writes(
    written: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers expands ``~`` in ``output_dir``: the lock, resume and the refusal must look in that directory
    too (they looked in ``./~/runs/a``, so --resume started over and a fresh run wrote over the checkpoints)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RUNS_ROOT", str(tmp_path / "runs"))
    out = tmp_path / "runs" / "a"
    fake_checkpoint(out, 4)
    config = load_train_config(TINY, [f"output_dir={written}", "report_to=none"])
    assert config.output_dir == out
    assert prepare(config, resume=True).resume_from == out / "checkpoint-4"
    with pytest.raises(ConfigError, match=r"already holds checkpoints \(last: checkpoint-4\)"):
        prepare(config)
    assert Path(prepare(config, overwrite=True).args.output_dir) == out


def test_bf16_true_with_use_cpu_is_refused_and_a_gpu_recipe_on_a_cpu_gets_a_warning(tmp_path: Path) -> None:
    """TRL's bf16 autocast on a CPU run rounds the ratio's log-probs: refused when the config asks for the CPU;
    a GPU recipe (bf16: true, no use_cpu) checked on a machine without a GPU runs its CPU precision instead, with
    a warning."""
    from bandpo_lab.training.config import _accelerator_available

    with pytest.raises(ConfigError, match=r"bf16: true with use_cpu: true .* model.precision: bf16"):
        load_train_config(TINY, ["bf16=true", "use_cpu=true"]).trainer_kwargs()
    if _accelerator_available():
        pytest.skip("this machine has a GPU: bf16 stays TRL's")
    with pytest.warns(UserWarning, match="bf16: true is TRL's mixed precision for GPUs"):
        kwargs = load_train_config(TINY, ["bf16=true"]).trainer_kwargs()
    assert kwargs["bf16"] is False and kwargs["use_cpu"] is True


def test_a_cpu_run_uses_torchs_fused_adamw_unless_optim_is_set() -> None:
    from bandpo_lab.training.config import _accelerator_available

    if _accelerator_available():
        pytest.skip("this machine has a GPU")
    assert load_train_config(TINY).trainer_kwargs()["optim"] == "adamw_torch_fused"
    assert load_train_config(TINY, ["optim=adamw_torch"]).trainer_kwargs()["optim"] == "adamw_torch"


def test_checkpointing_takes_the_installed_transformers_spelling() -> None:
    """transformers 5.17's TrainingArguments has only ``gradient_checkpointing`` (a GPU machine's stack failed with
    "unexpected keyword argument 'activation_checkpointing'"); a newer one has the new name, which stays."""
    import dataclasses

    from bandpo_lab.training.config import _installed_spelling

    @dataclasses.dataclass
    class Old:
        gradient_checkpointing: bool = True
        gradient_checkpointing_kwargs: dict | None = None

    @dataclasses.dataclass
    class New(Old):
        activation_checkpointing: bool | None = None
        activation_checkpointing_kwargs: dict | None = None

    kwargs = {"activation_checkpointing": False, "activation_checkpointing_kwargs": {"a": 1}, "seed": 3}
    old = _installed_spelling(dict(kwargs), lambda: Old)
    assert old == {"gradient_checkpointing": False, "gradient_checkpointing_kwargs": {"a": 1}, "seed": 3}
    Old(**{k: v for k, v in old.items() if k != "seed"})  # the old class takes them
    assert _installed_spelling(dict(kwargs), lambda: New) == kwargs

    def no_trl() -> type:
        raise ImportError("no trl")

    assert _installed_spelling(dict(kwargs), no_trl) == kwargs


def test_a_compare_config_given_to_train_says_so() -> None:
    """Not "unknown config key 'train' (did you mean 'do_train'?)": the file is a compare config."""
    from bandpo_lab.config import shown_path

    with pytest.raises(ConfigError) as err:
        load_train_config(CONFIGS / "compare-tiny.yaml")
    shown = shown_path(CONFIGS / "compare-tiny.yaml")
    assert str(err.value) == (
        f"config file {shown} is a compare config (it sets methods or train): run it with bandpo compare "
        f"--config {shown}"
    )


def test_model_cache_dir_is_expanded_and_checked_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``model.cache_dir`` a file passed the dry run and failed building the task model inside the run's lock
    (after --overwrite had discarded the earlier run); ``$VAR`` in it stayed a relative folder named ``$VAR``."""
    from bandpo_lab.training.preflight import cache_dir

    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    with pytest.raises(ConfigError, match=rf"^model.cache_dir '{a_file}' is a file; it must be a directory"):
        prepare(load_train_config(TINY, [*run_dir(tmp_path), f"model.cache_dir={a_file}"]))
    monkeypatch.delenv("BANDPO_TEST_CACHE", raising=False)
    with pytest.raises(ConfigError, match=r"model.cache_dir .*BANDPO_TEST_CACHE"):
        prepare(load_train_config(TINY, [*run_dir(tmp_path), "model.cache_dir=$BANDPO_TEST_CACHE/models"]))
    monkeypatch.setenv("BANDPO_TEST_CACHE", str(tmp_path / "cache"))
    config = load_train_config(TINY, [*run_dir(tmp_path), "model.cache_dir=$BANDPO_TEST_CACHE/models"])
    assert cache_dir(config) == tmp_path / "cache" / "models"
    assert a_file.read_text() == "mine"
