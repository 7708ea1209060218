"""A check that must leave a result whatever happens to it, as the one call of a GPU loan must
(benchmarks/graph_check.py): its parts, the variants, run against a time budget, and each records
what it measured, the error it raised (with the errors behind it) or why it was skipped. The report
is written as strict JSON after every variant, in a `finally` that a failing cleanup cannot skip:
after a sticky CUDA error (an illegal access, a device assert) every later CUDA call raises again,
the cleanup's `torch.cuda.empty_cache()` among them.
"""

import json
import math
import time
import traceback
from pathlib import Path

TRACEBACK_CHARS = 3000  # kept from each end of a longer traceback


def one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def describe_error(error: BaseException) -> dict:
    """`error` in one line; the errors it was raised from or while handling (`__cause__`,
    `__context__`), the nearest first: an op that fails inside a CUDA graph's capture makes the
    capture's end raise a second error, whose context is the real one; and its traceback, which
    prints the first error first, kept at both ends where it is long."""
    chain, behind = [], error
    while (behind := behind.__cause__ or (None if behind.__suppress_context__ else behind.__context__)) is not None:
        if any(behind is seen for seen in (error, *chain)):  # a cycle: each error once
            break
        chain.append(behind)
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if len(text) > 2 * TRACEBACK_CHARS:
        text = (
            f"{text[:TRACEBACK_CHARS]}\n[… {len(text) - 2 * TRACEBACK_CHARS} characters left out …]\n"
            f"{text[-TRACEBACK_CHARS:]}"
        )
    return {"error": one_line(error), "raised_while": [one_line(cause) for cause in chain], "traceback": text}


def strict(value):
    """`value` with each NaN and infinity as a string ("nan", "inf"): strict JSON has no number for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(item) for item in value]
    return value


class BudgetedReport:
    """`report`, written to `path` as strict JSON by `write()`, and the variants that fill it,
    against `budget_s` seconds counted from `began` (a `time.perf_counter()`). `cleanup(label)`
    runs after each variant, whatever it did (graph_check: the device's cached memory freed)."""

    def __init__(self, path: Path, budget_s: float, began: float, cleanup, **header):
        self.path, self.budget_s, self.began, self.cleanup = path, budget_s, began, cleanup
        self.report = {**header, "budget_s": budget_s}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.began)

    def write(self) -> None:
        self.report["seconds"] = round(time.perf_counter() - self.began, 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # default=str: a value JSON cannot hold is written as text rather than losing the report
        self.path.write_text(json.dumps(strict(self.report), indent=2, allow_nan=False, default=str))

    def variant(self, where: dict, label: str, need_s: float, measure) -> None:
        """`where[name]` (the last part of `label`) = what `measure()` returns, with the seconds it
        took; or the error it raised; or why it was skipped: less budget left than `need_s`. An
        interrupt (Ctrl-C, `timeout -s INT`) is recorded too, then ends the check. Written out and
        printed either way, also when the cleanup after it raises."""
        name = label.split("/")[-1]
        if self.left() < need_s:
            where[name] = {"skipped": f"{self.left():.0f} s of the budget left, it needs about {need_s:.0f}"}
            self.written(where, name, label)
            return
        started = time.perf_counter()
        try:
            where[name] = {**measure(), "seconds": round(time.perf_counter() - started, 1)}
        except BaseException as error:  # noqa: BLE001 - a failed variant is a result: record it, go on
            where[name] = {**describe_error(error), "seconds": round(time.perf_counter() - started, 1)}
            if not isinstance(error, Exception):
                raise
        finally:
            try:
                self.cleanup(label)
            except Exception as error:  # noqa: BLE001 - a sticky device error raises here again
                where[name]["cleanup_error"] = one_line(error)
            self.written(where, name, label)

    def written(self, where: dict, name: str, label: str) -> None:
        self.write()
        shown = {key: value for key, value in where[name].items() if key != "traceback"}
        print(f"{label}: {json.dumps(strict(shown), default=str)[:600]}", flush=True)
