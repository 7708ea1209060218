"""Run `toymodels reproduce regimes --scale cpu` from scratch, time it, and check what it must show
(the targets of the converged-exponents issue): finished within 30 minutes on a 2-core CPU; every
student converged; α_ℓ of the independent teacher within 1.0 ± 0.2, of the tied teacher ≥ 2.6;
their 95 % intervals disjoint. Prints each check with its measured number; exits 1 if one fails.

    python benchmarks/check_regimes.py [OUT_DIR]      # OUT_DIR must not hold a run yet
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "regimes"
start = time.perf_counter()
subprocess.run([sys.executable, "-m", "toymodels", "reproduce", "regimes", "--scale", "cpu", "--out", str(out),
                "--quiet"], check=True)
minutes = (time.perf_counter() - start) / 60
fits = {fit["teacher"]: fit for fit in json.loads((out / "fit.json").read_text())["fits"]}
independent, tied = fits["independent"], fits["tied"]
metrics = pd.read_csv(out / "metrics.csv")
students = metrics.groupby(["teacher", "replicate", "depth"]).converged_at_step.max()
checks = {
    f"wall time {minutes:.1f} min ≤ 30": minutes <= 30,
    f"{students.notna().sum()} of {len(students)} students converged": students.notna().all(),
    f"independent α = {independent['alpha']:.2f} within 1.0 ± 0.2": abs(independent["alpha"] - 1) <= 0.2,
    f"tied α = {tied['alpha']:.2f} ≥ 2.6": tied["alpha"] >= 2.6,
    f"intervals [{independent['alpha_low']:.2f}, {independent['alpha_high']:.2f}] and "
    f"[{tied['alpha_low']:.2f}, {tied['alpha_high']:.2f}] disjoint": independent["alpha_high"] < tied["alpha_low"],
}
for text, ok in checks.items():
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
print(f"results: {out}")
sys.exit(0 if all(checks.values()) else 1)
