"""The GPU check of the CUDA-graph issue, as one prepared script for the one call of a 15-minute
loan (benchmarks/gpu_loan.sh installs the project, then runs it with the budget left) that always
leaves a result: OUT/graph_check.json, OUT being $OUT, which the device tool sets, unless --out
says otherwise.

1. for regimes and fig3b at the paper's shapes (36 and 288 students, ℓ 6–48, batch 1024), each
   from a fresh compile state (Dynamo remembers the shapes it saw and would compile the second
   sweep for dynamic shapes: slower, and not what a run of it compiles), each a variant of its
   own: the ops an eager step issues and how many launch a kernel (op trace, one step labelling
   one step's batch and a 16-step block); then `--steps` steps eager, compiled, and compiled with
   the graph (steps/s, the compile and capture time; kernel launches per step from the profiler,
   without the graph only: profiling graph replays after earlier profiler sessions is a known
   crash in CUPTI's teardown, which would take the rest of the check with it); then their
   comparison, which can fail (performance/replay.py): every replayed step against the compiled
   step and the eager one, the final weights, a stale-input probe, and that a graph ran at all;
2. that replayed steps never wait for the host (CUDA's sync debug mode set to raise), over steps
   that cross a relabelling of the samples;
3. what a paper-scale run of regimes pays once, whatever its length (its reference population,
   the evaluation's compile, an evaluation); then regimes at the paper's scale through the real
   engine (`train`, compiled; with the graph only where regimes' comparison passed) for as many
   steps as fit the budget left after those costs and its own compile, and its wall time
   projected to all the paper's steps at the step time phase 1 measured.

The clock starts before the imports. The JSON is written at the start and after every variant
(performance/time_budget.py): a variant records its error, with the errors behind it, instead of
ending the script, and is skipped, with the reason, when the budget left is less than it needs.
On a CPU, `--toy` runs every phase at toy size, with a CPU stand-in for the graph: a test of the
script itself. `--fail VARIANT` (e.g. regimes/graphed) makes one variant fail as after a sticky
CUDA error, whose cleanup then raises too, to see what a failure leaves.

    python benchmarks/graph_check.py [--out OUT] [--device cuda] [--steps 200] [--budget-s 480] [--toy]
"""

import time

BEGAN = time.perf_counter()  # noqa: E402 - before the imports, which take seconds of the budget

import argparse  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from toymodels.api import Experiment  # noqa: E402
from toymodels.performance.bench import synchronize  # noqa: E402
from toymodels.performance.replay import TIMED_FROM, RerunGraph, compare_replay, record_steps  # noqa: E402
from toymodels.performance.step_trace import launches, syncs, trace  # noqa: E402
from toymodels.performance.time_budget import BudgetedReport  # noqa: E402
from toymodels.training.cuda_graphs import WARMUP_STEPS, Stepper  # noqa: E402
from toymodels.training.engine import train  # noqa: E402
from toymodels.training.jobs import Job  # noqa: E402
from toymodels.training.population import Population  # noqa: E402
from toymodels.training.protocol import Protocol, resolve_device  # noqa: E402
from toymodels.training.trainer import Trainer  # noqa: E402

