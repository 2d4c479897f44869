"""Evaluation datasets: a built-in task's split or local files (:func:`load_eval_dataset`), several for one model
with its training run's task options (:func:`resolve_eval_datasets`), their prompts formatted as in training."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bandpo.validation import check_int_in
from bandpo_lab._files import expand_path
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.eval.models import run_config_of
from bandpo_lab.eval.scorers import TASK_SCORERS, get_scorer


@dataclass
class EvalDataset:
    """Problems to evaluate on: ``name`` (displayed), ``source`` (task and split, or file paths), ``verifier``,
    ``problems`` (dicts with the unformatted ``prompt``, a string or chat messages, and the ``answer``, ``None``
    where the row has none), ``task`` (``None`` for files) and the prompt formatting of the training config's
    ``data:``."""

    name: str
    source: str
    verifier: str
    problems: list[dict[str, Any]]
    task: str | None = None
    prompt_template: str | None = None
    system_prompt: str | None = None
    chat_template: str = "auto"


def _translate(err: Exception) -> EvalError:
    """A training-data ``ConfigError`` in the words of the eval options (``data.path`` -> ``dataset``)."""
    from bandpo_lab.training.data import FORMAT_HINT

    text = str(err).replace(FORMAT_HINT, "")  # no format setting among eval's flags nor compare's eval keys
    for old, new in (("data.path", "dataset"), ("data.split", "split"), ("data.format", "data_format")):
        text = text.replace(old, new)
    return EvalError(text)


def load_eval_dataset(
    spec: str,
    *,
    split: str = "test",
    verifier: str | None = None,
    prompt_column: str = "prompt",
    answer_column: str = "answer",
    task_options: Mapping[str, Any] | None = None,
    max_problems: int | None = None,
    data_format: str = "auto",
    prompt_template: str | None = None,
    system_prompt: str | None = None,
    chat_template: str = "auto",
) -> EvalDataset:
    """Load the problems of a built-in task split or of local JSONL / JSON / parquet files.

    Args:
        spec: a built-in task name or a path: a file, or a directory of ``<split>.<ext>`` / ``<split>-*.<ext>``
            files (also under ``data/``), as the training config's ``data.path`` reads it.
        split: the task split, or the file-name prefix inside a directory.
        verifier: default: the task's own, ``dapo`` for files.
        prompt_column, answer_column: columns of the files (dots read nested dicts); rows without an answer are
            kept (counted as unparsed ground truths).
        task_options: the task's options (they must match the training run's for its test split).
        max_problems: keep the first ``max_problems`` problems (``None``: all).
        prompt_template, system_prompt, chat_template, data_format: as in the training config's ``data:``.

    Raises:
        EvalError: unknown verifier, missing file or column (naming the columns there), a row without a prompt,
            invalid ``max_problems`` or ``prompt_template``.
    """
    from bandpo_lab.training.config import ConfigError, DataConfig
    from bandpo_lab.training.data import MISSING, is_messages, lookup_column, read_records, resolve_data_files
    from bandpo_lab.training.sections import prompt_template_problem
    from bandpo_lab.training.tasks import TASKS

    if max_problems is not None:
        max_problems = check_int_in("max_problems", max_problems, 1, note=" or None", error=EvalError)
    problem = prompt_template_problem(prompt_template, "prompt_template")
    if problem is not None:  # before the data: it was found only when the prompts were formatted
        raise EvalError(problem)
    is_task = _is_task(spec, split)
    if is_task:
        task = TASKS.get(spec)
        verifier = verifier or task.default_reward
        options = task_options_for(spec, task_options)
        rows = task.build_split(options, split)
        problems = [{"prompt": r["prompt"], "answer": r.get("answer")} for r in rows]
        source = f"task {spec!r} split {split!r}"
        display = f"{spec}/{split}"
    else:
        if task_options:
            raise EvalError(
                f"task_options apply to a built-in task ({', '.join(TASKS.names())}), not to {spec!r}"
            )
        verifier = verifier or "dapo"
        try:
            cfg = DataConfig(path=spec, split=split, format=data_format)
            files = resolve_data_files(cfg)
            sources = [(f, read_records(f, data_format)) for f in files]
        except ConfigError as err:
            raise _translate(err) from err
        problems = []
        for path, rows in sources:
            if not rows:
                raise EvalError(f"dataset file {str(path)!r} has no rows")
            needed = {"prompt_column": prompt_column}
            if verifier not in TASK_SCORERS:  # a task verifier reads the prompt, not an answer
                needed["answer_column"] = answer_column
            for flag, column in needed.items():
                if lookup_column(rows[0], column) is MISSING:
                    raise EvalError(
                        f"{flag}={column!r} is not a column of {str(path)!r}; its columns: "
                        f"{', '.join(map(str, rows[0]))}"
                    )
            for index, row in enumerate(rows):
                prompt = lookup_column(row, prompt_column)
                if not (isinstance(prompt, str) and prompt.strip()) and not is_messages(prompt):
                    raise EvalError(
                        f"row {index} of {str(path)!r}: prompt_column {prompt_column!r} must hold a non-empty "
                        f"string or a list of chat messages with 'role' and 'content', got {prompt!r}"[:400]
                    )
                answer = lookup_column(row, answer_column)
                problems.append({"prompt": prompt, "answer": None if answer is MISSING else answer})
        source = ", ".join(str(p) for p, _ in sources)
        display = Path(spec.rstrip("/")).stem
    get_scorer(verifier)  # unknown names raise now, before any model loads
    if max_problems is not None:
        problems = problems[:max_problems]
    if not problems:
        raise EvalError(f"dataset {spec!r} has no problems")
    return EvalDataset(
        name=display,
        source=source,
        verifier=verifier,
        problems=problems,
        task=spec if is_task else None,
        prompt_template=prompt_template,
        system_prompt=system_prompt,
        chat_template=chat_template,
    )


def unscorable_reason(dataset: EvalDataset) -> str | None:
    """Why no problem of ``dataset`` can be scored, or ``None`` where one can: its verifier's check (the one
    :func:`bandpo_lab.eval.evaluate.evaluate_model` leaves a problem out by) refuses every ground truth (a task
    verifier: every prompt), named with the first problem's. Stops at the first problem that passes."""
    _, check = get_scorer(dataset.verifier)
    first = None
    for index, problem in enumerate(dataset.problems):
        try:
            check(raw_prompt_text(problem["prompt"]), problem.get("answer"))
        except (TypeError, ValueError) as err:
            first = first or (index, problem, err)
            continue
        return None
    if first is None:
        return None
    index, problem, err = first
    what = (
        f"the prompt {raw_prompt_text(problem['prompt'])!r}"[:200]
        if dataset.verifier in TASK_SCORERS
        else f"the ground truth {problem.get('answer')!r}"[:200]
    )
    return (
        f"the {dataset.verifier} verifier can score none of its {len(dataset.problems)} problems (problem {index}: "
        f"{what}: {err})"
    )


