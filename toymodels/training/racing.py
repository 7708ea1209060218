"""Racing starts: a start that has fallen clearly behind the leading start of the same student,
and cannot catch up within the budget at its recent rate, stops training.

Every student (teacher instance, temperature, depth) trains from several starts, and the
certificate is the best of them. The start that loses usually loses by a wide margin (a tied
teacher's zero start ends 20–300 % above its discretised start) and trains longest: it cost most
of the committed sweeps' student work and set their wall time. The rule, judged at every
evaluation from the run's own tidy history (so a replay on a committed metrics table is the rule
itself, not a model of it):

- the leader of a student is its start with the lowest test loss so far; starts race only once
  the leader has converged, its loss final (until then a start with decays left can still drop
  far: a KL zero start 290 % behind a trained start that converged at step 2 500 won by step
  16 500); the leader never stops early;
- a start is *behind* at an evaluation when its test loss is more than `margin` above the
  leader's, and stays so when its recent log–log rate of improvement, −Δlog L/Δlog step over its
  last two evaluations, is carried on to the end of the budget: L(budget) = L·(budget/step)^(−rate);
- a start behind at IN_A_ROW evaluations in a row, from `from_step` on, stops. Starts within the
  margin train on to convergence, so where two unrelated starts agree, the agreement is in the
  certificate.

`findings/race_replay.py` replays the rule on every committed run: it moves no certified loss
and no α at all there, and saves 9–62 % of the student work.

A start that stops keeps its weights and its last evaluation, marked `stopped_at_step` with its
gap to the leader then (`behind_by`); the fit reports it. Stopping one start changes no other
student's numbers (each student has its own rate, data and Adam state), so a replay on a
committed run gives exactly what a racing run would have recorded.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..columns import SLOT, STUDENT, with_race_columns

IN_A_ROW = 2  # evaluations a start must be behind at: one noisy evaluation never stops it


@dataclass(frozen=True)
class RaceRule:
    budget: int  # steps: the horizon a start must catch up within
    margin: float = 0.5  # behind: more than this fraction above the leader
    from_step: int = 3000  # no start is judged before: a KL zero start still catches up from 290 % behind at 2 577

    @classmethod
    def of(cls, config) -> "RaceRule | None":
        """The rule of a sweep config; None where starts do not race (off, one start, or a fixed
        number of steps instead of training to convergence)."""
        if not (config.race and config.converge and len(config.starts) > 1):
            return None
        return cls(config.steps, config.race_margin, config.race_from_step)

    def behind(self, history: pd.DataFrame, step: int) -> pd.DataFrame:
        """The starts that stop at the evaluation `step`: the rows (STUDENT keys, and `behind_by`,
        the test loss over the leader's − 1) of starts still training at `step` and behind at
        their last IN_A_ROW evaluations, from `from_step` on."""
        stopping = self._judge(history, step)
        steps = sorted(history.step.unique())
        for earlier in steps[-IN_A_ROW:-1]:
            if stopping.empty:
                break
            again = self._judge(history[history.step <= earlier], None)
            stopping = stopping.merge(again[STUDENT], on=STUDENT)
        return stopping

    def _judge(self, history: pd.DataFrame, step: int | None) -> pd.DataFrame:
        """The starts behind at `step` (None: at each start's last evaluation in `history`)."""
        rows = history.sort_values("step", kind="stable")
        latest = rows.groupby(STUDENT, dropna=False).tail(1)
        # the leader of each student: its start with the lowest last loss, of those not diverged;
        # judged against only once it has converged, its loss final
        alive = latest[np.isfinite(latest.test_loss)]
        leaders = alive.loc[alive.groupby(SLOT, dropna=False).test_loss.idxmin()]
        leaders = leaders[leaders.converged_at_step.notna()]
        leader = leaders[[*SLOT, "test_loss"]].rename(columns={"test_loss": "leader"})
        judged = latest[_still_training(latest) & (latest.step >= self.from_step)]
        if step is not None:
            judged = judged[judged.step == step]
        judged = judged.merge(leader, on=SLOT).merge(_before_last(rows, judged), on=STUDENT)
        # the log–log rate of the last two evaluations, carried on to the end of the budget
        rate = (np.log(judged.previous_loss / judged.test_loss) / np.log(judged.step / judged.previous_step)).clip(0)
        projected = judged.test_loss * (self.budget / judged.step) ** -rate
        behind = judged[(judged.test_loss > (1 + self.margin) * judged.leader) & (projected > judged.leader)]
        return behind.assign(behind_by=behind.test_loss / behind.leader - 1)[[*STUDENT, "behind_by"]]


def _still_training(rows: pd.DataFrame) -> pd.Series:
    """Rows of students that had neither converged, diverged nor stopped by then."""
    training = pd.Series(True, rows.index)
    for mark in ("converged_at_step", "diverged_at_step", "stopped_at_step"):
        if mark in rows:
            training &= rows[mark].isna()
    return training & np.isfinite(rows.test_loss)


def _before_last(rows: pd.DataFrame, judged: pd.DataFrame) -> pd.DataFrame:
    """Each judged student's evaluation before its last: (STUDENT, previous_step, previous_loss)."""
    mine = rows.merge(judged[STUDENT].assign(last=judged.step.to_numpy()), on=STUDENT)
    earlier = mine[mine.step < mine["last"]].groupby(STUDENT, dropna=False).tail(1)
    return earlier[[*STUDENT, "step", "test_loss"]].rename(
        columns={"step": "previous_step", "test_loss": "previous_loss"}
    )


def mark_stopped(history: pd.DataFrame, stopping: pd.DataFrame, step: int) -> pd.DataFrame:
    """`history` with the starts in `stopping` (`RaceRule.behind` at `step`) stopped there: their
    row at `step` marked `stopped_at_step` and `behind_by`, their later rows (a replay's) dropped."""
    history = with_race_columns(history)
    ours = student_index(history).isin(student_index(stopping))
    history = history[~(ours & (history.step > step).to_numpy())].reset_index(drop=True)
    gaps = stopping.set_index(student_index(stopping)).behind_by
    at = student_index(history).isin(gaps.index) & (history.step == step).to_numpy()
    history.loc[at, "stopped_at_step"] = step
    history.loc[at, "behind_by"] = gaps.reindex(student_index(history[at])).to_numpy(float)
    return history


def student_index(frame: pd.DataFrame) -> pd.MultiIndex:
    """The STUDENT keys of each row (a loss without temperature has NaN there: matched as -1)."""
    return pd.MultiIndex.from_frame(frame[STUDENT].fillna({"temperature": -1.0}))


@dataclass(frozen=True)
class Replay:
    """A committed run's metrics as a racing run would have recorded them."""

    metrics: pd.DataFrame  # the rows kept, stopped starts marked
    stopped: pd.DataFrame  # STUDENT keys, step, behind_by


def replay(metrics: pd.DataFrame, rule: RaceRule) -> Replay:
    """Apply `rule` at every evaluation of a run that did not race, in order, as the engine does."""
    kept, stopped = with_race_columns(metrics), []
    for step in sorted(metrics.step.unique()):
        stopping = rule.behind(kept[kept.step <= step], step)
        if not stopping.empty:
            stopped.append(stopping.assign(step=step))
            kept = mark_stopped(kept, stopping, step)
    stopped = (
        pd.concat(stopped, ignore_index=True) if stopped else pd.DataFrame(columns=[*STUDENT, "behind_by", "step"])
    )
    return Replay(kept, stopped)
