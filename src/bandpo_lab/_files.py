"""Tolerant readers of the JSON files runs write (run info, lock records, training logs): a file a killed
process left half-written reads as what it holds so far, never as an exception. And the checks of an output path
that a command makes before any work (:func:`output_dir_problem`, :func:`output_file_problem`). And the one atomic
JSON writer (:func:`write_json`). And :func:`read_utf8`, the one reading of a user's text file (a byte that is
not UTF-8 named by its offset). And :func:`expand_path`, the one reading of a path a user typed, and
:func:`same_or_inside`, the one test of whether a path lies in a folder."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
"""The recipes folder of a source checkout (``configs/`` beside ``src/``); a wheel carries a copy of it instead
(:data:`WHEEL_RECIPES`)."""

WHEEL_RECIPES = Path(__file__).resolve().parent / "recipes"
"""Where a wheel holds the recipes: ``configs/**/*.yaml`` copied into ``bandpo_lab/recipes/`` when it is built
(``setup.py``); a source checkout and an editable install have no such folder."""

RECIPES = WHEEL_RECIPES if WHEEL_RECIPES.is_dir() else REPO_CONFIGS
"""The built-in recipes (``tiny.yaml``, ``smollm2-arith.yaml``, ...): an installed wheel's copy, else the
checkout's ``configs/``. The studies' configs are no recipes: they live in ``studies/``, named by their path."""

COMPARE_KEYS = ("methods", "train")
"""A compare recipe has a top-level key of these (:func:`recipe_kind`); every other recipe is a training one."""


def recipe_kind(keys: Iterable[str]) -> str:
    """``compare`` for a config whose top-level ``keys`` include one of :data:`COMPARE_KEYS`, else ``train``."""
    return "compare" if set(COMPARE_KEYS) & set(keys) else "train"


def recipe_names(folder: Path | None = None, kind: str | None = None) -> list[str]:
    """The built-in recipes' names, sorted: their paths under ``folder`` (default :data:`RECIPES`) without
    ``.yaml`` (``tiny``; ``sub/name`` for one in a subfolder), of one kind (``train`` or ``compare``:
    :func:`recipe_kind`) or (``None``) all; ``[]`` when there is no such folder."""
    folder = RECIPES if folder is None else folder
    names = []
    for path in folder.rglob("*.yaml"):
        # the top-level keys, without a parse
        keys = re.findall(r"^([A-Za-z_][\w.-]*):", path.read_text(), re.M)
        if kind is None or kind == recipe_kind(keys):
            names.append(path.relative_to(folder).with_suffix("").as_posix())
    return sorted(names)


def recipe_name(name: str | Path) -> str:
    """``name`` as the name of a recipe: without a leading ``configs/`` (a clone's path, as the docs write it) and
    without ``.yaml``."""
    parts = Path(name).parts
    if len(parts) > 1 and parts[0] == "configs":
        parts = parts[1:]
    path = Path(*parts) if parts else Path(name)
    return (path.with_suffix("") if path.suffix == ".yaml" else path).as_posix()


def _recipe_of_name(raw: str, folder: Path) -> Path | None:
    """The recipe file of ``folder`` that ``raw`` could name, existing or not a question here: ``None`` for what
    reads only as a path (empty, absolute, ``./x``, holding ``..``) or where there is no such recipe."""
    if not raw.strip() or raw.startswith("./") or raw in {".", ".."}:
        return None
    path = Path(raw)
    if path.is_absolute() or ".." in path.parts:
        return None
    candidate = folder / f"{recipe_name(path)}.yaml"
    return candidate if candidate.is_file() else None


def find_recipe(name: str | Path, folder: Path | None = None, beside: Path | None = None) -> Path | None:
    """The built-in recipe that ``name`` names (``tiny``, ``tiny.yaml``, ``sub/name``, or a clone's path to it,
    ``configs/tiny.yaml``, as the docs write it), or ``None``.

    Only a name that could not mean a file of the user's is looked up: not one that exists (``tiny``) or exists
    with ``.yaml`` added (``tiny`` beside a ``tiny.yaml``) in ``beside`` (default: the working directory: where a
    relative path is read from), not an absolute path, nor one that starts with ``./`` or holds ``..`` (a path
    relative to here, written as such)."""
    folder = RECIPES if folder is None else folder
    raw = str(name)
    here = Path() if beside is None else beside
    if (here / raw).exists() or (here / (raw + ".yaml")).exists():
        return None
    return _recipe_of_name(raw, folder)


def resolve_config(
    name: str | Path, beside: Path | None = None, folder: Path | None = None
) -> tuple[Path, Path | None]:
    """The file a config name means, and the built-in recipe it shadows (or ``None``): ``name`` relative to
    ``beside`` (default: the working directory) where that exists, else ``name.yaml`` there (``tiny`` beside a
    ``tiny.yaml``), else the built-in recipe of that name (:func:`find_recipe`), else ``name`` there (which does
    not exist: the caller says so). A file of the user's chosen over a built-in recipe of the same name (another
    file) is returned with that recipe, for the caller to warn."""
    folder = RECIPES if folder is None else folder
    raw = str(name)
    here = Path() if beside is None else beside
    with_suffix = [] if Path(raw).suffix == ".yaml" else [here / (raw + ".yaml")]
    local = next((p for p in [here / raw, *with_suffix] if p.exists()), None) if raw.strip() else None
    if local is None:
        return find_recipe(raw, folder, beside) or here / raw, None
    recipe = _recipe_of_name(raw, folder)
    return local, recipe if recipe is not None and recipe.resolve() != local.resolve() else None


_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)
"""``$VAR`` or ``${VAR}``, as ``os.path.expandvars`` finds them."""


def expand_path(path: str | Path, name: str = "path", error: type[ValueError] = ValueError) -> Path:
    """``path`` with ``$VAR`` / ``${VAR}`` and a leading ``~`` expanded, as a shell would: read a path a user typed
    through this once, so that every check and every writer sees the same directory (transformers expands ``~`` in
    ``output_dir`` by itself).

    Raises:
        error: ``path`` names a variable that is not set (a shell would read it as empty, ``os.path.expandvars``
            keeps it as written: a folder named ``$UNSET``); one line naming ``name`` (the setting or option) and
            the variable.
    """
    text = str(path)
    for match in _VARIABLE.finditer(text):
        variable = match.group(1).strip("{}")
        if variable not in os.environ:
            raise error(
                f"{name} {text!r} names the environment variable ${variable}, which is not set: set it (export "
                f"{variable}=...) or write the path without it"
            )
    return Path(os.path.expandvars(text)).expanduser()


def same_or_inside(path: str | Path, folder: str | Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it, both read as typed (:func:`expand_path`) and resolved
    (symlinks, ``..``, relative to the current directory); a path that does not exist yet resolves as far as it
    exists."""
    inner, outer = expand_path(path).resolve(), expand_path(folder).resolve()
    return inner == outer or outer in inner.parents


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON atomically: a temporary file of its own in the same folder, flushed to disk,
    then ``os.replace``. A kill mid-write leaves the earlier file or none, never a truncated one, and two processes
    writing the same path each replace it whole (the last one wins: :func:`file_lock` orders read-modify-writes)."""
    text = json.dumps(data, indent=2, default=str) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):  # the replace did not happen
            os.unlink(tmp)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (``fcntl.flock``) on ``path`` (created empty if missing) for the block: the
    read-modify-write of a file that several processes update (e.g. two queues of one comparison). Without
    ``fcntl`` (Windows) there is no lock, as for :class:`bandpo_lab.training.lock.OutputDirLock`."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no flock, no lock
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_utf8(path: Path, name: str) -> str:
    """The text of the file ``path`` read as UTF-8 (a config, a dataset); ``name`` is how a message names it.

    Raises:
        ValueError: one line, ``NAME is not UTF-8 text: byte 0xe9 at byte offset 38 (line 3: ...)``: where the first
            byte that is not UTF-8 lies.
    """
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"{name} is not UTF-8 text: byte 0x{data[err.start]:02x} at byte offset {err.start} (line {line}: "
            f"{err.reason}); save the file as UTF-8"
        ) from None


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` if the file is missing, unreadable, torn or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The object rows of a JSONL file, or of its gzipped copy ``<path>.gz`` (what ``bandpo compare --export``
    writes) when the file itself is absent; ``[]`` if neither exists. Blank lines, a torn last line (the process
    was killed mid-write) and rows that are not objects are skipped."""
    gz = path.with_name(path.name + ".gz")
    if path.is_file():
        text = path.read_text()
    elif gz.is_file():
        text = gzip.decompress(gz.read_bytes()).decode()
    else:
        return []
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _nearest_above(path: Path) -> Path | None:
    """The nearest existing path above ``path`` (a folder, or a file in the way), or ``None``."""
    for parent in path.parents:
        if parent.exists():
            return parent
    return None