def _is_task(spec: str, split: str) -> bool:
    """Whether ``spec`` names a built-in task (and is not an existing path); ``EvalError`` for a spec that is not a
    non-empty string or a split the task does not have."""
    from bandpo_lab.training.tasks import TASKS

    if not isinstance(spec, str) or not spec.strip():
        raise EvalError(
            f"dataset must be a task name ({', '.join(TASKS.names())}) or a file path, got {spec!r}"
        )
    if spec not in TASKS or expand_path(spec, "dataset", EvalError).exists():
        return False
    task = TASKS.get(spec)
    if split not in task.splits:
        raise EvalError(f"split must be one of {', '.join(task.splits)} for task {spec!r}, got {split!r}")
    return True


def task_options_for(task: str, task_options: Mapping[str, Any] | None) -> Any:
    """Built-in task ``task``'s options object from ``task_options``, checked by the task (``EvalError``:
    ``task_options for task 'NAME': ...``)."""
    from bandpo_lab.training.tasks import TASKS

    try:
        return TASKS.get(task).options(dict(task_options or {}), "task_options")
    except (TypeError, ValueError) as err:
        raise EvalError(f"task_options for task {task!r}: {err}") from err


def check_eval_specs(specs: Sequence[str], *, split: str = "test", data_format: str = "auto") -> list[str]:
    """The checks of :func:`load_eval_dataset` that read no data (a task with ``split``, or files that exist), for
    every spec, raising as it does; returns the specs that are built-in tasks, in order."""
    from bandpo_lab.training.config import ConfigError, DataConfig
    from bandpo_lab.training.data import resolve_data_files

    tasks = []
    for spec in specs:
        if _is_task(spec, split):
            tasks.append(spec)
            continue
        try:
            resolve_data_files(DataConfig(path=spec, split=split, format=data_format))
        except ConfigError as err:
            raise _translate(err) from err
    return tasks


def task_answer_length(datasets: Sequence[EvalDataset]) -> int | None:
    """The longest ``TaskSpec.max_new_tokens`` of ``datasets`` when each is a built-in task that has one, else
    ``None``."""
    from bandpo_lab.training.tasks import TASKS

    lengths = [TASKS.get(d.task).max_new_tokens if d.task in TASKS else None for d in datasets]
    return None if not lengths or None in lengths else max(lengths)  # type: ignore[type-var]


