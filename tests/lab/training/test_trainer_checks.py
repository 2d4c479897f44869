"""Tests for ``bandpo_lab.training.trainer_checks``: values TRL or transformers refuse only after the models load, and
runs that would train no step, are refused by ``prepare`` (so by ``--dry-run``) in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import CONFIGS

pytest.importorskip("trl")

from bandpo_lab.cli.main import main
from bandpo_lab.training.config import ConfigError, load_train_config
from bandpo_lab.training.run import prepare

TINY = CONFIGS / "tiny.yaml"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["temperature=0"], r"^temperature must be a finite number > 0 .*, got 0.0$"),
        (["per_device_train_batch_size=0"], r"^per_device_train_batch_size must be an integer >= 1, got 0$"),
        (["learning_rate=-1"], r"^learning_rate must be a finite number > 0 .*, got -1.0$"),
        (
            ["learning_rate=0"],
            r"^learning_rate must be a finite number > 0 \(0 would update nothing\), got 0.0$",
        ),
        (
            ["max_steps=0"],
            r"^max_steps must be an integer in \[1, 1000000000\], or -1 .*\(0 trains no step\), got 0$",
        ),
        (["max_steps=-1", "num_train_epochs=0"], r"^num_train_epochs must be a finite number > 0, got 0.0$"),
        (["top_p=1.5"], r"^top_p must be a number in \(0, 1\], got 1.5$"),
        (["adam_beta2=1"], r"^adam_beta2 must be a number in \[0, 1\), got 1.0$"),
        (
            ["generation_batch_size=0", "steps_per_generation=null"],
            r"^generation_batch_size must be an integer",
        ),
        (
            ["lr_scheduler_type=linear", "lr_scheduler_kwargs={foo: 1}"],
            r"^lr_scheduler_type='linear' with lr_scheduler_kwargs=\{'foo': 1\}: .*unexpected keyword",
        ),
        (["optim_args=foo"], r"^optim='adamw_torch_fused' \(with optim_args='foo'\): "),
        (["generation_kwargs={max_new_tokens: 0}"], r"^the generation settings .*`max_new_tokens` must be"),
        (["seed=-1"], r"^seed must be an integer in \[0, 4294967295\] \(numpy's seed range\), got -1$"),
        (["seed=4294967296"], r"^seed must be an integer in \[0, 4294967295\] .*, got 4294967296$"),
        (["scale_rewards=bogus"], r"^scale_rewards must be one of group, batch, none, got 'bogus'$"),
        (["scale_rewards=true"], r"^scale_rewards must be one of group, batch, none, got 'true'$"),
        (
            ["multi_objective_aggregation=bogus"],
            r"^multi_objective_aggregation must be one of sum_then_normalize, normalize_then_sum, got 'bogus'$",
        ),
        (
            ["report_to=bogus"],
            r"^report_to must be none, all, or one or a list of transformers' reporting integrations "
            r"\(azure_ml, .*tensorboard.*wandb.*\), got 'bogus'$",
        ),
        (["report_to=[tensorboard, bogus]"], r"^report_to must be .*, got \['tensorboard', 'bogus'\]$"),
        (["report_to=[none, tensorboard]"], r"^report_to must be .*, got \['none', 'tensorboard'\]$"),
        # the DataLoader refused it once the models had loaded, with a traceback
        (
            ["dataloader_num_workers=-1"],
            r"^dataloader_num_workers must be an integer >= 0 \(0: load in the main process\), got -1$",
        ),
        # transformers' "foo is not a valid SchedulerType, ..." named no key
        (
            ["lr_scheduler_type=foo"],
            r"^lr_scheduler_type must be one of linear, cosine, .*greedy, got 'foo'$",
        ),
        (["save_strategy=foo"], r"^save_strategy must be one of no, steps, epoch, best, got 'foo'$"),
    ],
)
def test_values_refused_late_by_trl_are_refused_before_loading(
    overrides: list[str], match: str, tmp_path: Path
) -> None:
    config = load_train_config(TINY, [f"output_dir={tmp_path / 'out'}", "report_to=none", *overrides])
    if match.endswith("$"):  # the message ends by naming where the key was set
        key = match[1:].split(" ")[0]  # the key the message starts with
        match = match[:-1] + rf" \({key}: from the overrides\)$"
    with pytest.raises(ConfigError, match=match):
        prepare(config)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["beta=0.1", "ref_model_sync_steps=0"],
            "ref_model_sync_steps must be an integer >= 1 (with sync_ref_model: the steps between syncs), got 0 "
            "(sync_ref_model: from the overrides; ref_model_sync_steps: from the overrides)",
        ),
        (
            ["beta=0"],
            "sync_ref_model=true syncs the reference model, which beta=0.0 does not build (no KL term): set beta "
            "> 0, or sync_ref_model=false (beta: from the overrides; sync_ref_model: from the overrides)",
        ),
    ],
)
def test_sync_ref_model_settings_are_refused_before_loading(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    """``sync_ref_model: true`` with ``ref_model_sync_steps: 0`` trained until the first sync (a
    ZeroDivisionError), and with ``beta: 0`` TRL refused it once the models had loaded; both are one line from
    ``prepare``. Without ``sync_ref_model`` the sync steps are not read (below: they pass)."""
    out = f"output_dir={tmp_path / 'out'}"
    config = load_train_config(TINY, [out, "report_to=none", "sync_ref_model=true", *overrides])
    with pytest.raises(ConfigError) as err:
        prepare(config)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "overrides",
    [
        ["seed=0"],
        ["seed=4294967295"],
        ["scale_rewards=batch", "multi_objective_aggregation=normalize_then_sum"],
        ["scale_rewards=none"],
        ["report_to=all"],
        ["report_to=[none]"],
        ["report_to=null"],
        ["report_to=[tensorboard]"],
        ["ref_model_sync_steps=0", "dataloader_num_workers=0"],  # no sync_ref_model: the steps are not read
        ["sync_ref_model=true", "beta=0.1", "ref_model_sync_steps=8"],
    ],
)
def test_the_values_trl_and_transformers_take_pass(overrides: list[str], tmp_path: Path) -> None:
    config = load_train_config(TINY, [f"output_dir={tmp_path / 'out'}", "report_to=none", *overrides])
    prepare(config)


@pytest.mark.parametrize("installed", [["tensorboard"], ["tensorboard", "wandb"]])
def test_report_to_an_integration_that_is_not_installed_is_refused(
    installed: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers refused it with a traceback when the trainer was built (``WandbCallback requires wandb``)."""
    monkeypatch.setattr("transformers.integrations.get_available_reporting_integrations", lambda: installed)
    config = load_train_config(TINY, [f"output_dir={tmp_path / 'out'}", "report_to=[tensorboard, wandb]"])
    if "wandb" in installed:
        prepare(config)
        return
    with pytest.raises(ConfigError) as err:
        prepare(config)
    assert str(err.value) == (
        "report_to=['tensorboard', 'wandb'] names 'wandb', whose library is not installed here: install it, or "
        "report to tensorboard (installed) or none (report_to: from the overrides)"
    )


