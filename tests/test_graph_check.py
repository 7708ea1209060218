"""benchmarks/graph_check.py, the script a GPU loan runs, where the CPU can show what it does: the
JSON it leaves after a sticky error, the cause it keeps of a failed capture, the compile state each
sweep starts from, and the paper phase's sizing and its choice of the graph."""

import functools
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest
import torch

from toymodels.performance.replay import RerunGraph
from toymodels.performance.time_budget import TRACEBACK_CHARS, BudgetedReport
from toymodels.training.cuda_graphs import WARMUP_STEPS, Stepper

sys.path.insert(0, str(Path(__file__).parent))
from test_graphs import tiny_trainer  # noqa: E402 - FIFTY_STEPS' population

ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered"


def graph_check():
    """benchmarks/graph_check.py as a module (it is a script, outside the package)."""
    path = Path(__file__).parents[1] / "benchmarks" / "graph_check.py"
    spec = importlib.util.spec_from_file_location("graph_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def strict_json(path: Path) -> dict:
    def refuse(constant):
        raise ValueError(f"{constant} in a strict JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_sticky_device_error_in_a_variants_cleanup_still_leaves_strict_json_with_its_error(tmp_path):
    """After a sticky CUDA error every CUDA call raises again, the cleanup's `empty_cache()` too:
    the report is written anyway, with the variant's error; a NaN is written as text."""

    def sticky(*_):
        raise RuntimeError(ILLEGAL_ACCESS)

    report = BudgetedReport(tmp_path / "check.json", 60, time.perf_counter(), sticky, sweeps={})
    sweeps = report.report["sweeps"]
    report.variant(sweeps, "regimes/graphed", 0, sticky)
    written = strict_json(tmp_path / "check.json")["sweeps"]
    assert written["graphed"]["error"] == f"RuntimeError: {ILLEGAL_ACCESS}"
    assert written["graphed"]["cleanup_error"] == f"RuntimeError: {ILLEGAL_ACCESS}"
    report.variant(sweeps, "regimes/compiled", 0, lambda: {"ms_per_step": float("nan")})
    assert strict_json(tmp_path / "check.json")["sweeps"]["compiled"]["ms_per_step"] == "nan"


class CaptureThatFailsInside(RerunGraph):
    """A capture failing as CUDA's does: an op inside it raises, then ending the capture raises
    again, with a message long enough that the first error lies outside the last 3 000 characters."""

    def capture(self, step):
        try:
            raise RuntimeError("operation not permitted when stream is capturing (the op that failed)")
        except RuntimeError as error:  # chained, as torch's capture_end raises it
            raise RuntimeError(
                "capture_end: the capture was invalidated. " + "Its graph is unusable. " * 200
            ) from error


def test_a_capture_that_fails_inside_keeps_the_error_that_caused_it(tmp_path):
    stepper = Stepper(tiny_trainer(), CaptureThatFailsInside)
    report = BudgetedReport(tmp_path / "check.json", 60, time.perf_counter(), lambda label: None, sweeps={})
    report.variant(
        report.report["sweeps"],
        "regimes/graphed",
        0,
        lambda: {"losses": [float(stepper(step).sum()) for step in range(WARMUP_STEPS + 1)]},
    )
    recorded = strict_json(tmp_path / "check.json")["sweeps"]["graphed"]
    assert recorded["error"].startswith("RuntimeError: capture_end: the capture was invalidated.")
    assert recorded["raised_while"] == [
        "RuntimeError: operation not permitted when stream is capturing (the op that failed)"
    ]
    assert "(the op that failed)" in recorded["traceback"][:TRACEBACK_CHARS]


def test_the_check_writes_where_it_is_told_or_under_out_and_nowhere_else(monkeypatch, capsys, tmp_path):
    check = graph_check()
    monkeypatch.setenv("OUT", str(tmp_path))
    assert check.parse_args([]).out == tmp_path
    monkeypatch.delenv("OUT")
    with pytest.raises(SystemExit) as refused:
        check.parse_args([])
    assert refused.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("--out: not given, and $OUT is not set")


def symbolic_shapes_backend(seen: list):
    """Dynamo's eager backend that notes, for each graph it gets, whether it was traced for
    dynamic shapes (an input or a size that is a symbol)."""

    def backend(graph, inputs):
        seen.append(
            any(
                isinstance(value, torch.SymInt)
                or isinstance(value, torch.Tensor)
                and any(isinstance(size, torch.SymInt) for size in value.shape)
                for value in inputs
            )
        )
        return graph.forward

    return backend


def toy_check(module, tmp_path: Path, *options: str):
    return module.GraphCheck(
        module.parse_args(
            ["--toy", "--device", "cpu", "--steps", "10", "--budget-s", "600", "--out", str(tmp_path), *options]
        )
    )


@pytest.mark.slow
def test_each_sweep_compiles_for_its_own_shapes_alone(monkeypatch, tmp_path):
    """fig3b after regimes, of other shapes, compiled for static shapes as a run of it is: Dynamo,
    remembering regimes' shapes, would trace fig3b's for dynamic ones."""
    symbolic = []
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=symbolic_shapes_backend(symbolic)))
    check = toy_check(graph_check(), tmp_path)
    for name in ("regimes", "fig3b"):
        check.sweep(name)
        assert check.report["sweeps"][name]["comparison"]["passed"]
    assert symbolic and not any(symbolic)


@pytest.mark.slow
def test_the_paper_phase_counts_its_fixed_costs_and_takes_the_graph_only_after_a_passed_comparison(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    module = graph_check()
    for fail, graphs in ((["--fail", "regimes/graphed"], False), ([], True)):
        toy_check(module, tmp_path, *fail).run()
        report = strict_json(tmp_path / "graph_check.json")
        assert report["sweeps"]["regimes"]["comparison"].get("passed", False) is graphs
        paper, costs = report["phases"]["paper_regimes"], report["phases"]["paper_costs"]
        assert paper["cuda_graphs"] is graphs
        runs = report["sweeps"]["regimes"]
        timing = runs["graphed" if graphs else "compiled"]
        build_s = runs["compiled"]["build_s"] + (timing["build_s"] if graphs else 0)
        fixed_s = build_s + costs["reference_s"] + costs["evaluation_compile_s"]
        assert paper["estimated_s"] > fixed_s + paper["steps"] * timing["ms_per_step"] / 1000
