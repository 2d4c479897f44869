"""``bandpo_lab.training.trl_fields``: a config's trainer keys and types are TRL's own dataclass fields (read when a
config is checked, not when the lab is imported), converted as a YAML value needs them; its renamed fields are those
TRL and transformers mark deprecated."""

from __future__ import annotations

import dataclasses
import enum
import re
import subprocess
import sys
import typing
from typing import Any, Literal

import pytest

from bandpo_lab.config import ConfigError, coerce_value, dataclass_types
from bandpo_lab.training.trl_fields import (
    RENAMED_FIELDS,
    config_field_types,
    trainer_field_types,
    yaml_type,
)
from helpers import CONFIGS, REPO


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Foreign:
    """A class of another library (as accelerate's ``ParallelismConfig``)."""


def test_yaml_type_drops_an_enum_beside_str_and_stands_in_for_a_foreign_class() -> None:
    assert yaml_type(Colour | str) is str
    assert yaml_type(str | Colour | None) == str | None
    assert yaml_type(list[Colour]) == list[Colour]  # an enum alone stays: its values are the choices
    assert yaml_type(str | list[Colour]) == str | list[Colour]
    assert yaml_type(dict[str, Any] | str | None) == dict[str, Any] | str | None
    assert yaml_type(typing.Union[str, None, Literal[False]]) == typing.Union[str, None, Literal[False]]  # noqa: UP007
    stand_in = typing.get_args(yaml_type(Foreign | None))[0]
    assert stand_in is not Foreign and stand_in.__name__ == "Foreign"
    assert yaml_type(Foreign | None) == yaml_type(Foreign | None)  # one stand-in per class (cached adapters)
    for plain in (int, float, bool, str, Any, Literal["a", "b"], Colour):
        assert yaml_type(plain) == plain


def test_the_trainer_fields_are_bandpo_configs_own() -> None:
    from bandpo.integrations.trl import BandPOConfig

    fields = trainer_field_types()
    assert list(fields) == list(dataclass_types(BandPOConfig))
    assert {"learning_rate", "num_generations", "loss_type", "band_delta", "clip_rule"} <= set(fields)
    assert fields["learning_rate"] is float and fields["optim"] is str
    assert fields["max_completion_length"] == int | None


def test_trl_values_convert_and_wrong_ones_are_named() -> None:
    """Enum strings pass as the strings TRL converts itself; an accelerate ``ParallelismConfig`` can only be null
    (pydantic built one from a mapping, which the config's YAML dump then could not write: --dry-run and the run
    directory's config failed)."""
    fields = trainer_field_types()
    for key, value, expected in [
        ("lr_scheduler_type", "cosine", "cosine"),
        ("optim", "adamw_torch_fused", "adamw_torch_fused"),
        ("save_strategy", "steps", "steps"),
        ("save_strategy", 5, "5"),
        ("debug", "underflow_overflow", "underflow_overflow"),
        ("debug", ["underflow_overflow"], ["underflow_overflow"]),
        ("trackio_static_space_id", False, False),
        ("parallelism_config", None, None),
        ("learning_rate", "1e-5", 1e-5),
    ]:
        assert coerce_value(value, fields[key], key) == expected
    with pytest.raises(ConfigError, match=r"^debug must be a string or a list, got \[7\]$"):
        coerce_value([7], fields["debug"], "debug")
    with pytest.raises(ConfigError, match=r"^optim must be a string, got \[1\]$"):
        coerce_value([1], fields["optim"], "optim")
    with pytest.raises(ConfigError, match=r"^parallelism_config must be ParallelismConfig or null, got \{"):
        coerce_value({"dp_shard_size": 2}, fields["parallelism_config"], "parallelism_config")


def test_a_renamed_field_is_known_by_its_new_name_where_only_the_old_one_is_installed() -> None:
    """transformers 5.17's TrainingArguments has ``gradient_checkpointing`` but not ``activation_checkpointing``: the
    config knows both names there too (``trainer_kwargs`` passes the installed one)."""

    @dataclasses.dataclass
    class OldArguments:
        gradient_checkpointing: bool = False
        optim: str = "adamw_torch"

    assert config_field_types(OldArguments) == {
        "gradient_checkpointing": bool,
        "optim": str,
        "activation_checkpointing": bool,
    }


def test_the_renamed_fields_are_those_trl_and_transformers_deprecate() -> None:
    from transformers import TrainingArguments
    from trl import GRPOConfig

    deprecated = {}
    for cls in (TrainingArguments, GRPOConfig):
        for f in dataclasses.fields(cls):
            found = re.match(r"Deprecated(?: alias of|[.,] [Uu]se) `(\w+)`", f.metadata.get("help", ""))
            if found:
                deprecated[f.name] = found.group(1)
    assert {old: r.new for old, r in RENAMED_FIELDS.items()} == deprecated
    for old, renamed in RENAMED_FIELDS.items():
        assert old in trainer_field_types() and renamed.new in trainer_field_types()


def test_importing_the_lab_imports_no_trl_and_reading_a_config_reads_trls_fields() -> None:
    """``import bandpo_lab.training.config`` and the CLI's parser import neither TRL nor transformers (``bandpo
    --help`` stays fast); loading tiny.yaml reads TRL's dataclasses."""
    code = (
        "import sys\n"
        "from bandpo_lab.cli.main import build_parser\n"
        "from bandpo_lab.training.config import load_train_config\n"
        "build_parser()\n"
        "def loaded():\n"
        "    return sorted(m for m in sys.modules if m.split('.')[0] in ('trl', 'transformers'))\n"
        "print(loaded())\n"
        f"config = load_train_config({str(CONFIGS / 'tiny.yaml')!r}, ['band_delta=0.1', 'learning_rate=1e-5'])\n"
        "print('trl.trainer.grpo_config' in loaded())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=True
    )
    assert out.stdout.split("\n")[:2] == ["[]", "True"], out.stdout[-2000:] + out.stderr[-2000:]
