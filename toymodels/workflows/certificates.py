"""The budget certificate of a run whose polish ran twice (`budget_doubling`): per student its
polished and doubled losses, the move between them and the test set's noise; a student the doubled
budget moved beyond its noise (and a margin) is not budget-certified, and its α is a lower bound."""

import pandas as pd

from ..analysis.diagnostics import load_students, test_loss_noise
from ..columns import SLOT, STUDENT
from ..errors import ToymodelsError
from ..results.storage import RunFolder
from .polish import DOUBLED_START, POLISHED_START, SECOND_DESCENTS, polish_folder

DOUBLING_MARGIN = 0.05  # beyond the test set's noise: a doubled budget moving a loss more, it is not budget-certified


def budget_table(metrics: pd.DataFrame, noise: pd.DataFrame) -> pd.DataFrame:
    """Per student (SLOT): its polished and doubled losses, the move (doubled / polished − 1), its
    test set's relative noise (`noise`: SLOT and `relative_noise`) and whether it is
    budget-certified: |move| ≤ noise + DOUBLING_MARGIN. One not certified has its best loss below both."""
    last = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
    losses = {start: last[last.start == start].set_index(SLOT).test_loss for start in SECOND_DESCENTS}
    table = pd.DataFrame({"polished_loss": losses[POLISHED_START], "doubled_loss": losses[DOUBLED_START]})
    table = table.reset_index().merge(noise[SLOT + ["relative_noise"]], on=SLOT, how="left")
    table["move"] = table.doubled_loss / table.polished_loss - 1
    table["budget_certified"] = table.move.abs() <= table.relative_noise + DOUBLING_MARGIN
    return table


def budget_lines(budget: pd.DataFrame) -> str:
    """What the doubled polish says, per (teacher, temperature): how many students it certified,
    which moved further and by how much, and α without and with it."""
    lines = []
    for (teacher, temperature), rows in budget.groupby(["teacher", "temperature"], dropna=False):
        group = teacher if pd.isna(temperature) else f"{teacher} T={temperature:g}"
        several = rows.replicate.nunique() > 1  # then each student is named by its replicate too
        moved = ", ".join(
            f"ℓ={row.depth}{f' r{row.replicate}' if several else ''} {row.move:+.0%}"
            for row in rows[~rows.budget_certified].sort_values(["depth", "replicate"]).itertuples()
        )
        lines.append(
            f"budget doubling, {group}: {rows.budget_certified.sum()}/{len(rows)} students budget-certified "
            f"(moved ≤ test noise + {DOUBLING_MARGIN:.0%})"
            + (f", moved further at {moved}" if moved else "")
            + f"; α {rows.alpha_polished.iloc[0]:.2f} from the polish, "
            f"{rows.alpha_doubled.iloc[0]:.2f} with the doubled budget"
        )
    return "\n".join(lines)


def budget_noise(folder: RunFolder) -> pd.DataFrame:
    """Each doubled student's test-set noise (SLOT and `relative_noise`): measured on the students of
    the run's doubled polish, or as its budget certificate recorded it (a joined run keeps no students)."""
    doubled = polish_folder(folder, DOUBLED_START)
    if doubled.is_dir():
        return test_loss_noise(load_students(RunFolder.open(doubled)))
    if (folder.path / RunFolder.BUDGET_CSV).is_file():
        return folder.budget_certificate()[[*SLOT, "relative_noise"]]
    raise ToymodelsError(
        f"{folder.path} keeps neither its doubled polish ({doubled}) nor its {RunFolder.BUDGET_CSV}: its "
        f"budget certificate cannot be measured; run it again with its students kept"
    )
