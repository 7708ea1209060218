"""A certificate is a claim about every later run, and a later run can withdraw it.

A run certifies a student from what it can see: its own curve flattened, no start it raced and not
the teacher's own discretisation did better (certification.certify), and, where the polish ran twice, the
doubled budget did not move it. It cannot see a run that trains the same student longer, under
another schedule or from another start. So a certified student is *withdrawn* when any other run of
the same teacher instance (teacher, seed, replicate, teacher depth, width), student architecture,
loss, temperature and depth ended below it by more than WITHDRAWAL_MARGIN plus the test noise
(NOISE_ALLOWANCE); its fit is then a lower bound like any uncertified one. The runs are compared
on their own test sets: the allowance is twice the relative standard error of a test loss at the
smallest test set the suite's committed runs use (10 240 samples: ≈ 1 %, results/noise.py).
"""

import numpy as np
import pandas as pd

from .depth_fit import DepthFit

WITHDRAWAL_MARGIN = 0.05  # beyond the noise, as the budget certificate's margin (workflows/certificates.py)
NOISE_ALLOWANCE = 0.02  # two standard errors of a test loss on 10 240 samples
SAME_STUDENT = ("teacher", "temperature", "replicate", "depth", "student", "loss", "teacher_depth", "width", "seed")


def student_rows(run: str, fits: list[DepthFit], protocol: dict) -> pd.DataFrame:
    """Every student of a run's fits, one row each: the run's label, what makes it the same student
    in another run (SAME_STUDENT; a missing temperature as −1 so that it matches), its final test
    loss, and whether its fit certified it (`certified`: fitted in a converged fit)."""
    rows = [
        {
            "run": run,
            "teacher": fit.teacher,
            "temperature": -1.0 if np.isnan(fit.temperature) else fit.temperature,
            "replicate": student["replicate"],
            "depth": student["depth"],
            "test_loss": student["test_loss"],
            "certified": bool(fit.certified and student.get("fitted")),
            **{key: protocol.get(key) for key in SAME_STUDENT[4:]},
        }
        for fit in fits
        for student in fit.students
        if student.get("test_loss") is not None
    ]
    return pd.DataFrame(rows, columns=["run", *SAME_STUDENT, "test_loss", "certified"])


def withdrawals(students: pd.DataFrame) -> pd.DataFrame:
    """Per certified student of `students` (student_rows of many runs) that another run went below by
    more than WITHDRAWAL_MARGIN + NOISE_ALLOWANCE: its run and keys, its loss, the lowest loss another
    run reached (`below_loss`, `below_run`) and by how much it sits above it (`above_by`: its loss
    over that one − 1). Empty where every certificate stands."""
    certified = students[students.certified]
    others = students.merge(
        certified[["run", *SAME_STUDENT]].drop_duplicates(), on=list(SAME_STUDENT), suffixes=("", "_certified")
    )
    others = others[others.run != others.run_certified]
    lowest = others.loc[others.groupby(["run_certified", *SAME_STUDENT]).test_loss.idxmin()]
    lowest = lowest.rename(columns={"run": "below_run", "test_loss": "below_loss", "run_certified": "run"})
    table = certified.merge(lowest[["run", *SAME_STUDENT, "below_run", "below_loss"]], on=["run", *SAME_STUDENT])
    table["above_by"] = table.test_loss / table.below_loss - 1
    withdrawn = table[table.above_by > WITHDRAWAL_MARGIN + NOISE_ALLOWANCE]
    return withdrawn.drop(columns="certified").sort_values(["run", "teacher", "depth", "replicate"], ignore_index=True)


def withdrawn_groups(table: pd.DataFrame, run: str) -> dict[tuple, pd.DataFrame]:
    """The withdrawals of `run`, per fit group (teacher, temperature as DepthFit.group gives it)."""
    mine = table[table.run == run]
    return {
        (teacher, None if temperature == -1.0 else temperature): rows
        for (teacher, temperature), rows in mine.groupby(["teacher", "temperature"])
    }


def withdrawal_text(rows: pd.DataFrame) -> str:
    """`ℓ 12 68 % above ladder_tied_r0_x8/cpu/rung_x8 (5.98e-04 → 3.57e-04), …`, deepest last."""
    return ", ".join(
        f"ℓ {row.depth}{f' r{row.replicate}' if rows.replicate.nunique() > 1 else ''} "
        f"{row.above_by:.0%} above {row.below_run} ({row.test_loss:.2e} → {row.below_loss:.2e})"
        for row in rows.sort_values(["depth", "replicate"]).itertuples()
    )
