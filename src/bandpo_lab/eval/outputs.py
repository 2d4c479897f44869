"""Where ``bandpo eval`` may write its results (``--output``) and samples (``--save-samples``), checked before any
work by :func:`outputs_problem` by the rule ``bandpo eval --help`` states (output files).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path

from bandpo_lab._files import expand_path, holds_model, output_file_problem, read_json_object, same_or_inside

DEFAULT_RESULTS = "eval_results.json"  # in the model's folder: the one output a model folder takes
RESULT_KEYS = frozenset({"model", "settings", "datasets", "overall"})  # of a results JSON
SAMPLE_KEYS = frozenset({"dataset", "index", "completions", "correct"})  # of every row of a samples JSONL
_LARGEST_RESULTS = 64 << 20  # a larger file (a model's weights) is not read whole to find out


def is_eval_output(path: Path) -> bool:
    """Whether the file ``path`` is an earlier bandpo eval output: a samples JSONL (by its first line) or a results
    JSON (read whole only when it starts as JSON and is small)."""
    first = b""
    try:
        with path.open("rb") as f:
            first = f.readline(1 << 20)
        row = json.loads(first)
        if isinstance(row, dict) and row.keys() >= SAMPLE_KEYS:
            return True
    except (OSError, ValueError):
        pass
    if not first.lstrip().startswith(b"{"):
        return False
    try:
        if path.stat().st_size > _LARGEST_RESULTS:
            return False
    except OSError:
        return False
    return read_json_object(path).keys() >= RESULT_KEYS


def _model_folder(path: Path, model_dir: Path | None) -> Path | None:
    """The model folder ``path`` lies in (the evaluated ``model_dir``, or the folder of the file holding a model),
    or ``None``."""
    if model_dir is not None and same_or_inside(path, model_dir):
        return model_dir
    return path.parent if holds_model(path.parent) else None


def _same_folder(folder: Path, model: Path | None) -> bool:
    """Whether ``folder`` is the evaluated ``model``'s folder (``None``: not known, so not)."""
    return model is not None and same_or_inside(folder, model) and same_or_inside(model, folder)


def outputs_problem(outputs: Mapping[str, str | Path | None], model_dir: str | Path | None) -> str | None:
    """Why the files ``outputs`` (``{flag: path or None}``) cannot be written by an evaluation of ``model_dir``
    (``None``: not known yet), in one line naming the flag, or ``None``."""
    given = {flag: path for flag, path in outputs.items() if path is not None}
    written: dict[str, Path] = {}  # each flag's file as it is written: ~ and $VAR expanded, then checked
    for flag, raw in given.items():
        try:
            written[flag] = expand_path(raw, flag)  # an unset $VAR
        except ValueError as err:
            return str(err)
        # '' is no path (expanded, it would read as ".")
        problem = output_file_problem(written[flag] if str(raw).strip() else raw, flag)
        if problem is not None:
            return problem
    for flag, other in itertools.combinations(given, 2):
        if same_or_inside(written[flag], written[other]) or same_or_inside(written[other], written[flag]):
            return (
                f"{other} {str(given[other])!r} and {flag} {str(given[flag])!r} are the same file: each output "
                "needs a file of its own"
            )
    model = None if model_dir is None else expand_path(model_dir)
    for flag, raw in given.items():
        path = written[flag]
        folder = _model_folder(path, model)
        # the default results file: in the evaluated model's own folder only, never another model's
        default = flag == "--output" and path.name == DEFAULT_RESULTS
        if folder is not None and not (default and _same_folder(path.parent, model)):
            if default and (folder == path.parent or holds_model(path.parent)):
                evaluated = "" if model is None else f" {str(model)!r}"
                return (
                    f"{flag} {str(raw)!r} is {DEFAULT_RESULTS} in the model folder {str(path.parent)!r}, not in "
                    f"the folder of the model evaluated (--model{evaluated}): bandpo eval writes {DEFAULT_RESULTS} "
                    "only into the evaluated model's own folder; write it elsewhere"
                )
            return (
                f"{flag} {str(raw)!r} is inside the model folder {str(folder)!r}: bandpo eval writes no file among "
                f"a model's but its default results file {DEFAULT_RESULTS}; write it elsewhere"
            )
        try:
            taken = path.is_file() and path.stat().st_size > 0 and not is_eval_output(path)
        except OSError:
            taken = False  # the write reports it
        if taken:
            return (
                f"{flag} {str(raw)!r} exists and is not an earlier bandpo eval output: bandpo eval replaces only "
                "an empty file or its own results JSON / samples JSONL; choose a new file"
            )
    return None
