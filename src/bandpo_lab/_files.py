"""Files: the built-in recipes and the config a name means, tolerant readers of the JSON files runs write (a file
a killed process left half-written reads as what it holds so far), the one atomic JSON writer, the checks of an
output path before any work, the reading of a user's text file and path, and the one file lock."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import secrets
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, no lock
    fcntl = None  # type: ignore[assignment]

REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
"""The recipes folder of a source checkout (``configs/`` beside ``src/``)."""

WHEEL_RECIPES = Path(__file__).resolve().parent / "recipes"
"""Where a wheel holds its copy of ``configs/**/*.yaml`` (``setup.py``)."""

RECIPES = WHEEL_RECIPES if WHEEL_RECIPES.is_dir() else REPO_CONFIGS
"""The built-in recipes (``tiny.yaml``, ``smollm2-arith.yaml``, ...): an installed wheel's copy, else the
checkout's ``configs/``."""

COMPARE_KEYS = ("methods", "train")
"""A compare recipe has a top-level key of these (:func:`recipe_kind`); every other recipe is a training one."""


def recipe_kind(keys: Iterable[str]) -> str:
    """``compare`` for a config whose top-level ``keys`` include one of :data:`COMPARE_KEYS`, else ``train``."""
    return "compare" if set(COMPARE_KEYS) & set(keys) else "train"


def recipe_names(folder: Path | None = None, kind: str | None = None) -> list[str]:
    """The built-in recipes' names (``tiny``, ``sub/name``) under ``folder`` (default :data:`RECIPES`), sorted, of
    one kind (``train`` or ``compare``: :func:`recipe_kind`) or (``None``) all; ``[]`` when there is no folder."""
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


def resolve_config(
    name: str | Path, beside: Path | None = None, folder: Path | None = None
) -> tuple[Path, Path | None]:
    """The file a config name means, and the built-in recipe it shadows (or ``None``, for the caller to warn):
    ``name`` relative to ``beside`` (default: the working directory) where that exists, else ``name.yaml`` there,
    else the built-in recipe of that name (``tiny``, ``tiny.yaml``, ``sub/name``, ``configs/tiny.yaml``; never
    for an absolute path, nor one that starts with ``./`` or holds ``..``), else ``name`` there (which does not
    exist)."""
    folder = RECIPES if folder is None else folder
    raw = str(name)
    here = Path() if beside is None else beside
    with_suffix = [] if Path(raw).suffix == ".yaml" else [here / (raw + ".yaml")]
    local = next((p for p in [here / raw, *with_suffix] if p.exists()), None) if raw.strip() else None
    if local is None:
        return _recipe_of_name(raw, folder) or here / raw, None
    recipe = _recipe_of_name(raw, folder)
    return local, recipe if recipe is not None and recipe.resolve() != local.resolve() else None


_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)
"""``$VAR`` or ``${VAR}``, as ``os.path.expandvars`` finds them."""


def expand_path(path: str | Path, name: str = "path", error: type[ValueError] = ValueError) -> Path:
    """``path`` with ``$VAR`` / ``${VAR}`` and a leading ``~`` expanded, as a shell would: read a path a user typed
    through this once, so that every check and every writer sees the same directory.

    Raises:
        error: ``path`` names a variable that is not set; one line naming ``name`` (the setting or option) and the
            variable.
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


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, flushed, then ``os.replace``): a
    kill mid-write leaves the earlier file or none, never a truncated one. The temporary file is created as a plain
    ``open(path, "w")`` creates a file (``0o666`` less the umask), not with ``mkstemp``'s private ``0o600``; its
    random name lets concurrent writers of one path each replace it whole."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):  # the replace did not happen
            os.unlink(tmp)


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON atomically (:func:`write_text`)."""
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


HAS_FLOCK = fcntl is not None
"""Whether this system has ``flock`` (not Windows): without it :func:`flock` locks nothing."""


def flock(fd: int, blocking: bool = True) -> bool:
    """Take the exclusive advisory lock (``fcntl.flock``) of the open file ``fd``: ``True`` once held (with
    ``blocking=False``, ``False`` at once when another open file holds it); dropped when ``fd`` is closed or its
    process ends. Without ``fcntl`` (Windows) there is no lock: ``True``."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold :func:`flock` on ``path`` (created empty if missing) for the block, waiting for it."""
    with open(path, "a") as f:
        flock(f.fileno())
        yield  # closing the file drops the lock


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
    """The object rows of a JSONL file, or of its gzipped copy ``<path>.gz`` (``bandpo compare --export``) when
    the file is absent; ``[]`` if neither exists. Blank lines, a torn last line and non-objects are skipped."""
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


def _above_problem(path: str | Path, name: str, must: str) -> str | None:
    """Why nothing can be created at ``path`` for the nearest existing path above it, or ``None``: it is a file
    (``must`` says what is needed instead), or a folder that takes no new entry (:func:`_write_problem`)."""
    try:
        above = next((parent for parent in Path(path).parents if parent.exists()), None)
    except OSError:
        return None
    if above is None:
        return None
    if above.is_dir():
        return _write_problem(path, name, above)
    return f"{name} {str(path)!r} is inside {str(above)!r}, which is a file; {must}"


