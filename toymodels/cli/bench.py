"""`toymodels bench`: the training engine timed against the usual loop and the matmul ceiling."""

import json

import click

from ..config import PRECISIONS, paper_temperatures
from ..models.losses import LOSSES
from ..performance.bench import BENCH_SWEEPS, bench_config, benchmark, format_benchmark
from .options import CommaList, field_help


@click.command()
@click.option(
    "--sweep",
    type=click.Choice(list(BENCH_SWEEPS)),
    default="paper",
    show_default=True,
    help="paper: 16 T × depths 6, 12, 24, batch 1024, KL; cpu-kl: fig3b at cpu scale (4 T × depths "
    "2–16 × 3 teachers, batch 256); tiny: 2 MSE students, depths 1, 2, batch 16. The options "
    "below change it.",
)
@click.option("--depths", type=CommaList(int, "depth"), help="Student depths [default: the sweep's].")
@click.option(
    "--temperature-count",
    type=click.IntRange(min=1),
    help="Number of temperatures, logspace(−2, 0) [default: the sweep's].",
)
@click.option("--loss", help=f"{', '.join(LOSSES)}; your own as file.py:NAME [default: the sweep's].")
@click.option("--batch", type=click.IntRange(min=1), help="Batch size [default: the sweep's].")
@click.option(
    "--steps", type=click.IntRange(min=1), default=100, show_default=True, help="Timed steps of the population engine."
)
@click.option(
    "--baseline-steps",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Timed steps of each student in the baseline loop.",
)
@click.option("--device", default="auto", show_default=True)
@click.option(
    "--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True, help=field_help("precision")
)
@click.option("--compile", "compile_step", is_flag=True, help="Also time the population with torch.compile.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    help="Also time the sweep cut into this many jobs on worker processes [default: one per core on "
    "the CPU; 1, no such row, on a GPU].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def bench(
    sweep, depths, temperature_count, loss, batch, steps, baseline_steps, device, precision, compile_step, jobs, as_json
):
    """Time the population engine (in this process, and cut into jobs on worker processes)
    against students trained one at a time (the usual loop) and against the sweep's matmuls
    alone (the ceiling), and measure the machine's fp32 matmul peak in the same run."""
    config = bench_config(
        sweep,
        depths=depths,
        loss=loss,
        batch=batch,
        device=device,
        precision=precision,
        temperatures=paper_temperatures(temperature_count) if temperature_count else None,
    )
    result = benchmark(config, steps, baseline_steps, compile_step, jobs)
    click.echo(json.dumps(result, indent=2) if as_json else format_benchmark(result))
