"""The one-line notices of ``bandpo_lab.training.config``: an override that switches method names the inherited settings
it dropped, and the old names of renamed TRL / transformers fields name the new one (a warning, or an error)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bandpo_lab.config import ConfigWarning, shown_path
from bandpo_lab.training.config import ConfigError, TrainConfig, load_train_config
from bandpo_lab.training.trl_fields import RENAMED_FIELDS
from helpers import CONFIGS

TINY = CONFIGS / "tiny.yaml"


def notices(load: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``load()`` and the messages of the :class:`ConfigWarning` s it raised (each shown, none filtered)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = load()
    return result, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -------------------------------------------------------------------------------------------- method switches
def test_an_override_that_switches_method_names_the_dropped_keys() -> None:
    config, lines = notices(lambda: load_train_config(TINY, ["method=grpo"]))
    assert lines == [
        f"method='grpo' (from the overrides) switches the method from 'band' and drops the inherited settings of "
        f"the method: band_divergence='kl', band_delta=0.05, band_cap=10.0 (in {shown_path(TINY)}); 'grpo' starts from its "
        "defaults and what the overrides set"
    ]
    assert "\n" not in lines[0]
    assert config.trainer["clip_rule"] == "grpo" and not any(k.startswith("band_") for k in config.trainer)


def test_a_base_with_method_band_switched_to_grpo(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", "method: band\nband_delta: 0.1\ndata: {task: countdown}\n")
    config, lines = notices(lambda: load_train_config(base, ["method=grpo"]))
    assert len(lines) == 1 and "band_delta=0.1 (in " in lines[0] and "from 'band'" in lines[0]
    assert "band_delta" not in config.trainer


def test_a_trl_native_method_switched_to_a_clip_rule(tmp_path: Path) -> None:
    base = write(tmp_path / "cispo.yaml", "method: cispo\nepsilon_high: 4.0\ndata: {task: countdown}\n")
    config, lines = notices(lambda: load_train_config(base, ["clip_rule=band"]))
    assert len(lines) == 1
    assert lines[0].startswith("clip_rule='band' (from the overrides) switches the method from 'cispo'")
    assert "epsilon_high=4.0" in lines[0] and "epsilon_high" not in config.trainer


def test_keys_the_override_sets_again_are_not_named() -> None:
    _, lines = notices(
        lambda: load_train_config(TINY, ["clip_rule=clip_higher", "clip_rule_kwargs.eps_high=0.3"])
    )
    assert len(lines) == 1 and "band_delta=0.05" in lines[0] and "clip_rule_kwargs" not in lines[0]


def test_with_overrides_names_the_dropped_keys_too() -> None:
    config = load_train_config(TINY)
    changed, lines = notices(lambda: config.with_overrides(["clip_rule=dcpo"]))
    assert len(lines) == 1 and "band_delta=0.05" in lines[0] and changed.trainer["clip_rule"] == "dcpo"


@pytest.mark.parametrize(
    "load",
    [
        lambda: load_train_config(TINY),
        lambda: load_train_config(TINY, ["clip_rule=band", "band_delta=0.1"]),  # the same method
        lambda: load_train_config(TINY, ["learning_rate=1e-5"]),
        lambda: load_train_config(CONFIGS / "tiny-grpo.yaml"),  # a derived file switches: its writer's choice
        lambda: load_train_config(CONFIGS / "tiny-grpo.yaml", ["method=grpo"]),
    ],
)
def test_no_notice_without_a_switch_in_the_overrides(load: Callable[[], TrainConfig]) -> None:
    assert notices(load)[1] == []


# ----------------------------------------------------------------------------------------------- renamed keys
def test_every_renamed_field_is_tested() -> None:
    assert set(RENAMED_FIELDS) == {
        "gradient_checkpointing",
        "gradient_checkpointing_kwargs",
        "use_transformers_paged",
        "vllm_importance_sampling_cap",
    }


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "gradient_checkpointing=true",
            "gradient_checkpointing=True (from the overrides) has no effect: it is the old name of "
            "activation_checkpointing (renamed in transformers 5), which the config also sets "
            f"(activation_checkpointing=False, in {shown_path(TINY)}:61) and which wins; set activation_checkpointing only",
        ),
        (
            "gradient_checkpointing_kwargs={use_reentrant: false}",
            "gradient_checkpointing_kwargs={'use_reentrant': False} (from the overrides) is the old name of "
            "activation_checkpointing_kwargs (renamed in transformers 5; read as activation_checkpointing_kwargs): "
            "write activation_checkpointing_kwargs={'use_reentrant': False}",
        ),
    ],
)
def test_old_names_transformers_still_reads_warn(override: str, message: str) -> None:
    config, lines = notices(lambda: load_train_config(TINY, [override]))
    assert lines == [message]
    old = override.split("=")[0]
    assert old not in config.trainer  # one name: the new one, with the value transformers would resolve
    new = RENAMED_FIELDS[old].new
    expected = {
        "activation_checkpointing": False,
        "activation_checkpointing_kwargs": {"use_reentrant": False},
    }
    assert config.trainer[new] == expected[new]  # tiny.yaml's False wins over the old name's True


def test_the_old_checkpointing_name_is_used_when_the_new_one_is_null() -> None:
    """transformers reads the old name when the new one is None: so does the config, and the warning says so
    (it once said the old name had no effect, while the run got True); the trainer sees only the new name (no
    FutureWarning from transformers), and the config printout lists only it."""
    config, lines = notices(
        lambda: load_train_config(TINY, ["activation_checkpointing=null", "gradient_checkpointing=true"])
    )
    assert lines == [
        "gradient_checkpointing=True (from the overrides) is used: it is the old name of activation_checkpointing "
        "(renamed in transformers 5), which the config sets to null (from the overrides), and null leaves it to "
        "the old name; write activation_checkpointing=True only"
    ]
    assert (
        "gradient_checkpointing" not in config.trainer and config.trainer["activation_checkpointing"] is True
    )
    kwargs = config.trainer_kwargs()
    assert "gradient_checkpointing" not in kwargs and kwargs["activation_checkpointing"] is True


def test_the_old_checkpointing_name_alone_still_works(tmp_path: Path) -> None:
    path = write(tmp_path / "old.yaml", "data: {task: countdown}\ngradient_checkpointing: false\n")
    config, lines = notices(lambda: load_train_config(path))
    assert lines == [
        f"gradient_checkpointing=False (in {path}:2) is the old name of activation_checkpointing (renamed in "
        "transformers 5; read as activation_checkpointing): write activation_checkpointing=False"
    ]
    assert config.trainer_kwargs()["activation_checkpointing"] is False


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "use_transformers_paged=true",
            "use_transformers_paged=True (from the overrides) is the old name of use_transformers_continuous_batching "
            "(renamed in TRL 1.2): write use_transformers_continuous_batching=True",
        ),
        (
            "vllm_importance_sampling_cap=3",
            "vllm_importance_sampling_cap=3.0 (from the overrides) is the old name of "
            "vllm_importance_sampling_clip_max (renamed in TRL 1.6): write vllm_importance_sampling_clip_max=3.0",
        ),
    ],
)
def test_old_names_trl_deprecates_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_train_config(TINY, [override])
    assert str(err.value) == message


def test_study_configs_use_no_old_name() -> None:
    """Exported study configs must keep rebuilding: none of them writes a refused old name."""
    root = CONFIGS.parent
    files = [
        *root.glob("docs/results/**/*.yaml"),
        *root.glob("configs/**/*.yaml"),
        *root.glob("studies/**/*.yaml"),
    ]
    assert root / "studies" / "study4" / "config.yaml" in files  # the studies' configs are read too
    refused = [old for old, r in RENAMED_FIELDS.items() if r.refused]
    used = [(str(f), old) for f in files for old in refused if old in f.read_text()]
    assert used == []


@pytest.mark.parametrize(
    "load",
    [
        lambda: load_train_config(TINY, ["method=grpo"]),  # a method switch, merge_overrides
        lambda: load_train_config(TINY).with_overrides(["method=grpo"]),  # the same from TrainConfig
        # a renamed field
        lambda: load_train_config(TINY, ["gradient_checkpointing_kwargs={use_reentrant: false}"]),
    ],
    ids=["load_train_config", "with_overrides", "renamed_field"],
)
def test_a_notice_points_at_the_callers_line(load: Callable[[], Any]) -> None:
    """The warning names the line that loaded the config (here, this file), not bandpo's config modules, whose
    frames it skips (``training/config.py`` and ``training/config_layers.py``, where the notices are made)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load()
    [notice] = [w for w in caught if issubclass(w.category, ConfigWarning)]
    assert notice.filename == __file__
