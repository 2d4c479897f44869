"""The README as a newcomer uses it: its TRL quickstart runs as written on a CPU, its two commands are the ones the
Makefile and CI run, and every link in it and in docs/ leads to a file and a heading that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from helpers import REPO

README = REPO / "README.md"
QUICKSTART_MARK = "<!-- quickstart-trl"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _quickstart() -> str:
    """The python block right after the README's ``<!-- quickstart-trl ... -->`` mark (exactly one mark)."""
    text = README.read_text()
    assert text.count(QUICKSTART_MARK) == 1, f"README.md must hold one {QUICKSTART_MARK!r} mark"
    after = text.split(QUICKSTART_MARK, 1)[1].split("-->", 1)[1]
    match = re.match(r"\s*```python\n(.*?)\n```", after, re.DOTALL)
    assert match is not None, "the quickstart mark must be followed by a ```python block"
    return match.group(1)


def test_trl_quickstart_runs_as_written_on_a_cpu(tmp_path: Path) -> None:
    """The block, unchanged, in a fresh interpreter (offline, one thread, an empty working directory): it trains
    its two steps and prints them with the Band upper bound's mean. It printed four ``FutureWarning:
    gradient_checkpointing is deprecated`` lines that TRL causes and the user did not, and a dict of more than 60
    metrics per step: now one short line a step, and every metric still in the log history (band/hi_mean)."""
    script = tmp_path / "quickstart.py"
    script.write_text(_quickstart())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"steps: 2 band/hi_mean: (\S+)", last)
    assert match is not None, proc.stdout[-2000:]
    assert float(match.group(1)) > 1.0  # Band-KL's upper bounds lie above 1
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]
    assert "{'loss'" not in proc.stdout and "band/hi_mean" not in proc.stdout.replace(last, ""), proc.stdout[
        -2000:
    ]
    steps = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert [s.split(" | ")[0] for s in steps] == ["step 1", "step 2"], proc.stdout[-2000:]
    assert all(len(s) < 160 and "clip/frac" in s and "band/delta 0.05" in s for s in steps), steps


def test_ci_runs_exactly_the_readme_test_commands() -> None:
    """README's "The two commands" block is `make demo` and `make test`; `.ci/run` calls `make test`, `make test-bare`
    (the library with torch alone) and `make test-skyrl` (its environment built with `make .venv-skyrl/.installed`
    first), each named in the README."""
    text = README.read_text()
    section = text.split("\n## The two commands\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make demo", "make test"]
    ci = (REPO / ".ci" / "run").read_text()
    calls = re.findall(r"^\s*(?:if\s+)?(make [^;\s]+(?: [^;\s]+)*)", ci, re.MULTILINE)
    tests = [call for call in calls if call.startswith("make test")]
    assert tests == ["make test", "make test-bare", "make test-skyrl"], calls
    for call in tests:
        assert f"`{call}`" in section, f"{call} is run by .ci/run but not named in the README"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


def test_links_of_readme_and_docs_lead_somewhere() -> None:
    """Every relative link of README.md, docs/*.md and the studies' READMEs names an existing file, and its #anchor
    (if any) a heading of that file: sections moved between the README and docs/ keep their links."""
    broken = []
    studies = sorted((REPO / "studies").glob("**/README.md"))
    assert REPO / "studies" / "study4" / "README.md" in studies
    for page in [README, *sorted((REPO / "docs").glob("*.md")), *studies]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_readme_names_every_registered_clip_rule() -> None:
    """The front page's list of clip rules is the registry's (a rule added to ``CLIP_RULES`` is named there)."""
    from bandpo.losses import CLIP_RULES

    listed = README.read_text().split("The clip rules (", 1)[1].split(")", 1)[0]
    named = set(re.findall(r"`(\w+)`", listed))
    assert set(CLIP_RULES) <= named, sorted(set(CLIP_RULES) - named)
