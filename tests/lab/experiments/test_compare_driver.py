"""Tests for bandpo_lab.experiments.compare.driver (``run_compare``) on fake runs: the run processes are stubbed (a fake
worker writes the results a run would), so what is under test is what the driver checks, discards and queues."""

from __future__ import annotations

import io
import json
import os
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest
from synthetic_runs import CONFIGS, make_planned_runs

import bandpo_lab.experiments.compare.driver as driver
from bandpo_lab.experiments.compare import CompareError, load_compare_config


def _config(out: Path, *overrides: str) -> Any:
    return load_compare_config(
        CONFIGS / "compare-tiny.yaml", [f"output_dir={out}", "seeds=[0]", "baseline=false", *overrides]
    )


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The specs of the runs the driver starts (with ``"options"``: the worker's options before the spec); each fake
    worker writes results.json with its spec's fingerprint."""
    specs: list[dict[str, Any]] = []

    class FakeWorker:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            spec_path = Path(argv[-1])
            spec = json.loads(spec_path.read_text())
            specs.append({**spec, "options": argv[3:-1]})  # python -m <worker> [options] RUN_SPEC.json
            results = {"label": spec["label"], "seed": spec["seed"], "fingerprint": spec["fingerprint"]}
            (spec_path.parent / "results.json").write_text(
                json.dumps({**results, "metrics": {"mean@8": 0.5}})
            )

        def wait(self) -> int:
            return 0

    fake = types.SimpleNamespace(Popen=FakeWorker, STDOUT=subprocess.STDOUT)
    monkeypatch.setattr(driver, "subprocess", fake)
    monkeypatch.setattr(
        "bandpo_lab.experiments.report.build_report", lambda output_dir, **kwargs: Path(output_dir)
    )
    return specs


@pytest.mark.parametrize("change", ["train.overrides.learning_rate=0.5", "train.overrides.max_steps=30"])
def test_redo_retrains_runs_whose_training_settings_changed(
    tmp_path: Path, launched: list[dict[str, Any]], change: str
) -> None:
    """--redo was refused for a change of the learning rate: the runs it discards were first checked as resumes of
    themselves, which the trainer refuses for a config that changes the experiment."""
    out = tmp_path / "cmp"
    old = make_planned_runs(_config(out), train_files=True)
    new = _config(out, change)
    with pytest.raises(CompareError, match=r"made \(or started\) with another config.*pass --redo"):
        driver.run_compare(new, progress=False, log=io.StringIO())
    assert launched == []
    driver.run_compare(new, redo=True, progress=False, log=io.StringIO())
    assert [(s["label"], s["seed"]) for s in launched] == [("grpo", 0), ("band-kl", 0)]
    for plan, spec in zip(old, launched, strict=True):
        assert spec["fingerprint"] != plan.fingerprint
        assert spec["options"] == [
            "--overwrite"
        ]  # the old run is discarded, as bandpo train --overwrite does
        assert json.loads((plan.run_dir / "results.json").read_text())["fingerprint"] == spec["fingerprint"]


def test_redo_removes_only_bandpos_files_of_the_runs_it_retrains(
    tmp_path: Path, launched: list[dict[str, Any]]
) -> None:
    """``--redo`` removed a retrained run's whole folder (``shutil.rmtree``), the user's notes in it too: now only
    the comparison's own files of the earlier run go here, the training run's in its process (``--overwrite``, as
    ``bandpo train --overwrite``), and the driver names what it leaves."""
    out = tmp_path / "cmp"
    old = make_planned_runs(_config(out), train_files=True)
    for plan in old:
        (plan.run_dir / "my_notes.md").write_text("# my notes")
        (plan.run_dir / "scratch").mkdir()
        # TRL's model card, written with each checkpoint: the training run's, not listed as the user's
        (plan.run_dir / "README.md").write_text(
            "---\nlibrary_name: transformers\ntags:\n- grpo\n- trl\n---\n# Card\n"
        )
        for name in ("train_done.json", "heldout.jsonl", "evals_at_steps.jsonl"):
            (plan.run_dir / name).write_text("{}\n")
        (plan.run_dir / "train.log").write_text("the earlier run's log\n")
    log = io.StringIO()
    driver.run_compare(_config(out, "train.overrides.learning_rate=0.5"), redo=True, progress=False, log=log)
    for plan in old:
        assert (plan.run_dir / "my_notes.md").read_text() == "# my notes"
        assert (plan.run_dir / "scratch").is_dir()
        for name in ("train_done.json", "heldout.jsonl", "evals_at_steps.jsonl"):
            assert not (plan.run_dir / name).exists(), name
        assert "the earlier run's log" not in (plan.run_dir / "train.log").read_text()
        # the training run's files are the run process's to discard (train --overwrite), not the driver's
        assert (plan.run_dir / "run_info.json").is_file()
        assert (
            f"  {plan.method.label} seed 0: --redo: retraining from scratch in {plan.run_dir} (its earlier run's "
            "checkpoints, logs and results are discarded); left as they are (not bandpo's): my_notes.md, scratch/\n"
        ) in log.getvalue()
    assert [s["options"] for s in launched] == [["--overwrite"], ["--overwrite"]]


def test_the_run_process_takes_overwrite_before_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--overwrite`` (from ``--redo``) reaches :func:`run_one`, which trains from scratch with it."""
    from bandpo_lab.experiments.compare import worker

    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(worker, "run_one", lambda spec, overwrite=False: calls.append((spec, overwrite)) or 0)
    assert worker.main(["--overwrite", "spec.json"]) == 0 and worker.main(["spec.json"]) == 0
    assert calls == [("spec.json", True), ("spec.json", False)]
    assert worker.main(["spec.json", "--overwrite"]) == 2 and worker.main([]) == 2


def test_an_unknown_eval_split_or_dataset_is_refused_before_training(
    tmp_path: Path, launched: list[dict[str, Any]]
) -> None:
    """The eval data was read after training only: every run trained, then failed."""
    for change, message in (
        (
            "eval.split=nosplit",
            r"^eval: split must be one of train, test for task 'countdown', got 'nosplit'$",
        ),
        ("eval.dataset=nosuchtask", r"^eval: dataset 'nosuchtask' does not exist"),
    ):
        with pytest.raises(CompareError, match=message):
            driver.run_compare(_config(tmp_path / "cmp", change), progress=False, log=io.StringIO())
    assert launched == []


def test_an_eval_dataset_with_no_scorable_answer_is_refused_before_training(
    tmp_path: Path, launched: list[dict[str, Any]]
) -> None:
    """An ``eval.dataset`` file whose every ground truth the verifier refuses (NaN, a mapping): each run trained,
    then its evaluation scored nothing."""
    data = tmp_path / "nan.jsonl"
    data.write_text('{"prompt": "2+2?", "answer": NaN}\n{"prompt": "3+3?", "answer": {"x": 1}}\n')
    with pytest.raises(
        CompareError, match=r"^eval: dataset .*: the \w+ verifier can score none of its 2 problems"
    ):
        driver.run_compare(
            _config(tmp_path / "cmp", f"eval.dataset={data}"), progress=False, log=io.StringIO()
        )
    assert launched == []


def test_bf16_evaluations_on_a_cpu_without_it_are_refused_before_training(
    tmp_path: Path, launched: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``eval.precision: bf16`` on a CPU without native bf16 (simulated through the /proc/cpuinfo the runtime
    reads): refused in one line before any run trains, not at the first evaluation after training."""
    import bandpo_lab.runtime.precision as precision

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu sse avx2 fma\n")
    monkeypatch.setattr(precision, "_CPUINFO", cpuinfo)
    with pytest.raises(CompareError) as err:
        driver.run_compare(
            _config(tmp_path / "cmp", "eval.precision=bf16"), progress=False, log=io.StringIO()
        )
    assert str(err.value) == (
        "eval.precision='bf16' is not supported on this CPU (no avx512_bf16/amx_bf16 instructions); use float32 or auto"
    )
    assert launched == []


def test_a_config_error_of_the_baseline_stops_the_comparison(
    tmp_path: Path, launched: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed baseline evaluation is a warning (the runs do not depend on it), but not a config error: the runs
    would meet it too."""

    def broken(config: Any, progress: bool = True) -> None:
        raise CompareError("eval: something the config got wrong")

    monkeypatch.setattr(driver, "evaluate_baseline", broken)
    with pytest.raises(CompareError, match="something the config got wrong"):
        driver.run_compare(_config(tmp_path / "cmp", "baseline=true"), progress=False, log=io.StringIO())
    assert launched == []

    def flaky(config: Any, progress: bool = True) -> None:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(driver, "evaluate_baseline", flaky)
    log = io.StringIO()
    driver.run_compare(_config(tmp_path / "cmp", "baseline=true"), progress=False, log=log)
    assert "warning: baseline evaluation failed: out of memory" in log.getvalue() and len(launched) == 2


def test_the_run_count_of_methods_on_their_own_seeds(tmp_path: Path, launched: list[dict[str, Any]]) -> None:
    """grpo on seeds 0-2 and band-kl on seed 0 printed "2 methods x 3 seeds = 4 runs"."""
    methods = (
        "methods=[{label: grpo, clip_rule: grpo}, {label: band-kl, clip_rule: band, params: {divergence: kl, "
        "delta: 0.05}, seeds: [0]}]"
    )
    config = _config(tmp_path / "cmp", "seeds=[0,1,2]", methods)
    make_planned_runs(config)
    log = io.StringIO()
    driver.run_compare(config, progress=False, log=log)
    assert (
        f"2 methods x 3 seeds, band-kl on 1 seed = 4 runs in {tmp_path / 'cmp'} (4 finished" in log.getvalue()
    )
    log = io.StringIO()
    driver.run_compare(_config(tmp_path / "other", "seeds=[0,1]"), progress=False, log=log)
    assert "2 methods x 2 seeds = 4 runs in" in log.getvalue()


def test_workers_import_the_library_and_the_lab_this_process_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's PYTHONPATH starts with the folders holding ``bandpo`` and ``bandpo_lab`` (once each where they
    share one, as in a checkout's src/), then the caller's own PYTHONPATH."""
    import bandpo
    import bandpo_lab

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    paths = driver._child_env(_config(tmp_path)).get("PYTHONPATH", "").split(os.pathsep)
    roots = {str(Path(pkg.__file__).resolve().parents[1]) for pkg in (bandpo, bandpo_lab)}
    assert set(paths[: len(roots)]) == roots and len(paths) == len(roots) + 1
    assert paths[-1] == "/elsewhere"
