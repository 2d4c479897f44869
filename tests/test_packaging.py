"""What a user who installs bandpo from its package gets (``setup.py``, ``MANIFEST.in``, pyproject.toml): the
library (``bandpo``) and the lab (``bandpo_lab``), only torch required; the recipes travel from the clone's
``configs/`` through the source distribution into the wheel as ``bandpo_lab/recipes/``, and the installed package
finds them by name from any folder; no study (``studies/``, run from a clone) is in either."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

from helpers import CONFIGS, REPO

SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "src", "configs", "studies")
"""What the test's clone holds: the package's sources, and the studies beside them (their code and configs, not
their exports) so that the build has them to leave out."""


def _build(backend_call: str, source: Path, out: Path) -> str:
    """The file name that ``setuptools.build_meta.<backend_call>(out)`` builds in ``source`` (no build isolation:
    the test environment's setuptools, no downloads)."""
    code = f"import sys; from setuptools import build_meta; print(build_meta.{backend_call}(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # two builds and an import of the installed package: ~15 s
def test_the_wheel_built_from_the_sdist_carries_every_recipe_and_finds_them_by_name(tmp_path: Path) -> None:
    source = tmp_path / "clone"
    source.mkdir()
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            # studies/*/results and studies/study4/pilot: the exports, ~30 MB the build never reads
            skip = ("__pycache__", "*.egg-info", "results", "pilot")
            shutil.copytree(src, source / name, ignore=shutil.ignore_patterns(*skip))
        else:
            shutil.copy2(src, source / name)
    recipes = sorted(p.relative_to(CONFIGS).as_posix() for p in CONFIGS.rglob("*.yaml"))
    assert "tiny.yaml" in recipes and "compare-tiny.yaml" in recipes and "qwen2.5-3b-instruct.yaml" in recipes
    assert not [r for r in recipes if "study" in r]  # the studies' configs live in studies/
    assert (REPO / "studies" / "study4" / "config.yaml").is_file()  # ... which the package leaves out

    sdist = tmp_path / _build("build_sdist", source, tmp_path)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "sdist", filter="data")
    [unpacked] = (tmp_path / "sdist").iterdir()
    assert not (unpacked / "studies").exists()
    assert sorted(
        p.relative_to(unpacked / "configs").as_posix() for p in unpacked.glob("configs/**/*.yaml")
    ) == (recipes)
    (tmp_path / "dist").mkdir()
    wheel = tmp_path / "dist" / _build("build_wheel", unpacked, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "site")
    shipped = sorted(
        n.removeprefix("bandpo_lab/recipes/") for n in names if n.startswith("bandpo_lab/recipes/")
    )
    assert shipped == recipes  # every recipe, nothing else
    assert not [n for n in names if "study" in n.lower() or "mechanism" in n]  # no study's file
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"bandpo", "bandpo_lab"}
    library = {n.split("/")[1] for n in names if n.startswith("bandpo/")}
    assert library == {"__init__.py", "_optional.py", "core", "integrations", "losses", "py.typed", "registry.py",
                       "validation.py"}  # fmt: skip
    [info] = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    entry_points = (tmp_path / "site" / info / "entry_points.txt").read_text()
    assert "bandpo = bandpo_lab.cli.main:main" in entry_points  # the command is the lab's
    assert "bandpo = bandpo.integrations.verl:register" in entry_points  # verl's plugin is the library's
    metadata = HeaderParser().parsestr((tmp_path / "site" / info / "METADATA").read_text())
    required = [r for r in metadata.get_all("Requires-Dist") if "extra ==" not in r]
    assert required == ["torch>=2.4"]

    probe = (
        "import json, bandpo, bandpo_lab._files as f, bandpo_lab.cli.demo as demo\n"
        "from bandpo_lab.training.config import load_train_config\n"
        "from bandpo_lab.experiments.compare import load_compare_config\n"
        "import bandpo_lab\n"
        "print(json.dumps({'package': bandpo.__file__, 'lab': bandpo_lab.__file__, 'recipes': str(f.RECIPES),\n"
        "    'demo': demo.DEFAULT_CONFIG.is_file(),\n"
        "    'tiny': str(load_train_config('tiny').output_dir),\n"
        "    'docs': str(load_train_config('configs/tiny-grpo.yaml').output_dir),\n"
        "    'compare': load_compare_config('compare-tiny').train_config}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "HF_HUB_OFFLINE": "1"}
    work = tmp_path / "elsewhere"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(seen["package"]).parent == tmp_path / "site" / "bandpo"  # the installed copy, not the clone
    site = tmp_path / "site" / "bandpo_lab"
    assert Path(seen["lab"]).parent == site
    assert seen["recipes"] == str(site / "recipes") and seen["demo"]
    assert seen["tiny"] == "runs/tiny"  # output_dir stays relative to the working directory
    assert seen["docs"] == "runs/tiny-grpo"  # the docs' clone paths work too, with the base beside the recipe
    assert Path(seen["compare"]).resolve() == (site / "recipes" / "tiny.yaml").resolve()
