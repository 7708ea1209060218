"""Run a certified experiment at cpu scale (or read a finished run of it), and check what it must
show (the targets of the certification issue): finished within 45 minutes on a 2-core CPU; every
fitted student certified (flattened, gap ≤ 10 %); test/train within 5 % for every converged
student; the independent teacher's α within 1.0 ± 0.2; the tied teacher's α above the ensemble's
interval (and ≥ 3.5 for RK2 students). Prints each check with its measured numbers and every
student's gap; exits 1 if a check fails.

    python benchmarks/check_certified.py regimes [OUT_DIR]   # OUT_DIR: a new folder, or a finished run
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

name = sys.argv[1] if len(sys.argv) > 1 else "regimes"
out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp()) / name
subprocess.run([sys.executable, "-m", "toymodels", "reproduce", name, "--scale", "cpu", "--out", str(out), "--quiet"],
               check=True)
minutes = sum(json.loads(done.read_text()).get("seconds", 0) for done in out.glob("jobs/*/done.json")) / 60
document = json.loads((out / "fit.json").read_text())
fits = {fit["teacher"]: fit for fit in document["fits"]}
students = pd.DataFrame([{"teacher": teacher, **student} for teacher, fit in fits.items() for student in fit["students"]])
converged = students[students.flattened]
ratio = converged.test_loss / converged.train_loss
checks = {f"wall time {minutes:.1f} min ≤ 45 (training, summed over jobs and resumes)": minutes <= 45}
for teacher, fit in fits.items():
    fitted = students[(students.teacher == teacher) & students.fitted]
    checks[f"{teacher}: {fitted.certified.sum()} of {len(fitted)} fitted students certified, largest gap "
           f"{fitted.gap.max():.1%}"] = bool(fitted.certified.all())
checks[f"test/train of the {len(converged)} converged students in [{ratio.min():.3f}, {ratio.max():.3f}], within 5 %"] = \
    bool((abs(ratio - 1) <= 0.05).all())
if "independent" in fits:
    fit = fits["independent"]
    checks[f"independent α = {fit['alpha']:.2f} [{fit['alpha_low']:.2f}, {fit['alpha_high']:.2f}] within 1.0 ± 0.2"] = \
        abs(fit["alpha"] - 1) <= 0.2
if "tied" in fits:
    fit, rk2 = fits["tied"], document["protocol"]["student"] == "rk2"
    low = fits["independent"]["alpha_high"] if "independent" in fits else 1.0
    checks[f"tied α = {fit['alpha']:.2f} [{fit['alpha_low']:.2f}, {fit['alpha_high']:.2f}] above {low:.2f}"
           + (" and ≥ 3.5" if rk2 else "")] = fit["alpha_low"] > low and (fit["alpha"] >= 3.5 or not rk2)
for text, ok in checks.items():
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
print(students.pivot_table(index=["teacher", "depth"], columns="start", values="gap", aggfunc="max")
      .map("{:.1%}".format).to_string())
print(f"results: {out}")
sys.exit(0 if all(checks.values()) else 1)
