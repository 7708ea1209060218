"""Run a certified experiment at cpu scale (or read a finished run of it), and check what it must
show (the targets of the certification issues): finished within 45 minutes on a 2-core CPU (60
for the KL temperature sweeps); every fitted student certified (flattened, gap ≤ 10 %); test/train
within 5 % for every converged student trained on a pool (on fresh samples: test − train within the
noise, `diagnostics.test_set_noise`, over the teachers' test sets, |t| ≤ 3); the independent
teacher's α within 1.0 ± 0.2 at every temperature; where a run has both teachers, the tied
teacher's α above the ensemble's interval (and ≥ 3.5 for RK2 students). Prints each check with
its measured numbers, each other α, and every student's gap; exits 1 if a check fails.

    python findings/check_certified.py regimes [OUT_DIR]   # OUT_DIR: a new folder, or a finished run
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from toymodels.analysis.diagnostics import test_set_noise
from toymodels.results.storage import RunFolder

name = sys.argv[1] if len(sys.argv) > 1 else "regimes"
out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp()) / name
subprocess.run(
    [sys.executable, "-m", "toymodels", "reproduce", name, "--scale", "cpu", "--out", str(out), "--quiet"], check=True
)
# the starts' jobs, and the polish's (its own run in polish/) where the protocol has one
done = [
    json.loads(path.read_text())
    for path in sorted(out.glob("jobs/*/done.json")) + sorted(out.glob("polish/jobs/*/done.json"))
]
minutes = sum(job.get("seconds", 0) for job in done) / 60
split = pd.DataFrame([job.get("split", {}) for job in done]).sum() / 60  # runs before the split have none
if not split.empty:
    print(
        "INFO  time split (min, of the last process of each job): "
        + ", ".join(f"{part} {value:.1f} ({value / minutes:.0%})" for part, value in split.items())
    )
document = json.loads((out / "fit.json").read_text())
protocol = document["protocol"]
budget = 60 if protocol["loss"].startswith("kl") else 45


def group(fit) -> str:
    return fit["teacher"] + ("" if fit["temperature"] is None else f" T={fit['temperature']:g}")


def alpha(fit) -> str:
    return f"α = {fit['alpha']:.2f} [{fit['alpha_low']:.2f}, {fit['alpha_high']:.2f}]"


fits = {group(fit): fit for fit in document["fits"]}
students = pd.DataFrame([{"group": name, **student} for name, fit in fits.items() for student in fit["students"]])
converged = students[students.flattened]
ratio = converged.test_loss / converged.train_loss
checks = {f"wall time {minutes:.1f} min ≤ {budget} (training, summed over jobs and resumes)": minutes <= budget}
for name in fits:
    fitted = students[(students.group == name) & students.fitted]
    checks[
        f"{name}: {fitted.certified.sum()} of {len(fitted)} fitted students certified, largest gap "
        f"{fitted.gap.max():.1%}"
    ] = bool(fitted.certified.all())
spread = f"test/train of the {len(converged)} converged students in [{ratio.min():.3f}, {ratio.max():.3f}]"
if protocol["teacher_pool"]:  # samples reused: a student that fits them tests above its training loss
    checks[f"{spread}, within 5 %"] = bool((abs(ratio - 1) <= 0.05).all())
elif (out / RunFolder.STUDENTS).is_file():  # fresh samples cannot be fitted: test − train is the noise
    noise = test_set_noise(RunFolder.open(out))
    # The students of one teacher (and T) share its test set, and so its noise: its mean z is one measurement.
    shared = noise.groupby(["teacher", "replicate", "temperature"], dropna=False).z.mean()
    t = shared.mean() / (shared.std() / len(shared) ** 0.5)
    checks[
        f"{spread}; z = (test − train) / its standard error: mean {noise.z.mean():+.2f}, sd {noise.z.std():.2f}, "
        f"over the {len(shared)} test sets t = {t:+.1f} (fresh samples: centred on 0, |t| ≤ 3)"
    ] = abs(t) <= 3
else:
    print(f"INFO  {spread}: not checked, the run kept no students to measure its test set's noise")
rk2, ensembles = protocol["student"] == "rk2", {}
for name, fit in fits.items():
    if fit["teacher"] == "independent":
        checks[f"{name}: {alpha(fit)} within 1.0 ± 0.2"] = abs(fit["alpha"] - 1) <= 0.2
        ensembles[fit["temperature"]] = fit["alpha_high"]
for name, fit in fits.items():
    if fit["teacher"] == "tied" and (fit["temperature"] in ensembles or rk2):
        low = ensembles.get(fit["temperature"], 1.0)
        checks[f"{name}: {alpha(fit)} above {low:.2f}" + (" and ≥ 3.5" if rk2 else "")] = fit["alpha_low"] > low and (
            fit["alpha"] >= 3.5 or not rk2
        )
    elif fit["teacher"] != "independent":
        print(f"INFO  {name}: {alpha(fit)}, regime {fit['regime']}")
for text, ok in checks.items():
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
print(
    students.pivot_table(index=["group", "depth"], columns="start", values="gap", aggfunc="max")
    .map("{:.1%}".format)
    .to_string()
)
print(f"results: {out}")
sys.exit(0 if all(checks.values()) else 1)
