"""Training prompts from a built-in task or local JSONL / JSON / parquet files: :func:`load_problems` reads and
checks them before a model loads, :func:`build_prompt_dataset` formats them (chat messages or plain text) once the
tokenizer is known. Files are read here, not by ``datasets.load_dataset``: nothing goes to the Hugging Face cache,
and every process of a data-parallel run reads the same rows in the same order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo_lab._files import expand_path, read_utf8
from bandpo_lab.training.config import ConfigError, DataConfig

_SUFFIX_FORMATS = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
MISSING = object()  # what lookup_column returns for an absent column
FORMAT_HINT = " or set data.format (jsonl, json, parquet)"
"""The end of the unknown-suffix error: a training config's way out (eval's flags and compare's eval section have
no format setting, so their messages drop it)."""


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    found = _SUFFIX_FORMATS.get(path.suffix.lower())
    if found is None:
        raise ConfigError(
            f"data.path file {str(path)!r}: cannot tell its format from the suffix {path.suffix!r}; use one of "
            f"{', '.join(_SUFFIX_FORMATS)}{FORMAT_HINT}"
        )
    return found


def resolve_data_files(cfg: DataConfig) -> list[Path]:
    """The files of ``cfg.path``: files as given; for a directory, those of ``cfg.split`` (``<split>.<ext>``,
    ``<split>-*.<ext>`` or ``<split>_*.<ext>``, directly or under ``data/``), sorted. ``ConfigError`` for a path
    that does not exist or a directory without such files (listing its data files)."""
    files: list[Path] = []
    for raw in cfg.paths:
        path = expand_path(raw, "data.path", ConfigError)
        if path.is_file():
            files.append(path)
            continue
        if not path.exists():
            raise ConfigError(
                f"data.path {raw!r} does not exist (relative paths are relative to {Path.cwd()})"
            )
        found: list[Path] = []
        for folder in (path, path / "data"):
            for suffix in _SUFFIX_FORMATS:
                for pattern in (f"{cfg.split}{suffix}", f"{cfg.split}-*{suffix}", f"{cfg.split}_*{suffix}"):
                    found.extend(sorted(folder.glob(pattern)))
        if not found:
            present = sorted(
                str(p.relative_to(path)) for p in path.rglob("*") if p.suffix.lower() in _SUFFIX_FORMATS
            )
            raise ConfigError(
                f"data.path directory {raw!r} has no file for data.split={cfg.split!r} (looked for "
                f"{cfg.split}.<ext>, {cfg.split}-*.<ext>, {cfg.split}_*.<ext> with <ext> in jsonl, json, parquet); "
                f"data files there: {present or 'none'}"
            )
        files.extend(dict.fromkeys(found))  # unique, in order
    return files


def read_records(path: str | Path, fmt: str = "auto") -> list[dict[str, Any]]:
    """All rows of a JSONL, JSON (a list of objects, or JSON lines) or parquet file, as dicts (``ConfigError``:
    unreadable file, invalid JSON with its line number, rows that are not objects)."""
    path = Path(path)
    fmt = _format_of(path, fmt)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as err:  # pyarrow raises several types
            raise ConfigError(f"data.path {str(path)!r} is not a readable parquet file: {err}") from err
    try:
        text = read_utf8(path, f"data.path {str(path)!r}")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # maybe JSON lines with a .json suffix
        if data is not None:
            if isinstance(data, Mapping) and isinstance(data.get("data"), list):
                data = data["data"]
            if not isinstance(data, list) or not all(isinstance(row, Mapping) for row in data):
                raise ConfigError(
                    f"data.path {str(path)!r} must hold a JSON list of objects (or JSON lines), got "
                    f"{type(data).__name__}"
                )
            return [dict(row) for row in data]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"data.path {str(path)!r} line {number} is not valid JSON: {err}") from err
        if not isinstance(row, Mapping):
            raise ConfigError(
                f"data.path {str(path)!r} line {number} must be a JSON object, got {type(row).__name__}"
            )
        rows.append(dict(row))
    return rows


def lookup_column(row: Mapping[str, Any], dotted: str) -> Any:
    """``row[a][b]...`` for the column name ``"a.b..."``, or :data:`MISSING` when a part is absent."""
    value: Any = row
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return MISSING
        value = value[part]
    return value


def _describe_columns(row: Mapping[str, Any]) -> str:
    parts = []
    for key, value in row.items():
        if isinstance(value, Mapping):
            parts.append(f"{key} (with keys {', '.join(map(str, value))})")
        else:
            parts.append(str(key))
    return ", ".join(parts)


def is_messages(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of chat messages (mappings with ``role`` and ``content``)."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) > 0
        and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value)
    )


def load_problems(
    cfg: DataConfig, need_answer: bool, answer_columns: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The training problems of ``cfg``, each a dict with ``prompt`` (text or chat messages), ``answer`` (required
    with ``need_answer``) and the ``keep_columns``; ``answer_columns``: more columns the reward reads, which must
    be among these.

    Raises:
        ConfigError: missing file, column or value (naming the columns that exist), or no rows at all.
    """
    from bandpo_lab.training.tasks import TASKS

    available = {"prompt", "answer", *cfg.keep_columns}
    for column in answer_columns:
        if column.split(".")[0] not in available:
            raise ConfigError(
                f"the reward reads the dataset column {column!r}, but the training data only has "
                f"{', '.join(sorted(available))}: map your ground-truth column with data.answer_column (it becomes "
                "'answer', which the built-in rewards read) or list it in data.keep_columns"
            )
    if cfg.task is not None:
        spec = TASKS.get(cfg.task)
        sources: list[tuple[str, list[dict[str, Any]]]] = [
            (
                f"task {cfg.task!r} split {cfg.split!r}",
                spec.build_split(spec.options(cfg.task_options), cfg.split),
            )
        ]
    else:
        sources = [
            (f"data.path {str(path)!r}", read_records(path, cfg.format)) for path in resolve_data_files(cfg)
        ]
    problems: list[dict[str, Any]] = []
    for where, rows in sources:
        if not rows:
            raise ConfigError(f"{where} has no rows")
        first = rows[0]
        needed = [("data.prompt_column", cfg.prompt_column)]
        if need_answer:
            needed.append(("data.answer_column", cfg.answer_column))
        needed.extend(("data.keep_columns", column) for column in cfg.keep_columns)
        for key, column in needed:
            if lookup_column(first, column) is MISSING:
                raise ConfigError(
                    f"{key}={column!r} is not a column of {where}; its columns: {_describe_columns(first)}"
                )
        has_answer = lookup_column(first, cfg.answer_column) is not MISSING
        for index, row in enumerate(rows):
            prompt = lookup_column(row, cfg.prompt_column)
            if prompt is MISSING or prompt is None or (isinstance(prompt, str) and not prompt.strip()):
                raise ConfigError(
                    f"row {index} of {where} has no prompt in column {cfg.prompt_column!r}: {row!r}"
                )
            if not isinstance(prompt, str) and not is_messages(prompt):
                raise ConfigError(
                    f"row {index} of {where}: the prompt column {cfg.prompt_column!r} must hold a string or a list "
                    f"of chat messages with 'role' and 'content', got {prompt!r}"
                )
            problem: dict[str, Any] = {
                "prompt": prompt if isinstance(prompt, str) else [dict(m) for m in prompt]
            }
            if has_answer or need_answer:
                answer = lookup_column(row, cfg.answer_column)
                if answer is MISSING or answer is None:
                    if need_answer:
                        raise ConfigError(
                            f"row {index} of {where} has no ground truth in data.answer_column "
                            f"{cfg.answer_column!r}: {row!r}"
                        )
                else:
                    problem["answer"] = _ground_truth(answer, index, where, cfg.answer_column)
            for column in cfg.keep_columns:
                value = lookup_column(row, column)
                if value is MISSING:
                    raise ConfigError(f"row {index} of {where} has no column {column!r} (data.keep_columns)")
                problem[column] = value
            problems.append(problem)
            if cfg.max_samples is not None and len(problems) >= cfg.max_samples:
                return _answers_alike(problems)
    return _answers_alike(problems)