def _write_problem(path: str | Path, name: str, folder: Path) -> str | None:
    """Why nothing can be created at ``path`` (a directory or a file a command will write), or ``None``: ``folder``,
    the nearest existing one at or above it, refuses a new entry (read-only, no permission, a pseudo file system
    such as ``/proc``). Learned by creating one empty temporary folder there and removing it at once."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".bandpo-write-check-"))
    except OSError as err:
        return f"{name} {str(path)!r} cannot be written: {str(folder)!r} takes no new entry ({err.strerror or err})"
    return None


def output_dir_problem(path: str | Path, name: str = "output_dir") -> str | None:
    """Why ``path`` cannot be the directory a command writes into, in one line naming ``name`` (the setting or
    option), or ``None``: it is a directory, or it does not exist and nothing above it is a file, and the nearest
    existing folder takes a new entry (:func:`_write_problem`, which creates and removes one empty temporary
    folder there; nothing else is created). A path it cannot inspect gives ``None``: the command's own write
    reports it."""
    p = Path(path)
    if not str(path).strip():
        return f"{name} must be a directory path, got {str(path)!r}"
    try:
        if p.exists() or p.is_symlink():
            if p.is_dir():
                return _write_problem(path, name, p)
            kind = "a file" if p.is_file() else "not a directory"
            return f"{name} {str(path)!r} is {kind}; it must be a directory (or not exist yet)"
        above = _nearest_above(p)
    except OSError:
        return None
    if above is None:
        return None
    if above.is_dir():
        return _write_problem(path, name, above)
    return (
        f"{name} {str(path)!r} is inside {str(above)!r}, which is a file; {name} must be a directory (or not exist "
        "yet)"
    )


def output_file_problem(path: str | Path, name: str) -> str | None:
    """Why ``path`` cannot be a file a command writes, in one line naming ``name``, or ``None``: it is empty, an
    existing directory, something above it is a file, or its nearest existing folder takes no new entry
    (:func:`_write_problem`)."""
    p = Path(path)
    if not str(path).strip():
        return f"{name} must be a file path, got {str(path)!r}"
    try:
        if p.is_dir():
            return f"{name} {str(path)!r} is a directory; it must be a file path"
        above = _nearest_above(p)
    except OSError:
        return None
    if above is None:
        return None
    if above.is_dir():  # the folder: a file is replaced through a temporary one beside it
        return _write_problem(path, name, above)
    return f"{name} {str(path)!r} is inside {str(above)!r}, which is a file; its folder must be a directory"
