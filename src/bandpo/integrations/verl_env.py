"""One environment for verl, another for TRL: verl 0.9.1's workers import ``AutoModelForCausalLMWithValueHead`` from
``trl`` whenever TRL is installed, and TRL 1.16 (which ``bandpo[trl]`` needs) no longer has it. :func:`trl_conflict`
says so before a verl actor fails; ``bandpo.integrations.verl.register`` warns with it (``TrlConflictWarning``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from typing import Any

from bandpo._optional import install_hint

__all__ = ["TrlConflictWarning", "trl_conflict"]


class TrlConflictWarning(UserWarning):
    """The installed TRL lacks the class verl's workers import from it (see :func:`trl_conflict`)."""


_VALUE_HEAD = "AutoModelForCausalLMWithValueHead"


def _version(distribution: str, module: Any = None) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown"))


def trl_conflict() -> str | None:
    """Why verl's workers will fail to import from the installed TRL, or ``None`` (no TRL, or a TRL that works).

    verl 0.9.1 imports ``AutoModelForCausalLMWithValueHead`` from ``trl.experimental.ppo``, else from ``trl``,
    whenever TRL is importable (``verl.utils.model.patch_valuehead_model``, ``verl.models.transformers.
    monkey_patch``). TRL 1.16 has neither, so a verl actor's ``init_model`` raises ``ImportError``. This makes
    the same look-ups, without TRL's warnings, and returns a message naming both versions and the fix.
    """
    try:
        trl = importlib.import_module("trl")
    except ModuleNotFoundError as err:
        if err.name == "trl":
            return None  # no TRL: verl skips the value-head patch
        trl, problem = None, f"importing trl fails ({err})"
    except Exception as err:  # a broken TRL fails verl's import the same way
        trl, problem = None, f"importing trl fails ({type(err).__name__}: {err})"
    else:
        problem = f"trl has no {_VALUE_HEAD} (neither trl.experimental.ppo nor trl exports it)"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # trl.experimental warns on import
            for module_name in ("trl.experimental.ppo", "trl"):
                try:
                    module = importlib.import_module(module_name)
                    if hasattr(module, _VALUE_HEAD):
                        return None
                except Exception:  # a missing module is the case looked for
                    continue
    trl_version = _version("trl", trl)
    verl_version = _version("verl", importlib.import_module("verl"))
    return (
        f"trl {trl_version} is installed next to verl {verl_version}, and verl's workers will fail: they import "
        f"{_VALUE_HEAD} from trl when it is installed (verl.utils.model, verl.models.transformers.monkey_patch), "
        f"but {problem}, so the actor's init_model raises ImportError. Fix: run verl in a separate environment "
        f"without trl {trl_version} ({install_hint('verl')}, there; keep the trl extra for BandPOTrainer in "
        "another), or pip uninstall trl in this one."
    )
