"""The build's one addition to pyproject.toml: the wheel carries the recipes. ``configs/**/*.yaml`` but the studies'
own configs (``configs/study/``, run from a clone) are copied into the lab's ``bandpo_lab/recipes/`` (same folders),
so an installed bandpo finds ``tiny``, ``smollm2-arith`` or ``compare-tiny`` by name
(``bandpo_lab._files.RECIPES``). An editable install reads the clone's ``configs/`` itself and copies nothing."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONFIGS = Path(__file__).resolve().parent / "configs"
STUDIES = "study"  # configs/study/: the pre-registered studies' configs, not recipes of the package


class BuildWithRecipes(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "bandpo_lab" / "recipes"
        # no recipe that an earlier build copied and configs/ no longer has
        shutil.rmtree(target, ignore_errors=True)
        for recipe in sorted(CONFIGS.rglob("*.yaml")):
            if recipe.relative_to(CONFIGS).parts[0] == STUDIES:
                continue
            out = target / recipe.relative_to(CONFIGS)
            self.mkpath(str(out.parent))
            self.copy_file(str(recipe), str(out))


setup(cmdclass={"build_py": BuildWithRecipes})
