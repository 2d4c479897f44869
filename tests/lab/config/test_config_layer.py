"""Tests for ``bandpo_lab.config``: layers with origins and lines, overrides kept as text, values typed like their
field (pydantic plus our two rules), one unknown-key message."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic")

from bandpo_lab.config import (
    OVERRIDES_LABEL,
    ConfigError,
    Layer,
    build_dataclass,
    coerce_value,
    located,
    merge,
    override_layer,
    read_layers,
    shown_path,
    unknown_key,
    where,
)
from bandpo_lab.config.documents import ALIAS_VALUES_LIMIT, parse_scalar


class Color(enum.Enum):
    RED = "red"


@dataclass
class Section:
    steps: int = 1
    rate: float = 0.5
    flag: bool = False
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


def test_layers_merge_with_the_file_and_line_of_each_key(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("a: 1\nsection:\n  steps: 2\n  rate: 1e-6\n")
    (tmp_path / "top.yaml").write_text("base: base.yaml\nsection:\n  steps: 3\n")
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for layer in [*read_layers(tmp_path / "top.yaml"), override_layer(["section.name=1.50"])]:
        merge(values, origins, layer)
    assert values == {"a": 1, "section": {"steps": 3, "rate": 1e-6, "name": "1.50"}}  # 1e-6: a float
    assert where(origins, "section.steps") == f"in {tmp_path / 'top.yaml'}:3"
    assert where(origins, "section.rate") == f"in {tmp_path / 'base.yaml'}:4"
    assert where(origins, "section.name") == OVERRIDES_LABEL
    assert where(origins, "nowhere") == "default"


def test_a_layer_replaces_a_list_by_a_mapping_and_a_mapping_by_a_list() -> None:
    """A layer replaces a list by a mapping and a mapping by a list, with its origins (the field's type check then
    names the key)."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    file = Layer({"seeds": [0, 1], "opts": {"a": 1}}, {"seeds": "in f.yaml:1", "opts": "in f.yaml:2"})
    merge(values, origins, file)
    merge(values, origins, override_layer(["seeds.0=3", "opts=[1, 2]"]))
    assert values == {"seeds": {"0": "3"}, "opts": "[1, 2]"}
    assert origins == {"seeds.0": OVERRIDES_LABEL, "opts": OVERRIDES_LABEL}
    assert where(origins, "seeds") == OVERRIDES_LABEL  # not the file's line of the list it replaced
    other = Layer({"opts": [1, 2], "seeds": [4]}, {"opts": "in g.yaml:1", "seeds": "in g.yaml:2"})
    merge(values, origins, other)
    assert values == {"seeds": [4], "opts": [1, 2]}
    assert origins == {"seeds": "in g.yaml:2", "opts": "in g.yaml:1"}


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"config file '.*nope.yaml' does not exist; built-in recipes: .*tiny"
    ):
        read_layers(tmp_path / "nope.yaml")
    with pytest.raises(
        ConfigError, match=r"file '.*tinny' does not exist \(did you mean 'tiny'\?\); built-in"
    ):
        read_layers("tinny")
    (tmp_path / "child.yaml").write_text("base: gone.yaml\n")
    with pytest.raises(  # a base is a path beside its file, or a recipe's name; the error names the base: line
        ConfigError,
        match=rf"^base 'gone.yaml' \(in {tmp_path}/child.yaml:1\) names no config file: '{tmp_path}/gone.yaml' does "
        r"not exist \(a base is read beside its file\), nor a built-in recipe; built-in recipes: ",
    ):
        read_layers(tmp_path / "child.yaml")
    (tmp_path / "dup.yaml").write_text("a: 1\na: 2\n")
    with pytest.raises(ConfigError, match=r"(?s)is not valid YAML: .*found duplicate key a"):
        read_layers(tmp_path / "dup.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match=r"must hold a mapping of keys"):
        read_layers(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match=r"^config file '.*' is a directory; it must be a YAML file$"):
        read_layers(tmp_path)
    if Path("/dev/null").exists():  # a device: it said "does not exist"
        with pytest.raises(
            ConfigError, match=r"^config file '/dev/null' is not a regular file \(a device, a pipe\)"
        ):
            read_layers("/dev/null")
    (tmp_path / "broken.yaml").write_text("a: 1\nfoo: [unclosed\n")
    with pytest.raises(ConfigError) as err:  # the parser's own message spans lines, with a caret drawing
        read_layers(tmp_path / "broken.yaml")
    assert str(err.value).endswith(
        "is not valid YAML: line 3, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow "
        "sequence)"
    )


def test_a_config_of_nested_aliases_is_refused_at_the_alias_in_well_under_a_second(tmp_path: Path) -> None:
    """A 'billion laughs' of nine levels (9**10 values) ran until killed; seven took 68 s and 1.8 GB."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    (tmp_path / "laughs.yaml").write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        read_layers(tmp_path / "laughs.yaml")
    assert time.perf_counter() - started < 0.5
    assert str(err.value) == (
        f"config file {str(tmp_path / 'laughs.yaml')!r} is not valid YAML: line 5, column 10: with the alias *a3 "
        f"the file's aliases stand for more than {ALIAS_VALUES_LIMIT} values (nested aliases repeat a value at "
        "every level, a 'billion laughs'); write the values out, or share a file's values with base:"
    )
    (tmp_path / "loop.yaml").write_text("a: 1\nb: &b [1, *b]\n")  # PyYAML builds a list holding itself
    with pytest.raises(ConfigError, match=r"line 2, column 11: the alias \*b is inside the value it names"):
        read_layers(tmp_path / "loop.yaml")


def _laughs_in_one_line() -> str:
    """A 'billion laughs' of nine levels written as one flow value, as an override's value is."""
    levels = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "[" + ", ".join(levels) + "]"


@pytest.mark.parametrize(
    ("command", "key"),
    [("train", "max_steps"), ("train", "reward.options.x"), ("compare", "seeds")],
)
def test_an_override_of_nested_aliases_is_refused_at_the_alias_in_well_under_a_second(
    command: str, key: str
) -> None:
    """``bandpo train ... max_steps=<a billion laughs>`` ran until killed: an override's value is bounded as a
    config file's is, in the same words, naming the override."""
    from bandpo_lab.experiments.compare.config import load_compare_config
    from bandpo_lab.training.config import load_train_config

    load = load_train_config if command == "train" else load_compare_config
    load("tiny" if command == "train" else "compare-tiny", [])  # imports TRL's field types outside the timing
    override = f"{key}={_laughs_in_one_line()}"
    started = time.perf_counter()
    with pytest.raises(ValueError) as err:  # ConfigError, compare's CompareError
        load("tiny" if command == "train" else "compare-tiny", [override])
    assert time.perf_counter() - started < 0.5
    assert str(err.value) == (
        f"{key} (from the overrides) is not valid YAML: line 1, column 211: with the alias *a3 the value's aliases "
        f"stand for more than {ALIAS_VALUES_LIMIT} values (nested aliases repeat a value at every level, a 'billion "
        "laughs'); write the values out"
    )


def test_an_override_of_a_few_aliases_reads() -> None:
    assert parse_scalar("[&x [1, 2], *x]") == [[1, 2], [1, 2]]
    assert parse_scalar("1e-6") == 1e-6 and parse_scalar("{a: 1, a: 2}") == "{a: 1, a: 2}"


def test_a_config_with_a_few_aliases_and_a_merge_key_reads(tmp_path: Path) -> None:
    text = "shared: &s {rate: 1e-6, steps: [1, 2]}\ncopy: *s\nmerged:\n  <<: *s\n  steps: 3\n"
    (tmp_path / "f.yaml").write_text(text)
    (layer,) = read_layers(tmp_path / "f.yaml")
    assert layer.values["copy"] == {"rate": 1e-6, "steps": [1, 2]}
    assert layer.values["merged"] == {"rate": 1e-6, "steps": 3}


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["steps"], r"overrides must be key=value"),
        (["a..b=1"], r"override key must be a name or a dotted path"),
        (["a=1", "a.b=2"], r"override 'a.b' conflicts with another override of 'a'"),
    ],
)
def test_override_errors(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        override_layer(overrides)


@pytest.mark.parametrize(
    ("value", "tp", "expected"),
    [
        ("7", int, 7),
        ("1e3", int, 1000),
        (3.0, int, 3),
        ("1e-5", float, 1e-5),
        (10, float, 10.0),
        ("yes", bool, True),
        ("1", bool, True),
        ("1.50", str | None, "1.50"),  # text stays text for a string field
        (123, str, "123"),
        ("null", int | None, None),
        ("[a, b]", list[str], ["a", "b"]),
        ("{k: 1}", dict[str, Any], {"k": 1}),
        ("none", None | str | list[str], "none"),
        ("8", int | str | None, "8"),  # a string keeps a string member, as TRL's parser
        ("red", Color | str, "red"),
        (Color.RED, Color | str, "red"),  # enum members come back as their values
    ],
)
def test_values_take_the_field_type(value: Any, tp: Any, expected: Any) -> None:
    result = coerce_value(value, tp, "key")
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    ("value", "tp", "match"),
    [
        (True, int, r"key \(in f.yaml:3\) must be an integer, got True"),  # pydantic alone would give 1
        ("true", float, r"must be a number, got 'true'"),
        (1, bool, r"must be true or false, got 1"),  # a number is not a bool
        ("1.5", int, r"must be an integer, got '1.5'"),
        ("maybe", bool | None, r"must be true or false or null, got 'maybe'"),
        # only a null text is None, though YAML reads an empty value and a comment as null
        ("", int | None, r"must be an integer or null, got ''"),
        ("# x", float | None, r"must be a number or null, got '# x'"),
        ([True], list[float] | None, r"must be a list or null, got \[True\]"),
    ],
)
def test_values_refused_name_the_key_where_and_type(value: Any, tp: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        coerce_value(value, tp, "key", "in f.yaml:3")


def test_every_message_names_where_a_key_was_set_the_same_way() -> None:
    assert located("methods[0]", "in f.yaml:3") == "methods[0] (in f.yaml:3)"
    assert located("methods[0]", "") == located("methods[0]", None) == "methods[0]"
    with pytest.raises(ConfigError, match=r"^key \(in f.yaml:3\) must be an integer"):
        coerce_value("x", int, "key", "in f.yaml:3")
    assert str(unknown_key("stpes", ["steps"], at="in f.yaml:3")) == (
        "unknown config key 'stpes' (in f.yaml:3) (did you mean 'steps'?)"
    )
    assert str(unknown_key("stpes", ["steps"])) == "unknown config key 'stpes' (did you mean 'steps'?)"


def test_a_file_under_the_working_directory_is_named_relative_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.yaml").write_text("a: 1\n")
    monkeypatch.chdir(tmp_path)
    assert read_layers("sub/f.yaml")[0].origins == {"a": f"in {Path('sub', 'f.yaml')}:1"}
    monkeypatch.chdir(tmp_path / "sub")
    assert shown_path(tmp_path / "other.yaml") == str(tmp_path / "other.yaml")  # outside it: absolute


def test_build_dataclass_checks_keys_and_types() -> None:
    origins = {"s.steps": OVERRIDES_LABEL, "s.options.n": OVERRIDES_LABEL}
    built = build_dataclass(Section, {"steps": "4", "options": {"n": "2"}}, "s", origins)
    assert built == Section(steps=4, options={"n": 2})  # override text inside a mapping is read as YAML
    with pytest.raises(
        ConfigError, match=r"unknown config key 's.stpes' \(did you mean 's.steps'\?\). Keys of s"
    ):
        build_dataclass(Section, {"stpes": 1}, "s")
    with pytest.raises(ConfigError, match=r"s.steps \(from the overrides\) must be an integer, got 'x'"):
        build_dataclass(Section, {"steps": "x"}, "s", origins)


def test_values_are_text_not_interpolations_and_yaml_reads_numbers_as_configs_expect(tmp_path: Path) -> None:
    """``${...}`` is not interpolated (a LaTeX prompt is plain text, from a file or an override); ``1e-6`` is a
    number; a date stays text."""
    prompt = "Compute ${n \\choose k}$ and ${oops"
    (tmp_path / "c.yaml").write_text(f"system_prompt: '{prompt}'\nlr: 5e-4\nday: 2026-12-01\n")
    (layer,) = read_layers(tmp_path / "c.yaml")
    assert layer.values == {"system_prompt": prompt, "lr": 5e-4, "day": "2026-12-01"}
    assert override_layer([f"system_prompt={prompt}"]).values == {"system_prompt": prompt}


def test_overrides_of_one_mapping_merge() -> None:
    layer = override_layer({"opts": {"a": 1, "b": {"c": 2}}, "opts.b.d": 3, "x": 1})
    assert layer.values == {"opts": {"a": 1, "b": {"c": 2, "d": 3}}, "x": 1}
    with pytest.raises(ConfigError, match="conflicts with another override of 'x'"):
        override_layer(["x=1", "x.y=2"])


def test_list_items_have_the_line_where_they_start(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("methods:\n  - grpo\n  - label: b\n    params: {delta: 1}\nseeds: [1, 2]\n")
    (layer,) = read_layers(path, base_key=None)
    assert layer.origins["methods.0"] == f"in {path}:2"
    assert layer.origins["methods.1"] == f"in {path}:3"
    assert layer.origins["methods.1.params"] == f"in {path}:4"
    assert layer.origins["seeds.1"] == f"in {path}:5"


def test_a_built_in_recipe_is_read_by_its_name_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tiny`` and ``tiny-grpo.yaml`` name the recipes shipped with bandpo (a clone's configs/, a wheel's copy)
    wherever the command runs; a file of that name in the working directory is read instead. A study's config is
    no recipe (studies/, run from a clone): its old name is the unknown-recipe error, one line."""
    from bandpo_lab._files import RECIPES

    monkeypatch.chdir(tmp_path)
    [tiny] = read_layers("tiny")
    assert tiny.values == read_layers(RECIPES / "tiny.yaml")[0].values
    for study in ("study/study4.yaml", "study4", "configs/study/study4.yaml"):
        with pytest.raises(
            ConfigError, match=r"^config file '.*' does not exist; built-in recipes: .*tiny"
        ) as err:
            read_layers(study)
        assert "\n" not in str(err.value)
    base, own = read_layers("tiny-grpo")  # its base, tiny.yaml, beside it
    assert base.values == tiny.values and own.values["output_dir"] == "runs/tiny-grpo"
    (tmp_path / "tiny").write_text("mine: 1\n")
    assert read_layers("tiny")[0].values == {"mine": 1}


def test_a_folder_or_an_empty_path_as_the_config_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No traceback from the recipe lookup on a path without a name (``.``, ``/``, ``''``)."""
    monkeypatch.chdir(tmp_path)
    for path in (".", "/", ""):
        with pytest.raises(ConfigError, match=r"^config file '.*' is a directory; it must be a YAML file$"):
            read_layers(path)


def test_a_missing_config_lists_the_recipes_of_its_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as train:
        read_layers("configs/tny.yaml", kind="train")  # the docs' spelling of a clone's path, mistyped
    assert "(did you mean 'tiny'?); built-in recipes: " in str(train.value)
    listed = str(train.value).split("built-in recipes: ")[1].split(", ")
    assert "tiny" in listed and "smollm2-arith" in listed and "compare-tiny" not in listed
    with pytest.raises(ConfigError) as compare:
        read_layers("compare-tny", what="compare config", kind="compare")
    listed = str(compare.value).split("built-in recipes: ")[1].split(", ")
    assert "compare-tiny" in listed and "tiny" not in listed
    # the studies' configs are in studies/, run from a clone: no recipes
    assert not [name for name in listed if "study" in name]


def test_a_run_from_a_recipe_name_records_the_recipe_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's banner and run_info.json name the file that was read, not the name typed."""
    from bandpo_lab._files import RECIPES
    from bandpo_lab.training.config import load_train_config

    monkeypatch.chdir(tmp_path)
    assert load_train_config("tiny").source == str(RECIPES / "tiny.yaml")
    (tmp_path / "mine.yaml").write_text("base: " + str(RECIPES / "tiny.yaml") + "\n")
    assert load_train_config("mine.yaml").source == "mine.yaml"  # a file of the user's, as typed


def test_a_config_file_saved_in_latin_1_is_refused_naming_the_file_and_the_byte_offset(
    tmp_path: Path,
) -> None:
    (tmp_path / "latin1.yaml").write_bytes("a: 1\nrun_name: café\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        read_layers(tmp_path / "latin1.yaml")
    assert str(err.value) == (
        f"config file {str(tmp_path / 'latin1.yaml')!r} is not UTF-8 text: byte 0xe9 at byte offset 18 (line 2: "
        "invalid continuation byte); save the file as UTF-8"
    )


def test_base_tiny_in_a_users_yaml_reads_the_built_in_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``base: tiny`` was read as a file beside the user's YAML only (``--config tiny`` named the recipe); a base is
    now that file where it exists, else the built-in recipe of that name."""
    from bandpo_lab._files import RECIPES

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("base: tiny\nmax_steps: 8\n")
    base, own = read_layers("mine.yaml")
    assert base.values == read_layers(RECIPES / "tiny.yaml")[0].values and own.values == {"max_steps": 8}
    (tmp_path / "mine.yaml").write_text("base: tiny-grpo.yaml\n")  # a recipe with its own base, beside it
    assert len(read_layers("mine.yaml")) == 3


def test_a_local_file_named_like_a_recipe_is_read_with_a_warning_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--config tiny`` beside a ``tiny.yaml`` of the user's was an error (``tiny`` does not exist) and
    ``--config tiny.yaml`` read it silently: the user's file is read, with one warning naming the recipe it
    shadows; a recipe read under its own path (a clone's ``configs/tiny.yaml``) warns of nothing."""
    import warnings

    from bandpo_lab._files import RECIPES
    from bandpo_lab.config import ConfigWarning, config_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text("mine: 1\n")
    for typed in ("tiny", "tiny.yaml"):
        with pytest.warns(ConfigWarning) as caught:
            assert config_file(typed) == Path("tiny.yaml")
        assert [str(w.message) for w in caught] == [
            f"config {typed!r} reads the file tiny.yaml, which shadows the built-in recipe 'tiny' "
            f"({RECIPES / 'tiny.yaml'}): pass that path for the built-in one"
        ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config_file(RECIPES / "tiny.yaml") == RECIPES / "tiny.yaml"
        monkeypatch.chdir(RECIPES.parent)
        assert config_file("configs/tiny.yaml") == Path("configs/tiny.yaml")


def test_a_config_path_with_home_or_a_variable_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--config=~/my.yaml`` (the shell leaves ``~`` after ``=``) looked for a folder named ``~``; ``$VAR`` too."""
    from bandpo_lab.config import ConfigError, config_file

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BANDPO_TEST_CONFIGS", str(tmp_path))
    (tmp_path / "my.yaml").write_text("mine: 1\n")
    assert config_file("~/my.yaml") == tmp_path / "my.yaml"
    assert config_file("$BANDPO_TEST_CONFIGS/my.yaml") == tmp_path / "my.yaml"
    monkeypatch.delenv("BANDPO_TEST_CONFIGS")
    with pytest.raises(ConfigError, match=r"config .*BANDPO_TEST_CONFIGS"):
        config_file("$BANDPO_TEST_CONFIGS/my.yaml")
