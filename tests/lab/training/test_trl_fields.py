"""``bandpo_lab.training.trl_fields``: the checked-in table of TRL's config fields equals TRL's dataclasses (so it cannot
drift when TRL changes), its renamed fields are those TRL and transformers mark deprecated, and reading a config
imports no TRL."""

from __future__ import annotations

import dataclasses
import enum
import re
import subprocess
import sys
import types
import typing
from typing import Any, Literal, Union

import pytest

from bandpo_lab.training.trl_fields import (
    BANDPO_FIELDS,
    GRPO_FIELDS,
    RENAMED_FIELDS,
    TRAINER_FIELDS,
    TRAINING_ARGUMENTS_FIELDS,
)
from helpers import CONFIGS, REPO


def render(tp: Any) -> str:
    """A field type as the table writes it (module docstring of ``trl_fields``): an enum in a union with ``str``
    is dropped, an enum alone is the ``Literal`` of its values, another library's class is its name."""
    if tp is type(None):
        return "None"
    if tp is Any:
        return "Any"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if str in args:
            args = tuple(a for a in args if not (isinstance(a, type) and issubclass(a, enum.Enum)))
        return " | ".join(render(a) for a in args)
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(render(a) for a in args)}]"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return f"Literal[{', '.join(repr(m.value) for m in tp)}]"
    return tp.__name__


def init_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def assert_same_table(table: dict[str, Any], expected_types: dict[str, Any], what: str) -> None:
    """``table`` lists the fields of ``expected_types`` in order, each with the rendered type; on a difference, the
    message holds the lines to paste into ``src/bandpo_lab/training/trl_fields.py``."""
    expected = {k: render(tp) for k, tp in expected_types.items()}
    written = {k: render(tp) for k, tp in table.items()}
    if written != expected or list(written) != list(expected):
        lines = "\n".join(f'    "{k}": {v},' for k, v in expected.items())
        pytest.fail(
            f"bandpo_lab.training.trl_fields no longer matches {what}; "
            f"missing: {sorted(set(expected) - set(written))}, gone: {sorted(set(written) - set(expected))}, "
            f"changed: {sorted(k for k in expected.keys() & written.keys() if expected[k] != written[k])}. "
            f"The table's entries:\n{lines}"
        )


def test_the_table_is_trls_and_bandpos_config_fields() -> None:
    pytest.importorskip("trl")
    from transformers import TrainingArguments
    from trl import GRPOConfig

    from bandpo.integrations.trl import BandPOConfig

    grpo, bandpo = init_types(GRPOConfig), init_types(BandPOConfig)
    inherited = init_types(TrainingArguments)  # GRPOConfig retypes some of them (bf16: bool | None)
    assert_same_table(
        TRAINING_ARGUMENTS_FIELDS,
        {k: tp for k, tp in grpo.items() if k in inherited},
        "TrainingArguments' fields as GRPOConfig types them",
    )
    assert_same_table(GRPO_FIELDS, {k: tp for k, tp in grpo.items() if k not in inherited}, "GRPOConfig")
    assert_same_table(BANDPO_FIELDS, {k: tp for k, tp in bandpo.items() if k not in grpo}, "BandPOConfig")
    assert {k: render(tp) for k, tp in TRAINER_FIELDS.items()} == {k: render(tp) for k, tp in bandpo.items()}
    assert list(TRAINER_FIELDS) == list(bandpo)


def test_the_table_converts_values_as_trls_own_types_did() -> None:
    """The stand-ins change no conversion of a YAML value (an enum's string, a list of enum values) but one: a mapping
    for ``parallelism_config``."""
    pytest.importorskip("trl")
    from bandpo.integrations.trl import BandPOConfig
    from bandpo_lab.config import ConfigError, coerce_value

    trl_types = init_types(BandPOConfig)
    for key, value in [
        ("lr_scheduler_type", "cosine"),
        ("optim", "adamw_torch_fused"),
        ("save_strategy", "steps"),
        ("save_strategy", 5),
        ("debug", "underflow_overflow"),
        ("debug", ["underflow_overflow"]),
        ("trackio_static_space_id", False),
        ("parallelism_config", None),
    ]:
        assert coerce_value(value, TRAINER_FIELDS[key], key) == coerce_value(value, trl_types[key], key)
    for key, value in [("debug", [7]), ("optim", [1])]:
        with pytest.raises(ConfigError):
            coerce_value(value, trl_types[key], key)
        with pytest.raises(ConfigError, match=rf"^{key} must be "):
            coerce_value(value, TRAINER_FIELDS[key], key)
    # accelerate's ParallelismConfig was built from a mapping, which the config's YAML dump then could not write
    # (--dry-run and the run directory's config failed): refused when the config is read instead.
    with pytest.raises(ConfigError, match=r"^parallelism_config must be ParallelismConfig or null, got \{"):
        coerce_value({"dp_shard_size": 2}, TRAINER_FIELDS["parallelism_config"], "parallelism_config")


def test_the_renamed_fields_are_those_trl_and_transformers_deprecate() -> None:
    pytest.importorskip("trl")
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
        assert old in TRAINER_FIELDS and renamed.new in TRAINER_FIELDS


def test_reading_a_config_imports_no_trl() -> None:
    """``import bandpo_lab.training.config`` and loading tiny.yaml (with overrides) imports neither TRL nor
    transformers; building the trainer's config object does."""
    code = (
        "import sys\n"
        "from bandpo_lab.training.config import load_train_config\n"
        f"config = load_train_config({str(CONFIGS / 'tiny.yaml')!r}, ['band_delta=0.1', 'learning_rate=1e-5'])\n"
        "config.training_method()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trl', 'transformers')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout[-2000:] + out.stderr[-2000:]