SWEEPS = ("regimes", "fig3b")
RUNS = ("eager", "compiled", "graphed")  # graphed: compiled, with the graph
TOY = dict(depths=(2, 4), temperatures=(0.1, 1.0), batch=16, teacher_depth=8, test_batches=1, test_batch_size=64)
# What each variant needs at least, in seconds: a compile of a paper-shape population (about a minute
# on an H200, less from inductor's cache) and its steps; the paper-scale run keeps a margin for the
# end of the script.
NEEDS = {
    "ops": 20,
    "eager": 30,
    "compiled": 90,
    "graphed": 90,
    "comparison": 1,
    "sync": 90,
    "paper_costs": 60,
    "paper_regimes": 120,
}
VARIANTS = [f"{sweep}/{name}" for sweep in SWEEPS for name in ("ops", *RUNS, "comparison")] + [
    "sync",
    "paper_costs",
    "paper_regimes",
]
PAPER_MARGIN_S = 30
PROFILED_STEPS = 20
STICKY = "CUDA error: an illegal memory access was encountered (made to fail on purpose, --fail)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=os.environ.get("OUT"), help="the folder of graph_check.json [default: $OUT]"
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=200, help="steps per sweep and run")
    parser.add_argument(
        "--budget-s", type=float, default=480, help="seconds this script may take in all, imports included"
    )
    parser.add_argument("--toy", action="store_true", help="every sweep at toy size (a CPU test of the script)")
    parser.add_argument("--ops-only", action="store_true", help="only the op traces of phase 1 (any device)")
    parser.add_argument(
        "--fail",
        metavar="VARIANT",
        choices=VARIANTS,
        help="make this variant fail as after a sticky CUDA error, e.g. regimes/graphed",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("--out: not given, and $OUT is not set")
    if args.steps < 2 * TIMED_FROM:
        parser.error(
            f"--steps: at least {2 * TIMED_FROM}, the warm-up, the capture and the compared steps with some to time"
        )
    return args


class GraphCheck:
    """One run of the check: its options, its device and its report (`report`)."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.device = args, resolve_device(args.device)
        cuda = self.device.type == "cuda"
        self.graph_kind = None if cuda else RerunGraph  # on a CPU, the stand-in replays the step
        self.budgeted = BudgetedReport(
            args.out / "graph_check.json",
            args.budget_s,
            BEGAN,
            self.release,
            device=torch.cuda.get_device_name(self.device) if cuda else "cpu",
            torch=torch.__version__,
            cuda=torch.version.cuda,
            toy=args.toy,
            steps=args.steps,
            sweeps={},
        )
        self.report = self.budgeted.report

    def run(self) -> None:
        self.budgeted.write()  # a result from the start: the device and the plan
        for name in SWEEPS:  # phase 1
            self.sweep(name)
        if self.args.ops_only:
            return
        phases = self.report["phases"] = {}
        torch._dynamo.reset()  # regimes again, after fig3b's shapes
        if self.device.type == "cuda":  # phase 2
            self.variant(phases, "sync", self.sync_check)
        else:
            phases["sync"] = {"skipped": "CUDA's sync debug mode needs a GPU"}
        self.variant(phases, "paper_costs", self.paper_costs)  # phase 3
        self.variant(phases, "paper_regimes", self.paper_regimes)

    def variant(self, where: dict, label: str, measure) -> None:
        self.budgeted.variant(
            where, label, NEEDS[label.split("/")[-1]], self.made_to_fail if label == self.args.fail else measure
        )

    def made_to_fail(self) -> dict:
        raise RuntimeError(STICKY)

    def release(self, label: str) -> None:
        """After each variant, the device's cached memory freed for the next. After a sticky CUDA
        error this raises again, as it does after the variant `--fail` names."""
        if label == self.args.fail:
            raise RuntimeError(STICKY)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def protocol(self, name: str, **changes) -> Protocol:
        config = Experiment.load(name).config("paper", device=str(self.device), **(TOY if self.args.toy else {}))
        return Protocol.of(config.replace(**changes))

    def sweep(self, name: str) -> None:
        """Phase 1 for one experiment: its op counts, its runs and their comparison."""
        torch._dynamo.reset()  # compiled for these shapes alone, as a run of this sweep is, as a run of this sweep is
        row = self.report["sweeps"][name] = {}
        protocol = self.protocol(name)
        row["students"] = len(Job.whole(protocol).students())
        self.variant(row, f"{name}/ops", lambda: self.op_counts(protocol))
        if self.args.ops_only:
            return
        records = {}
        for run in RUNS:
            self.variant(row, f"{name}/{run}", lambda run=run: self.timed_run(protocol, run, records))
        self.variant(row, f"{name}/comparison", lambda: self.comparison(records))

    def op_counts(self, protocol: Protocol) -> dict:
        """One eager step's ops and launches, with the labelling of a 1-step and a 16-step block
        spread over them; and a replayed step's launches: the graph, the two copies into its input
        buffers and the labelling."""
        counts = {}
        for block_steps in (1, 16):
            trainer = Trainer(Population(protocol.replace(compile=False, cuda_graphs=False), self.device))
            trainer.fresh.steps_ahead = block_steps
            trainer.step(0)
            update = trace(trainer.update, *trainer.batch(1))[0]
            trainer.fresh.inputs = None  # a block labelled anew
            labelling = launches(trace(trainer.fresh.draw)[0]) / block_steps
            counts[f"block_{block_steps}"] = {
                "update_ops": len(update),
                "update_launches": launches(update),
                "labelling_launches_per_step": labelling,
                "eager_launches_per_step": launches(update) + labelling,
                "replayed_launches_per_step": 1 + 2 + labelling,
                "syncs": syncs(update),
            }
        return counts

    def timed_run(self, protocol: Protocol, run: str, records: dict) -> dict:
        """`--steps` steps of `run` (one of RUNS); the record goes to `records` for the comparison,
        the numbers to the report."""
        graphed = run == "graphed"
        population = Population(protocol.replace(compile=run != "eager", cuda_graphs=graphed), self.device)
        stepper = Stepper(Trainer(population), self.graph_kind if graphed else None)
        started = time.perf_counter()
        record = records[run] = record_steps(stepper, self.args.steps)
        seconds = record["seconds_per_step"]
        row = {
            "ms_per_step": 1000 * seconds,
            "steps_per_s": 1 / seconds,
            "build_s": time.perf_counter() - started - (self.args.steps - TIMED_FROM) * seconds,  # compile, capture
            "minutes_for_all_steps": protocol.config.steps * seconds / 60,
        }
        if self.device.type == "cuda" and not graphed:  # graph replays are not profiled: the module docstring
            row["kernel_launches_per_step"] = self.kernel_launches_per_step(stepper)
        stepper.release()
        return row

    def kernel_launches_per_step(self, stepper: Stepper) -> float:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            for step in range(self.args.steps, self.args.steps + PROFILED_STEPS):
                stepper(step)
            synchronize(self.device)
        return sum(event.count for event in profiler.key_averages() if "LaunchKernel" in event.key) / PROFILED_STEPS

    def comparison(self, records: dict) -> dict:
        missing = [run for run in RUNS if run not in records]
        if missing:
            raise RuntimeError(f"no record of {', '.join(missing)} to compare: see that variant above")
        return compare_replay(records["compiled"], records["graphed"], eager=records["eager"])

    def sync_check(self) -> dict:
        """Replayed steps under CUDA's sync debug mode (set to raise), from the first after the
        capture to the first of the next labelling block: every op of a replayed step and of a
        relabel."""
        stepper = Stepper(Trainer(Population(self.protocol("regimes", compile=True, cuda_graphs=True), self.device)))
        for step in range(WARMUP_STEPS + 1):
            stepper(step)
        last = stepper.trainer.fresh.steps_ahead + 1  # the steps of this block, then one that labels the next
        torch.cuda.set_sync_debug_mode("error")
        try:
            for step in range(WARMUP_STEPS + 1, last + 1):
                stepper(step)
            synchronize(self.device)
        finally:
            torch.cuda.set_sync_debug_mode(0)
            stepper.release()
        return {"replay_without_host_sync": True, "steps_checked": [WARMUP_STEPS + 1, last], "relabels_crossed": 1}

    def paper_costs(self) -> dict:
        """What a paper-scale run of regimes pays once, whatever its length: its reference
        population tested (the untrained discretised students, uncompiled), the evaluation's
        compile, and one evaluation after it (a run has as many at any length)."""
        population = Population(self.protocol("regimes", compile=True), self.device)
        return {
            "reference_s": self.seconds_of(population.reference_losses),
            "evaluation_compile_s": self.seconds_of(population.test_losses),
            "evaluation_s": self.seconds_of(population.test_losses),
        }

    def seconds_of(self, function) -> float:
        started = time.perf_counter()
        function()
        synchronize(self.device)
        return time.perf_counter() - started

    def paper_regimes(self) -> dict:
        """regimes at the paper's scale through the engine, with the graph only where regimes'
        comparison passed, for as many steps as fit the budget left: its fixed costs first (the
        compile phase 1 measured from a fresh state, the capture where the graph runs, and
        `paper_costs`), then phase 1's step time. Projected to all the paper's steps by adding the
        steps left at that step time."""
        sweep, costs = self.report["sweeps"]["regimes"], self.report["phases"]["paper_costs"]
        graphs = sweep.get("comparison", {}).get("passed") is True
        compiled, timing = sweep.get("compiled", {}), sweep.get("graphed" if graphs else "compiled", {})
        if not ("ms_per_step" in compiled and "ms_per_step" in timing and "reference_s" in costs):
            raise RuntimeError("nothing measured to size the run with: see regimes' runs and paper_costs")
        protocol = self.protocol("regimes", compile=True, cuda_graphs=graphs)
        config, step_s = protocol.config, timing["ms_per_step"] / 1000
        build_s = compiled["build_s"] + (timing["build_s"] if graphs else 0)  # the graphed run reused the compile
        fixed_s = (
            build_s + costs["reference_s"] + costs["evaluation_compile_s"] + (config.evals + 2) * costs["evaluation_s"]
        )  # evaluation_steps: `evals`, the 90 % and the last
        fit = int((self.budgeted.left() - PAPER_MARGIN_S - fixed_s) / step_s)
        steps = min(fit, config.steps, self.args.steps if self.args.toy else config.steps)
        if steps < min(100, self.args.steps):
            raise RuntimeError(f"only {steps} steps fit the budget left after {fixed_s:.0f} s of fixed costs")
        torch._dynamo.reset()  # compiled as a run is: paper_costs compiled the evaluation's shapes first
        started = time.perf_counter()
        trained = train(protocol.replace(steps=steps))
        wall = time.perf_counter() - started
        return {
            "cuda_graphs": graphs,
            "steps": steps,
            "estimated_s": fixed_s + steps * step_s,
            "wall_s": wall,
            "split_s": trained.seconds,
            "paper_steps": config.steps,
            "minutes_for_all_steps": (wall + (config.steps - steps) * step_s) / 60,
        }


if __name__ == "__main__":
    GraphCheck(parse_args()).run()
