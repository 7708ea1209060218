"""`toymodels diagnose`, `ladder` and `layer-errors`: what a run's saved students show, each as
tidy tables and a figure in the run's folder, and a summary printed."""

import sys

import click

from .. import api


@click.command()
@click.argument("run_dir", type=click.Path())
@click.option(
    "--samples",
    type=click.IntRange(min=8),
    default=1024,
    show_default=True,
    help="Test inputs the hidden states are measured on.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the per-network summary as JSON.")
def diagnose(run_dir, samples, as_json):
    """Hidden-state diagnostics of a run's teachers and trained students: rotations, update
    angles, angle to the end, progress, angular distances, trajectory groups, N_eff, and the test
    loss with layers removed. Writes tidy tables and figures to RUN_DIR/diagnostics."""
    folder = api.RunFolder.open(run_dir)
    tables = api.diagnose_run(folder.path, samples, progress=sys.stderr.isatty())
    caption = api.protocol_line(api.run_protocol(folder))
    written = saved_analysis(folder, "diagnostics", tables, lambda out: api.plot_diagnostics(tables, caption, out))
    echo_analysis(api.diagnostics_summary(tables["networks"]), as_json, written)


def saved_analysis(folder, subfolder: str, tables: dict, draw) -> str:
    """An analysis' tables written to RUN_DIR/`subfolder` and its figures drawn there (`draw(out)`);
    where every table is already there byte for byte and its figures are drawn, nothing is written
    (a committed run stays as committed). Returns the line that says what was written."""
    out, changed = folder.save_tables(subfolder, tables)
    if not changed and any(out.glob("*.png")):
        return f"tables and figures in {out}: unchanged, nothing written"
    return f"tables and {len(draw(out))} figure files in {out}"


def echo_analysis(table, as_json: bool, written: str) -> None:
    """An analysis' summary table: as JSON records, or as text followed by the line saying what it wrote."""
    if as_json:
        click.echo(table.to_json(orient="records", indent=2))
        return
    click.echo(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    click.echo(written)


@click.command("ladder")
@click.argument("run_dir", type=click.Path())
@click.option(
    "--repeat",
    type=click.Path(file_okay=False),
    help="A run of the same protocol made again (its ladder made): every rung's noise then carries the "
    "run-to-run spread the two show.",
)
def ladder(run_dir, repeat):
    """The budget ladder of a run trained with --budget-rungs (e.g. 2,4,8): its last stage at ×1,
    ×2, ×4, … the budget from the same start. Per student: its losses, a convergence ratio for every
    three neighbouring rungs (r_x8 = (L(×4) − L(×8)) / (L(×2) − L(×4))) and, where the last two
    ratios agree within their 95 % intervals and the moves shrink to a tail above zero, the
    converged loss L∞ = L(last) − d·r/(1 − r) with a 95 % interval that carries the test noise and
    the spread of r; else "not extrapolable" with the reason, and L(last) is only an upper bound.
    Then, at each rung and at ∞, the log–log α, the exponent p in the step mismatch 1/ℓ − 1/ℓ* and
    the slope of the loss over the untrained Euler rule's, over the run's depth window, every window
    of extrapolable depths and between neighbouring depths, with 95 % intervals. Then α∞ and p∞ by
    three tail models (the geometric tail above, L∞ + A·B^−β fitted to the last four rungs, and the
    α series itself extrapolated), each judged by a χ² against the rungs' paired test noise, and the
    span of those that pass; where none passes, the last rung's α is a lower bound. And L(12)/L(24)
    at every rung with the p it implies. Writes ladder.csv, ladder_exponents.csv, ladder_tails.csv,
    ladder_ratios.csv, ladder.txt and a figure to RUN_DIR/ladder. A ladder grown by a rung after its
    students were deleted keeps its earlier rungs from its ladder.csv. A joined run (`toymodels
    join`) joins its parts' ladders, each made first."""
    folder = api.RunFolder.open(run_dir)
    tables = api.budget_ladder(folder.path, repeat)  # raises, before anything is written, where a rung is missing
    parts = (
        api.ladder_lines(tables["ladder"], tables["ladder_exponents"]),
        api.tail_lines(tables["ladder_tails"]),
        api.ratio_lines(tables["ladder_ratios"], folder.config().teacher_depth),
    )
    text = "\n".join(part for part in parts if part)

    def draw(out):
        (out / "ladder.txt").write_text(text + "\n")
        return api.plot_ladder(tables["ladder"], api.protocol_line(api.run_protocol(folder)), out / "ladder")

    click.echo(text)
    click.echo(saved_analysis(folder, api.RunFolder.LADDER, tables, draw))


@click.command("layer-errors")
@click.argument("run_dir", type=click.Path())
@click.option(
    "--samples",
    type=click.IntRange(min=8),
    default=1024,
    show_default=True,
    help="Test inputs the errors are measured on.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the per-depth table as JSON.")
def layer_errors(run_dir, samples, as_json):
    """How each saved student's layer errors add up to its output error. Splits s_ℓ − t_ℓ* into
    each layer's local error carried to the end by the teacher's own remaining layers, with even
    slots of teacher layers and with slots that follow the student, for every start, trained and
    untrained, and the polish; on the pre-norm states and as the read-out sees them (the space
    the loss is measured in). Prints where the output error's depth exponent comes from (the
    local errors' sum, and the coherence C), then per depth C (≈ 1: independent addition, the
    paper's typical case; ≈ ℓ: aligned; ≪ 1: cancelling), its aligned bound, the alignment and the
    neighbouring layers' error cosine; writes tidy tables and a figure to RUN_DIR/layer_errors. A
    joined run (`toymodels join`) keeps no students: it joins its parts' splits, each made first."""
    folder = api.RunFolder.open(run_dir)
    tables = api.split_layer_errors(folder.path, samples)
    caption = api.protocol_line(api.run_protocol(folder))
    written = saved_analysis(
        folder,
        api.RunFolder.LAYER_ERRORS,
        tables,
        lambda out: api.plot_layer_errors(tables["coherence"], tables["error_lags"], caption, out / "layer_errors"),
    )
    if not as_json:
        click.echo(tables["error_exponents"].to_string(index=False, float_format=lambda v: f"{v:.2f}") + "\n")
    echo_analysis(api.coherence_table(tables["coherence"]), as_json, written)
