"""The verdict table of the paper's ≈ 3 on its tied teacher (paper_depths' first replicate): per depth,
the test loss of each kind of student with the coherence C and the alignment of its layer errors
(even slots, as the read-out sees them, `toymodels layer-errors`), then α per kind with a 95 %
interval from the regression over depths (one teacher: no replicates to take a t over) and the
local slopes.

    python findings/verdict_table.py [RESULTS_DIR]   # default figures/

Kinds: certified (the best of the zero and discretised starts, before the polish) and polished
from paper_depths_polished; doubled (the polish again with twice its budget) from
paper_depths_doubled where run; the paper's loop at
its own budget (80 000 × 1024, zero start) from paper_budget and paper_budget_deep where run; the
paper's loop at 40 000 steps from paper_loop (no saved students: no C); and the same kinds on
paper_depths' second and third tied teachers, from the final protocol's parts paper_depths_tied_r1
and _r2, where run.
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

results = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("figures")


def last_losses(name: str, replicate: int) -> pd.DataFrame:
    """Each (depth, start)'s last test loss of the run's tied teacher `replicate`."""
    path = results / name / "cpu" / "metrics.csv"
    if not path.is_file():
        return pd.DataFrame(columns=["depth", "start", "test_loss"])
    metrics = pd.read_csv(path).query("teacher == 'tied' and replicate == @replicate")
    last = metrics[metrics.step == metrics.groupby(["depth", "start"]).step.transform("max")]
    return last[["depth", "start", "test_loss"]]


def coherences(name: str, replicate: int) -> pd.DataFrame:
    path = results / name / "cpu" / "layer_errors" / "coherence.csv"
    if not path.is_file():
        return pd.DataFrame(columns=["depth", "start", "coherence", "alignment"])
    table = pd.read_csv(path).query(
        "teacher == 'tied' and replicate == @replicate and training == 'trained' and "
        "slots == 'even' and space == 'readout'"
    )
    return table[["depth", "start", "coherence", "alignment"]]


def kind(name: str, starts: list[str], label: str, replicate: int = 0) -> pd.DataFrame:
    """The best of `starts` at each depth of run `name` (its tied teacher `replicate`), with its C and alignment."""
    losses = last_losses(name, replicate)
    losses = losses[losses.start.isin(starts)]
    best = losses.loc[losses.groupby("depth").test_loss.idxmin()] if len(losses) else losses
    return best.merge(coherences(name, replicate), on=["depth", "start"], how="left").assign(kind=label)


kinds = pd.concat(
    [
        kind("paper_depths_polished", ["zero", "discretised"], "certified"),
        kind("paper_depths_polished", ["polished"], "polished"),
        kind("paper_depths_doubled", ["doubled"], "doubled"),
        kind("paper_budget", ["zero"], "paper loop 80k"),
        kind("paper_budget_deep", ["zero"], "paper loop 80k"),
        kind("paper_loop", ["zero"], "paper loop 40k"),
        *(
            kind(f"paper_depths_tied_r{r}", starts, f"{label}, teacher {r + 1}", r)  # the final protocol's other parts
            for r in (1, 2)
            for starts, label in (
                (["zero", "discretised"], "certified"),
                (["polished"], "polished"),
                (["doubled"], "doubled"),
            )
        ),
    ],
    ignore_index=True,
)

pd.set_option("display.width", 200)
cells = kinds.assign(
    cell=[
        f"{row.test_loss:.3g}" + ("" if pd.isna(row.coherence) else f" (C {row.coherence:.2g}, al {row.alignment:.2g})")
        for row in kinds.itertuples()
    ]
)
print(cells.pivot(index="depth", columns="kind", values="cell").fillna("—").to_string())
print()
for label, rows in kinds.groupby("kind", sort=False):
    rows = rows.sort_values("depth")
    x, y = np.log(rows.depth.to_numpy(float)), np.log(rows.test_loss.to_numpy(float))
    if len(rows) < 3:
        continue
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.975, len(rows) - 2) * fit.stderr
    slopes = -np.diff(y) / np.diff(x)
    print(
        f"{label:<15} ℓ {rows.depth.min()}–{rows.depth.max()}: α {-fit.slope:.2f} [{-fit.slope - half:.2f}, "
        f"{-fit.slope + half:.2f}]  local slopes {', '.join(f'{s:.2f}' for s in slopes)}"
    )
