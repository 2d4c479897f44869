"""Suite-wide settings and fixtures: one torch thread per test process, offline Hugging Face libraries, ``gpu``
tests skipped without CUDA, and the small countdown warm start built once per run (``warm_cache`` /
``warm_model_dir``), shared by the pytest-xdist workers.

Threads: ``make test`` runs two pytest-xdist workers (``-n 2``) on a machine with two cores that other jobs share;
torch's default (one thread per core in each process) oversubscribed it, which made the warm start alone run for
more than 25 minutes. So every worker, and every subprocess a test starts (it inherits the environment), uses one
thread: ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` are set to 1 here, whatever the environment said, before anything
imports torch, and ``torch.set_num_threads(1)`` applies it in case a plugin imported torch first.
"""

import os
from pathlib import Path

import pytest

os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu``-marked tests need a CUDA device: skipped, with the reason, where there is none."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `make gpu-check` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the small countdown warm start (``helpers.tiny.SMALL_WARM_START``), built once per
    test run. Runs of configs/tiny.yaml with ``helpers.tiny.warm_start_overrides(warm_cache)`` find it there and
    skip the build (tests/lab/cli/test_train.py checks that they do).

    Under pytest-xdist the workers share it: it lives in the run's common temporary directory (the parent of each
    worker's own), and a file lock lets the first worker that needs it build it while the others wait and reuse
    it (``warm_start`` returns a finished cache entry as it is). Without xdist it is this session's own."""
    from filelock import FileLock

    from bandpo_lab.tasks.tiny_model import warm_start
    from helpers.tiny import small_warm_start_config

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        cache = tmp_path_factory.mktemp("bandpo_cache")
        warm_start(cache, small_warm_start_config(), progress=False)
        return cache
    cache = tmp_path_factory.getbasetemp().parent / "bandpo_cache"  # common to this run's workers
    with FileLock(str(cache) + ".lock"):
        warm_start(cache, small_warm_start_config(), progress=False)
    return cache


@pytest.fixture(scope="session")
def warm_model_dir(warm_cache: Path) -> Path:
    """The directory of the small warm-started countdown model (in ``warm_cache``)."""
    from helpers.tiny import small_warm_start_config

    path = warm_cache / f"countdown-warm-{small_warm_start_config().cache_key()}"
    assert (path / "warm_start.json").is_file(), f"no warm start in {path}"
    return path


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The built-in real model's converted directory (``smollm2-135m``), in the default cache, converted once (about
    30-90 s; a file lock makes parallel test workers convert it once); skipped without its package."""
    from bandpo_lab.models import ModelUnavailableError, builtin_model_dir
    from bandpo_lab.models.smollm2 import INSTALL, gguf_path
    from bandpo_lab.training.tasks import default_cache_dir

    try:
        gguf_path()
    except ModelUnavailableError:
        pytest.skip(f"needs the model package: {INSTALL}")
    return builtin_model_dir("smollm2-135m", default_cache_dir(), progress=False)
