"""A run's fits: α per teacher and temperature over the run's own depth window, certified under
its protocol (and its budget certificate where its polish ran twice), written as the three files
users read (fit.txt, fit.json, fits.csv), or read as the run stood at an earlier budget."""

import dataclasses
import weakref
from pathlib import Path

import pandas as pd

from ..errors import ToymodelsError
from ..results.certification import completed
from ..results.depth_fit import DepthFit
from ..results.fitting import fit_depth_exponents
from ..results.report import fit_document, fit_window_line, fits_table, format_table
from ..results.storage import RunFolder, read_table, write_table
from ..training.protocol import Protocol
from ..training.recording import evaluation_steps
from .certificates import budget_lines, budget_noise, budget_table
from .polish import DOUBLED_START

_RESOLVED = weakref.WeakKeyDictionary()  # open folder → its protocol


def run_protocol(folder: RunFolder) -> Protocol:
    """The run's config with its names resolved (a plug-in file no longer where it was from the
    copy the run kept), once per open folder: a command that fits, tabulates and plots a run looks
    nothing up twice."""
    if folder not in _RESOLVED:
        # components from where they are now, the config as the run wrote it (pages quote its names)
        _RESOLVED[folder] = dataclasses.replace(Protocol.of(folder.runnable_config()), config=folder.config())
    return _RESOLVED[folder]


def write_fit(folder: RunFolder) -> list[DepthFit]:
    """Fit a finished run over its own depth window (`fit_window`) and write the three files users
    read, from that one fit so that they agree: fit.txt (the table `toymodels run` prints, with the
    budget certificate where the polish ran twice), fit.json (every fit in full) and fits.csv
    (`fits_table`: one tidy row per teacher and temperature). Returns the fits."""
    min_depth, window = fit_window(folder)
    budget = budget_certificate(folder) if folder.config().budget_doubling else None
    protocol, fits = fitted_run(folder, min_depth, certificate=budget)
    text = format_table(fits, protocol, folder.path, window)
    if budget is not None:
        write_table(folder.path / RunFolder.BUDGET_CSV, budget)
        text += "\n" + budget_lines(budget)
    folder.save_fit(text, fit_document(fits, protocol, min_depth), fits_table(fits, vars(protocol.config), min_depth))
    return fits


def budget_certificate(folder: RunFolder) -> pd.DataFrame:
    """The budget certificate of a run whose polish ran twice (`budget_doubling`): per student its
    polished and doubled losses, the move, the test set's noise and whether it is budget-certified
    (certificates.budget_table), with the α of its (teacher, temperature) fitted without the doubled
    polish (`alpha_polished`) and with it (`alpha_doubled`, the best of every start)."""
    metrics, protocol = folder.metrics(), run_protocol(folder)
    table = budget_table(metrics, budget_noise(folder))
    for column, rows in (("alpha_polished", metrics[metrics.start != DOUBLED_START]), ("alpha_doubled", metrics)):
        alphas = {fit.group: fit.alpha for fit in fit_metrics(rows, protocol, fit_window(folder)[0])}
        table[column] = [
            alphas.get((row.teacher, None if pd.isna(row.temperature) else row.temperature))
            for row in table.itertuples()
        ]
    return table


def load_fits(path) -> pd.DataFrame:
    """The fits of a run as a DataFrame (its fits.csv, `fits_table`): `path` is a run folder, a
    committed results folder (figures/NAME/SCALE) or the fits.csv itself."""
    path = Path(path)
    table = path / RunFolder.FITS_CSV if path.is_dir() else path
    if not table.is_file():
        raise ToymodelsError(
            f"{path} has no {RunFolder.FITS_CSV}: fit the run with `toymodels fit {path}`, or it "
            f"predates the file (`toymodels run --resume {path}` writes it)"
        )
    return read_table(table, f"`toymodels fit {table.parent}` writes it again from the run's metrics.csv")