def _write_problem(path: str | Path, name: str, folder: Path) -> str | None:
    """Why nothing can be created at ``path``, or ``None``: ``folder``, the nearest existing one at or above it,
    refuses a new entry (learned by creating one empty temporary folder there and removing it at once)."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".bandpo-write-check-"))
    except OSError as err:
        return f"{name} {str(path)!r} cannot be written: {str(folder)!r} takes no new entry ({err.strerror or err})"
    return None


def output_dir_problem(path: str | Path, name: str = "output_dir") -> str | None:
    """Why ``path`` cannot be the directory a command writes into, in one line naming ``name`` (the setting or
    option), or ``None``: it must be a directory, or not exist with no file above it, and the nearest existing
    folder must take a new entry (:func:`_write_problem`). A path it cannot inspect gives ``None``."""
    p = Path(path)
    if not str(path).strip():
        return f"{name} must be a directory path, got {str(path)!r}"
    try:
        if p.exists() or p.is_symlink():
            if p.is_dir():
                return _write_problem(path, name, p)
            kind = "a file" if p.is_file() else "not a directory"
            return f"{name} {str(path)!r} is {kind}; it must be a directory (or not exist yet)"
    except OSError:
        return None
    return _above_problem(path, name, f"{name} must be a directory (or not exist yet)")


def output_file_problem(path: str | Path, name: str) -> str | None:
    """Why ``path`` cannot be a file a command writes, in one line naming ``name``, or ``None``: it is empty, a
    symbolic link, an existing directory or other file that is not a regular one (``/dev/null``: the atomic write
    replaces what is at the name), something above it is a file, or its nearest existing folder takes no new entry
    (:func:`_write_problem`)."""
    p = Path(path)
    if not str(path).strip():
        return f"{name} must be a file path, got {str(path)!r}"
    try:
        if p.is_symlink():  # a link, even to a file: the write would replace the link, not write its target
            return (
                f"{name} {str(path)!r} is a symbolic link (to {os.readlink(p)!r}): bandpo writes its file in place of "
                "what is at that name, so the link would be lost; give the path it points to, or a new file"
            )
        if p.is_dir():
            return f"{name} {str(path)!r} is a directory; it must be a file path"
        if p.exists() and not p.is_file():
            return (
                f"{name} {str(path)!r} is not a regular file (a device, pipe or socket): bandpo writes its file in "
                "place of what is at that name; choose a file path"
            )
    except OSError:
        return None
    return _above_problem(path, name, "its folder must be a directory")


def shared_folder_problem(path: str | Path, name: str, command: str) -> str | None:
    """Why ``path`` may not be the folder ``bandpo <command>`` writes its files into (``name``: the setting or
    option), in one line, or ``None``: it is the working directory, the home directory or a folder above one of
    them, and not empty (the user's files, which the command's own would be written among; ``bandpo train``
    refuses such a folder as one of files bandpo did not write). A command exempts its own earlier output there.
    ``path``: as written (:func:`expand_path` applied by the caller)."""
    try:
        target = Path(path).resolve()
        places = {"the working directory": Path.cwd().resolve(), "the home directory": Path.home().resolve()}
        how = next((what for what, place in places.items() if target == place), None)
        how = how or next(
            (f"above {what}" for what, place in places.items() if target in place.parents), None
        )
        if how is None or not (target.is_dir() and any(target.iterdir())):
            return None
    except (OSError, RuntimeError):  # no home directory known; a folder that cannot be listed
        return None
    shown = "" if str(target) == str(path) else f" ({str(target)!r})"
    return (
        f"{name} {str(path)!r} is {how}{shown}, which holds other files: bandpo {command} would write its own "
        "among them; choose a new or empty folder for it"
    )


MODEL_CONFIG_FILE = "config.json"
"""The saved model's config (transformers' ``CONFIG_NAME``): present once the final model is saved."""

WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)


def has_weights(names: Sequence[str]) -> bool:
    """Whether the file names ``names`` of a folder include a model's weights (:data:`WEIGHT_FILES`, shards)."""
    return any(n in names for n in WEIGHT_FILES) or any(n.endswith(".safetensors") for n in names)


def holds_model(folder: Path) -> bool:
    """Whether ``folder`` holds ``config.json`` and weights, as ``bandpo_lab.eval.models.check_model_dir`` asks."""
    try:
        names = [c.name for c in folder.iterdir()] if folder.is_dir() else []
    except OSError:
        return False
    return MODEL_CONFIG_FILE in names and has_weights(names)


def model_folder_problem(
    path: str | Path, name: str, command: str, *, is_file: bool = False, model: str | Path | None = None
) -> str | None:
    """Why ``bandpo <command>`` may not write ``path`` (``name``: the setting or option), in one line, or ``None``:
    the folder it writes into (``path``, or with ``is_file`` its folder) holds a model (``config.json`` and weights,
    :func:`holds_model`) or lies inside the command's own ``model`` folder. ``bandpo eval``'s
    rule: no file among a model's. ``path``: as written (:func:`expand_path` applied by the caller)."""
    folder = Path(path).parent if is_file else Path(path)
    try:
        local = None if model is None else expand_path(model)
        found = local if local is not None and local.is_dir() and same_or_inside(folder, local) else None
    except ValueError:  # a $VAR that is not set: refused with its own message where the model is resolved
        found = None
    found = found or (folder if holds_model(folder) else None)
    if found is None:
        return None
    how = "is" if not is_file and found.resolve() == folder.resolve() else "is inside"
    return (
        f"{name} {str(path)!r} {how} the model folder {str(found)!r}: bandpo {command} writes no file among a "
        "model's; write it elsewhere"
    )
