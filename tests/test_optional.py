"""The core install works without the harness's optional extras, and a missing extra is one clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bandpo._optional import MissingDependencyError, pyplot

# Runs with matplotlib and tqdm made unimportable (a None entry in sys.modules makes `import` raise).
BLOCKED = """
import sys
from pathlib import Path
for name in ("matplotlib", "matplotlib.pyplot", "tqdm", "tqdm.auto"):
    sys.modules[name] = None
"""


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED + code], capture_output=True, text=True, timeout=300)


def test_bounds_and_loss_without_matplotlib_or_tqdm() -> None:
    out = _python(
        "import torch, bandpo\n"
        "lo, hi = bandpo.band_bounds(torch.tensor([0.08]).log(), 0.05, 'kl')\n"
        "lp = torch.tensor([[-1.0, -0.5]], requires_grad=True)\n"
        "loss, _ = bandpo.policy_loss(lp, lp.detach() - 0.1, torch.tensor([1.0]), torch.ones(1, 2))\n"
        "loss.backward(); print(round(float(hi), 3))\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2.411"


def test_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError, match=r"pip install '\.\[plots\]' in bandpo's clone"):
        pyplot()


def test_cli_figure_without_matplotlib_is_one_line(tmp_path: Path) -> None:
    out = _python(
        "from bandpo_lab.cli.main import main\n"
        f"raise SystemExit(main(['plot-bounds', '--output', {str(tmp_path / 'b.png')!r}]))\n"
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "pip install '.[plots]' in bandpo's clone" in out.stderr and "Traceback" not in out.stderr


def test_missing_config_library_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config layer's pydantic comes with ``bandpo[lab]``: without it, reading a config is one clear error."""
    pytest.importorskip("yaml", reason="the lab's configs need PyYAML (bandpo[lab])")
    blocked = "pydantic"
    from bandpo_lab.config import coerce

    monkeypatch.setitem(sys.modules, blocked, None)
    coerce._adapter.cache_clear()  # adapters built earlier in the session would hide the missing library
    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: 1.0e-6\n")
    from bandpo_lab.training.config import load_train_config

    with pytest.raises(
        MissingDependencyError, match=rf"need {blocked}, .*pip install '\.\[lab\]' in bandpo's clone"
    ):
        load_train_config(path)
    coerce._adapter.cache_clear()
