"""The build's one addition to pyproject.toml: the wheel carries the recipes. ``configs/**/*.yaml`` are copied into
the lab's ``bandpo_lab/recipes/`` (same folders), so an installed bandpo finds ``tiny``, ``smollm2-arith`` or
``compare-tiny`` by name (``bandpo_lab._files.RECIPES``). The studies' configs live in ``studies/`` (run from a
clone) and are not copied. An editable install reads the clone's ``configs/`` itself and copies nothing."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONFIGS = Path(__file__).resolve().parent / "configs"


class BuildWithRecipes(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "bandpo_lab" / "recipes"
        # no recipe that an earlier build copied and configs/ no longer has
        shutil.rmtree(target, ignore_errors=True)
        for recipe in sorted(CONFIGS.rglob("*.yaml")):
            out = target / recipe.relative_to(CONFIGS)
            self.mkpath(str(out.parent))
            self.copy_file(str(recipe), str(out))


setup(cmdclass={"build_py": BuildWithRecipes})