def fit_metrics(
    metrics, protocol: Protocol, min_depth=1, max_depth=None, budget: pd.DataFrame | None = None
) -> list[DepthFit]:
    """α per (teacher, temperature) of a run's metrics, certified under the run's protocol: its
    teacher depth ℓ* gives the step-mismatch fit, its students' integrator order the regime
    boundary, its samples (a pool, or fresh) whether test/train can withhold a certificate;
    `budget` (its budget certificate, `certificates.budget_table`) withholds it where a doubled budget
    moved a loss."""
    config = protocol.config
    return fit_depth_exponents(
        metrics,
        min_depth,
        max_depth,
        teacher_depth=config.teacher_depth,
        order=protocol.architecture.order,
        reused_samples=bool(config.teacher_pool),
        budget=budget,
    )


def fit_run(path, min_depth=None, max_depth=None, budget: int | None = None) -> list[DepthFit]:
    """α per (teacher, temperature) of the run in folder `path` (a path or an open `RunFolder`),
    over depths ≥ `min_depth` (default: the run's own window, `RunFolder.fit_min_depth`); with
    `budget`, of the run read as stopped there (`run_at_budget`)."""
    return fitted_run(RunFolder.open(path), min_depth, max_depth, budget)[1]


def fit_window(folder: RunFolder, min_depth: int | None = None, max_depth: int | None = None) -> tuple[int, str]:
    """The smallest depth to fit, the run's own window (`RunFolder.fit_min_depth`) unless
    `min_depth` says otherwise, and the line a table prints to say which window it read."""
    if min_depth is not None:
        return min_depth, fit_window_line(min_depth, max_depth, "--min-depth")
    experiment = folder.experiment().get("name", "its")
    own = folder.fit_min_depth()
    return own, fit_window_line(
        own, max_depth, f"the {experiment} experiment's, from experiment.json; --min-depth overrides"
    )


def fitted_run(
    folder: RunFolder,
    min_depth=None,
    max_depth=None,
    budget: int | None = None,
    certificate: pd.DataFrame | None = None,
) -> tuple[Protocol, list[DepthFit]]:
    """The protocol an open run is read under (its own, or capped at `budget`) and its fits (over
    the run's own depth window unless `min_depth` is given). Where the run's doubled polish has
    merged, its budget certificate (`certificate`, else measured: `certificates.budget_table`) withholds
    the certificate of every student the doubled budget moved."""
    protocol, metrics = run_at_budget(folder, budget)
    min_depth = fit_window(folder, min_depth, max_depth)[0]
    if DOUBLED_START not in set(metrics.get("start", ())):
        certificate = None
    elif certificate is None:
        certificate = budget_table(metrics, budget_noise(folder))
    return protocol, fit_metrics(completed(metrics, protocol.config.steps), protocol, min_depth, max_depth, certificate)


def run_at_budget(folder: RunFolder, budget: int | None = None) -> tuple[Protocol, pd.DataFrame]:
    """A run's protocol and metrics, or with `budget` (one of its evaluation steps) those of the run
    as it stood there: what the same run with that budget gives, since a budget only caps training
    (rows after it dropped; students still training there capped, not converged). A long run
    stopped early is read so, never with its unfinished students left out."""
    protocol, metrics = run_protocol(folder), folder.metrics()
    if budget is None:
        return protocol, metrics
    config = protocol.config
    evaluations = evaluation_steps(config.steps, config.evals)
    if budget not in evaluations:  # where every student still training has a row
        nearest = [step for step in evaluations if step < budget][-1:] + [
            step for step in evaluations if step > budget
        ][:1]
        raise ToymodelsError(
            f"budget {budget} is not an evaluation step of {folder.path}; the nearest: {', '.join(map(str, nearest))}"
        )
    behind = [name for name in folder.unfinished_jobs() if folder.job(name).progress() < budget]
    if behind:
        raise ToymodelsError(f"{folder.path}: job(s) {', '.join(behind)} have not reached step {budget} yet")
    return protocol.replace(steps=budget), metrics[metrics.step <= budget]