def _ground_truth(answer: Any, index: int, where: str, column: str) -> str | list[str]:
    """``answer`` as the text the rewards match a reply against, as ``bandpo eval``'s verifiers read a ground truth
    (:func:`bandpo_lab.rewards.answers.ground_truth_strs`): numbers written out (``1e-05`` -> ``"0.00001"``, never
    ``str``'s scientific notation, which no reply matches), a list kept a list. ``ConfigError`` naming the row for
    what eval refuses too: not a string, finite number or non-empty list of them (NaN, a mapping, a bool), or text
    that is empty once normalised."""
    from bandpo_lab.rewards.answers import ground_truth_strs, normalized_ground_truth

    try:
        texts = ground_truth_strs(answer)
        for text in texts:
            normalized_ground_truth(text)
    except ValueError as err:
        message = f"row {index} of {where}: data.answer_column {column!r}: {err} (bandpo eval cannot score it either)"
        raise ConfigError(message if len(message) <= 400 else message[:397] + "...") from None
    return texts if isinstance(answer, (list, tuple)) else texts[0]


def _answers_alike(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``problems`` with every answer a list when any is (Arrow refuses a column of strings and lists)."""
    if any(isinstance(p.get("answer"), list) for p in problems):
        for p in problems:
            if "answer" in p and not isinstance(p["answer"], list):
                p["answer"] = [p["answer"]]
    return problems


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` defines a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def _use_chat(cfg: DataConfig, tokenizer: Any, available: bool | None = None) -> bool:
    available = has_chat_template(tokenizer) if available is None else available
    if cfg.chat_template == "always" and not available:
        raise ConfigError(
            "data.chat_template='always' but the tokenizer has no chat template; use 'auto' or 'never' (plain text "
            "prompts), or a model whose tokenizer defines one"
        )
    return available and cfg.chat_template != "never"


def _format_prompt(prompt: Any, cfg: DataConfig, chat: bool, index: int) -> Any:
    template = cfg.prompt_template
    if isinstance(prompt, str):
        text = template.format(prompt=prompt) if template else prompt
        if chat:
            messages = [{"role": "user", "content": text}]
            if cfg.system_prompt:
                messages.insert(0, {"role": "system", "content": cfg.system_prompt})
            return messages
        return f"{cfg.system_prompt}\n\n{text}" if cfg.system_prompt else text
    if not chat:
        why = (
            "data.chat_template='never'"
            if cfg.chat_template == "never"
            else "the tokenizer has no chat template"
        )
        raise ConfigError(
            f"row {index}: the prompt column {cfg.prompt_column!r} holds chat messages but {why}; use a model "
            "with a chat template or a dataset with text prompts"
        )
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
    if template:
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if users:
            last = users[-1]
            messages[last]["content"] = template.format(prompt=messages[last]["content"])
    if cfg.system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": cfg.system_prompt})
    return messages


def build_prompt_dataset(
    problems: Sequence[Mapping[str, Any]], cfg: DataConfig, tokenizer: Any, chat_template: bool | None = None
) -> Any:
    """A ``datasets.Dataset`` for ``GRPOTrainer``: ``prompt`` formatted (chat messages when the tokenizer has a
    chat template and ``cfg.chat_template`` allows it, plain text otherwise), other columns unchanged.
    ``chat_template``: whether the tokenizer has one, before it is loaded (default: ask it)."""
    from datasets import Dataset

    chat = _use_chat(cfg, tokenizer, chat_template)
    rows = []
    for index, problem in enumerate(problems):
        row = dict(problem)
        row["prompt"] = _format_prompt(problem["prompt"], cfg, chat, index)
        rows.append(row)
    try:
        return Dataset.from_list(rows)
    except (TypeError, ValueError) as err:  # pyarrow's ArrowTypeError / ArrowInvalid: a column of mixed types
        mixed = _mixed_column(rows)
        if mixed is None:
            raise
        column, types = mixed
        raise ConfigError(
            f"data: column {column!r} holds values of different types ({types}); a column must hold one type in "
            "every row (or null): fix the data, or leave the column out of data.keep_columns"
        ) from err


def _mixed_column(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """The first column whose non-null values have more than one Python type (int and float together are one:
    pyarrow promotes them), with the first row of each type (``int in row 0, str in row 1``); ``None`` if none."""
    first: dict[str, dict[type, int]] = {}  # column -> type -> its first row
    for index, row in enumerate(rows):
        for key, value in row.items():
            if value is not None:
                first.setdefault(key, {}).setdefault(type(value), index)
    for column, types in first.items():
        if len(types) > 1 and set(types) != {int, float}:
            return column, ", ".join(f"{t.__name__} in row {i}" for t, i in types.items())
    return None
