"""`bandpo bounds` and `plot-bounds`: through subprocess where the process is under test (the table and a PNG as a
user runs them, a closed pipe), in process for the error paths and the rules on output files, whose messages and
files do not depend on the process (a subprocess costs about 4 s of CPU). The benchmark, once `bandpo bench`, is
`benchmarks/bench.py`: tests/benchmarks/test_bench.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import run_bandpo


def bandpo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "bandpo_lab.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_bounds_table_holds_the_paper_values() -> None:
    out = bandpo("bounds", "--divergence", "kl,tv", "--p", "0.08,0.5,0.9")
    assert out.returncode == 0, out.stderr
    kl = [line.split() for line in out.stdout.splitlines() if line.startswith("kl ")]
    assert [(r[1], r[2], r[3]) for r in kl] == [
        ("0.08", "0.2617", "2.4106"),
        ("0.5", "0.6915", "1.3085"),
        ("0.9", "0.8666", "1.0764"),
    ]
    assert any(line.startswith("fixed 0.2 ") for line in out.stdout.splitlines())


def test_bounds_rejects_bad_p_and_unknown_divergence(capsys: pytest.CaptureFixture[str]) -> None:
    # a subnormal p printed inf in the 1/p column
    code, _, err = run_bandpo(capsys, "bounds", "--p", "1.5,1e-320")
    assert code == 2 and err == (
        "bandpo bounds: error: --p values must be in [2.23e-308, 1] (a normal float64 probability), got "
        "[1.5, 1e-320]\n"
    )
    code, _, err = run_bandpo(capsys, "bounds", "--divergence", "kll")
    assert code == 2 and "unknown divergence 'kll' (did you mean 'kl'?)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bounds", "--delta", "0"), "bandpo bounds: error: --delta must be a finite number > 0, got 0"),
        (("bounds", "--delta", "nan"), "bandpo bounds: error: --delta must be a finite number > 0, got nan"),
        (
            ("bounds", "--cap", "0.5"),
            "bandpo bounds: error: --cap must be a finite number >= 1, or none for no cap, got 0.5",
        ),
        (
            ("bounds", "--cap", "inf"),
            "bandpo bounds: error: --cap must be a finite number >= 1, or none for no cap, got inf",
        ),
        (
            ("bounds", "--cap", "0"),
            "bandpo bounds: error: --cap must be a finite number >= 1, or none for no cap, got 0",
        ),
        (
            ("plot-bounds", "--cap", "0"),
            "bandpo plot-bounds: error: --cap must be a finite number >= 1, or none for no cap, got 0",
        ),
        (
            ("plot-bounds", "--delta", "-0.1"),
            "bandpo plot-bounds: error: --delta must be a finite number > 0, got -0.1",
        ),
        (
            ("plot-bounds", "--cap", "0.9"),
            "bandpo plot-bounds: error: --cap must be a finite number >= 1, or none for no cap, got 0.9",
        ),
        # a delta the Band rule refuses was named as its field ("delta must ..."), not as the flag
        (
            ("plot-bounds", "--delta", "1e9"),
            "bandpo plot-bounds: error: --delta must be a finite number in (0, 1000] for divergence 'kl' (from about "
            "745 on its bounds are [0, 1/p], the whole simplex), got 1000000000.0",
        ),
        # an empty list printed an empty table (--p), or no Band row or curve at all (--divergence)
        (("bounds", "--p", ","), "bandpo bounds: error: --p must name at least one probability, got ','"),
        (
            ("bounds", "--divergence", ","),
            "bandpo bounds: error: --divergence must name at least one divergence, got ','",
        ),
        (
            ("plot-bounds", "--divergence", " , "),
            "bandpo plot-bounds: error: --divergence must name at least one divergence, got ' , '",
        ),
    ],
)
def test_bad_delta_or_cap_is_one_line_before_any_output(
    tmp_path: Path,
    args: tuple[str, ...],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Validated before the table header (or the PNG) is written: one line on stderr, exit status 2 (in process:
    the command line itself is run as a subprocess by the tests above)."""
    from bandpo_lab.cli.main import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    assert (exc.value.code, out.out, out.err) == (2, "", message + "\n")
    assert not list(tmp_path.iterdir())  # plot-bounds wrote no PNG