def task_options_of_run(model_dir: str | Path, task: str) -> dict[str, Any] | None:
    """The ``data.task_options`` of the training run in ``model_dir`` (:func:`bandpo_lab.eval.models.run_config_of`)
    when it trained on ``task``; ``None`` otherwise."""
    section = (run_config_of(model_dir) or {}).get("data") or {}
    if isinstance(section, dict) and section.get("task") == task:
        return dict(section.get("task_options") or {})
    return None


def _check_apart_from_training(
    spec: str, dataset: EvalDataset, run_options: Mapping[str, Any], options: Mapping[str, Any]
) -> None:
    """``EvalError`` where problems of ``dataset`` are in the run's training split (other task options than the
    run's can do that), naming how many and the two sets of options."""
    from bandpo_lab.training.tasks import TASKS

    task = TASKS.get(spec)
    trained = {
        _prompt_key(r["prompt"])
        for r in task.build_split(task.options(dict(run_options), "task_options"), "train")
    }
    shared = sum(_prompt_key(p["prompt"]) in trained for p in dataset.problems)
    if shared:
        raise EvalError(
            f"task_options {dict(options)} for {spec!r}: {shared} of the {len(dataset.problems)} evaluation "
            f"problems are in the training split of the run (its task options: {dict(run_options)}), so they are "
            "not held out: keep the run's seed and split sizes (change only what leaves its splits alone), or "
            "evaluate without --task-options"
        )


def _prompt_key(prompt: Any) -> str:
    """A problem's prompt as a comparable string (a chat prompt's messages as JSON)."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def resolve_eval_datasets(
    specs: Sequence[str],
    model_dir: str | Path | None = None,
    *,
    task_options: Mapping[str, Any] | None = None,
    report: Callable[[str], None] | None = None,
    **load_options: Any,
) -> list[EvalDataset]:
    """One :class:`EvalDataset` per spec (:func:`load_eval_dataset` with ``load_options``), a repeated display name
    getting ``#2``, ``#3``, ... A built-in task takes the task options of the training run in ``model_dir``
    (:func:`task_options_of_run`; ``report`` is told), changed by ``task_options``; problems of the run's training
    split are refused (:func:`_check_apart_from_training`).
    """
    datasets = []
    for spec in specs:
        is_file = expand_path(spec, "dataset", EvalError).exists()  # as load_eval_dataset reads it
        run_options = None if is_file or model_dir is None else task_options_of_run(model_dir, spec)
        options = task_options
        if options is None:
            options = run_options
            if options and report is not None:
                report(f"{spec}: task options of the training run: {options}")
        elif run_options is not None:  # the given options change the run's; the others stay the run's
            options = {**run_options, **task_options}
        dataset = load_eval_dataset(spec, task_options=None if is_file else options, **load_options)
        if (
            run_options is not None
            and options != run_options
            and load_options.get("split", "test") != "train"
        ):
            _check_apart_from_training(spec, dataset, run_options, options)
        datasets.append(dataset)
    seen: dict[str, int] = {}
    for d in datasets:  # distinct display names
        seen[d.name] = seen.get(d.name, 0) + 1
        if seen[d.name] > 1:
            d.name = f"{d.name}#{seen[d.name]}"
    return datasets


def prompt_texts(dataset: EvalDataset, tokenizer: Any) -> tuple[list[str], bool]:
    """The formatted prompt strings of ``dataset`` and whether they are chat-templated (with special tokens)."""
    from bandpo_lab.training.config import ConfigError, DataConfig
    from bandpo_lab.training.data import build_prompt_dataset, has_chat_template

    try:
        cfg = DataConfig(
            task=dataset.task,
            path=None if dataset.task else "<eval>",
            prompt_template=dataset.prompt_template,
            system_prompt=dataset.system_prompt,
            chat_template=dataset.chat_template,
        )
        formatted = build_prompt_dataset([{"prompt": p["prompt"]} for p in dataset.problems], cfg, tokenizer)
    except ConfigError as err:
        raise _translate(err) from err
    chat = has_chat_template(tokenizer) and dataset.chat_template != "never"
    texts = [
        row
        if isinstance(row, str)
        else tokenizer.apply_chat_template(row, tokenize=False, add_generation_prompt=True)
        for row in formatted["prompt"]
    ]
    return texts, chat


def raw_prompt_text(prompt: Any) -> str:
    """The unformatted prompt a task scorer reads: the string, or the last user message's content (else the last's)."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    return str((users or prompt)[-1].get("content", ""))