@pytest.mark.parametrize("key", ["generation_kwargs", "chat_template_kwargs", "model_init_kwargs"])
def test_keyword_argument_settings_must_be_mappings(key: str, tmp_path: Path) -> None:
    """A scalar was kept as a string: ``generation_kwargs=5`` failed on a dry run with a traceback,
    ``chat_template_kwargs=5`` at the first step, ``model_init_kwargs=5`` with a message naming no key. A JSON
    object as a string is what transformers reads."""
    out = f"output_dir={tmp_path / 'out'}"
    with pytest.raises(ConfigError) as err:
        prepare(load_train_config(TINY, [out, "report_to=none", f"{key}=5"]))
    assert str(err.value) == (
        f"{key} must be a mapping of keyword arguments ({key}: {{name: value}}, or {key}='{{\"name\": value}}' as "
        f"JSON), got '5' ({key}: from the overrides)"
    )
    prepare(load_train_config(TINY, [out, "report_to=none", f"{key}={{}}"]))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "max_steps=99999999999999999999999999999",
            "max_steps must be an integer in [1, 1000000000], or -1 to train num_train_epochs epochs (0 trains no "
            "step), got 99999999999999999999999999999",
        ),
        (
            "save_steps=0",
            "save_steps must be a number of steps: an integer in [1, 1000000000], or in (0, 1) a fraction of the "
            "run (0 saves no checkpoint: set save_strategy: 'no'), got 0.0",
        ),
        (
            "logging_steps=0",
            "logging_steps must be a number of steps: an integer in [1, 1000000000], or in (0, 1) a fraction of "
            "the run (0 logs nothing: set logging_strategy: 'no'), got 0.0",
        ),
        ("save_steps=1e12", "save_steps must be a number of steps: an integer in [1, 1000000000], "),
        ("logging_steps=2.5", "logging_steps must be a number of steps: an integer in [1, 1000000000], "),
    ],
)
def test_a_step_count_of_zero_or_beyond_a_billion_is_refused(
    override: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``max_steps: 99999999999999999999999999999`` trained with an ETA in quadrillions of hours, ``save_steps=0``
    was taken ("save every 0"): both refused by ``--dry-run`` in one line, with the limit."""
    code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={tmp_path / 'out'}", override])
    assert code == 2
    key = override.partition("=")[0]
    err = capsys.readouterr().err
    assert err.startswith(f"bandpo train: error: {message}") and err.endswith(
        f" ({key}: from the overrides)\n"
    )
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "overrides",
    [
        ["max_steps=1000000000", "save_steps=0.25", "logging_steps=1"],
        ["save_strategy=no", "save_steps=0"],  # unused without the steps strategy, as transformers reads it
        ["eval_strategy=steps", "eval_steps=0.5", "per_device_eval_batch_size=16"],
    ],
)
def test_step_counts_transformers_uses_pass(overrides: list[str], tmp_path: Path) -> None:
    config = load_train_config(TINY, [f"output_dir={tmp_path / 'out'}", "report_to=none", *overrides])
    prepare(config)


def test_the_choices_are_those_the_installed_trl_branches_on() -> None:
    """TRL compares these settings with literals in ``_generate_and_score_completions`` and raises on any other
    value at the first step; a TRL that adds one shows here."""
    import inspect
    import re

    from trl import GRPOTrainer

    from bandpo_lab.training.trainer_checks import MULTI_OBJECTIVE_AGGREGATIONS, SCALE_REWARDS

    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for setting, choices in (
        ("scale_rewards", SCALE_REWARDS),
        ("multi_objective_aggregation", MULTI_OBJECTIVE_AGGREGATIONS),
    ):
        compared = re.findall(rf"self\.{setting} (?:==|!=|in) (\[[^]]*\]|\"[^\"]*\")", source)
        assert set(re.findall(r'"([^"]*)"', " ".join(compared))) == set(choices)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("temperature=0", "temperature must be a finite number > 0 (TRL divides the logits by it), got 0.0"),
        ("per_device_train_batch_size=0", "per_device_train_batch_size must be an integer >= 1, got 0"),
        ("learning_rate=-1", "learning_rate must be a finite number > 0 (0 would update nothing), got -1.0"),
        ("learning_rate=0", "learning_rate must be a finite number > 0 (0 would update nothing), got 0.0"),
    ],
)
def test_dry_run_names_the_key_in_one_line(
    override: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={tmp_path / 'out'}", override])
    assert code == 2
    key = override.partition("=")[0]
    assert capsys.readouterr().err == f"bandpo train: error: {message} ({key}: from the overrides)\n"


@pytest.mark.parametrize(
    ("overrides", "rows", "needed"),
    [
        (["data.task_options.n_train=10"], 10, 32),  # tiny.yaml: 256 completions per round / 8 per prompt
        (["data.max_samples=3", "per_device_train_batch_size=8", "num_generations=4"], 3, 8),
    ],
)
def test_data_smaller_than_one_generation_round_is_refused(
    overrides: list[str], rows: int, needed: int, tmp_path: Path
) -> None:
    config = load_train_config(TINY, [f"output_dir={tmp_path / 'out'}", "report_to=none", *overrides])
    with pytest.raises(ConfigError, match=rf"hold {rows} prompts, .* a generation round of {needed} prompts"):
        prepare(config)