@pytest.mark.parametrize("none", ["none", "None", "null"])
def test_cap_none_means_no_cap(none: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--cap none`` as ``cap: null`` in a config and ``cap=None`` in the API (``--cap 0`` is refused above)."""
    from bandpo_lab.cli.main import main

    assert main(["bounds", "--divergence", "kl", "--p", "0.001", "--cap", none]) == 0
    stdout = capsys.readouterr().out
    assert "cap = None" in stdout.splitlines()[0]
    (row,) = [line.split() for line in stdout.splitlines() if line.startswith("kl ")]
    assert float(row[3]) > 10  # hi above the default cap 10


def test_closed_stdout_ends_quietly() -> None:
    """``bandpo bounds | head -2``: the reader stops after two lines; the command exits with the SIGPIPE status
    (141) and no BrokenPipeError traceback."""
    p_values = [f"{i / 4000:.6f}" for i in range(1, 4001)]  # ~36,000 lines, far more than a pipe buffer holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "bandpo_lab.cli.main", "bounds", "--p", ",".join(p_values)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, stderr
    assert head[0].startswith(b"Band bounds, delta = 0.05")
    assert stderr == ""


def test_plot_bounds_writes_png(tmp_path: Path) -> None:
    png = tmp_path / "fig.png"
    out = bandpo("plot-bounds", "--output", str(png), "--divergence", "kl,chi2")
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_bounds_refuses_an_out_it_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing directory (matplotlib would write ``<dir>.png`` beside it and report the directory), a path
    under a file (a FileExistsError traceback before) and an unwritable place: one line each, status 2."""
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "a_file").write_text("")
    cases = [
        ("a_dir", "--output 'a_dir' is a directory; it must be a file path"),
        (
            "a_file/b.png",
            "--output 'a_file/b.png' is inside 'a_file', which is a file; its folder must be a directory",
        ),
    ]
    if Path("/proc/self").is_dir():  # Linux: nothing can be created in /proc, even by root
        cases.append(("/proc/no-such-dir/b.png", "--output '/proc/no-such-dir/b.png' cannot be written: "))
    monkeypatch.chdir(tmp_path)
    for out_path, message in cases:
        code, out, err = run_bandpo(capsys, "plot-bounds", "--output", out_path, "--divergence", "kl")
        assert (code, out) == (2, ""), err
        assert err.startswith(f"bandpo plot-bounds: error: {message}") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_dir", "a_file"]  # nothing written


def test_plot_bounds_replaces_only_a_figure_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output`` naming a user's file replaced it with the figure (notes.png, or a bounds.png of their own); now
    refused in one line with the file intact, while a figure bandpo wrote there is replaced (run twice)."""
    (tmp_path / "notes.png").write_text("mine")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_bandpo(capsys, "plot-bounds", "--output", "notes.png", "--divergence", "kl")
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith("bandpo plot-bounds: error: --output 'notes.png' exists and is not a figure bandpo")
    assert (tmp_path / "notes.png").read_text() == "mine"
    for _ in range(2):
        code, out, err = run_bandpo(capsys, "plot-bounds", "--output", "fig.pdf", "--divergence", "kl")
        assert (code, out) == (0, "wrote fig.pdf\n"), err


@pytest.mark.parametrize(
    ("out_path", "got"),
    [("x.txt", "'.txt'"), ("bnoext", "none"), ("fig.", "none")],
)
def test_plot_bounds_refuses_an_output_without_a_figure_suffix(
    out_path: str,
    got: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A suffix matplotlib cannot write was a traceback after the plotting (``Format 'txt' is not supported``),
    and no suffix printed ``wrote bnoext`` while matplotlib wrote ``bnoext.png``: one line, status 2, nothing
    written."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_bandpo(capsys, "plot-bounds", "--output", out_path, "--divergence", "kl")
    assert (code, out) == (2, ""), err
    assert err.startswith(f"bandpo plot-bounds: error: --output {out_path!r} must end in a figure suffix, ")
    assert ".png, " in err and ".pdf, " in err and err.endswith(f"; got {got}\n")
    assert err.count("\n") == 1 and not list(tmp_path.iterdir())


def test_plot_bounds_suffix_picks_the_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_bandpo(capsys, "plot-bounds", "--output", "fig.SVG", "--divergence", "kl")
    assert (code, out) == (0, "wrote fig.SVG\n"), err
    assert b"<svg" in (tmp_path / "fig.SVG").read_bytes()[:500]


@pytest.mark.parametrize(("cap", "shown"), [("", "''"), ("ten", "'ten'"), ("0.5", "0.5")])
def test_a_cap_that_is_no_number_is_quoted(cap: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--cap ''`` printed ``got `` with nothing after it."""
    from bandpo_lab.cli.bounds import check_delta_and_cap

    with pytest.raises(SystemExit) as exc:
        check_delta_and_cap("bounds", 0.05, cap)
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        f"bandpo bounds: error: --cap must be a finite number >= 1, or none for no cap, got {shown}\n"
    )


def test_plot_bounds_output_reads_a_tilde_and_variables_as_a_shell_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output '~/b.png'`` was written to ``./~/b.png`` (and checked there): now where the other commands' paths
    go, ``$HOME/b.png``; a variable that is not set is one line naming it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FIGS", str(tmp_path / "figs"))
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    monkeypatch.chdir(tmp_path)
    for typed, written in (
        ("~/b.png", tmp_path / "home" / "b.png"),
        ("$FIGS/b.png", tmp_path / "figs" / "b.png"),
    ):
        code, _, err = run_bandpo(capsys, "plot-bounds", "--output", typed)
        assert code == 0, err
        assert written.is_file() and not (tmp_path / "~").exists() and not (tmp_path / "$FIGS").exists()
    code, _, err = run_bandpo(capsys, "plot-bounds", "--output", "$NOT_SET_HERE/b.png")
    assert code == 2 and err == (
        "bandpo plot-bounds: error: --output '$NOT_SET_HERE/b.png' names the environment variable $NOT_SET_HERE, "
        "which is not set: set it (export NOT_SET_HERE=...) or write the path without it\n"
    )


def test_plot_bounds_writes_no_file_into_a_models_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-o <model folder>/fig.png`` was accepted (``bandpo eval`` and ``probe`` write no file among a model's):
    refused in one line, the folder unchanged."""
    from bandpo_lab.cli.main import main

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["plot-bounds", "-o", "model/fig.png", "--divergence", "kl"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        "bandpo plot-bounds: error: --output 'model/fig.png' is inside the model folder 'model': bandpo plot-bounds "
        "writes no file among a model's; write it elsewhere\n"
    )
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]
