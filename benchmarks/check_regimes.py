"""Run `toymodels reproduce regimes --scale cpu` from scratch, time it, and check what it must show:
finished within 20 minutes on a 2-core CPU; α_ℓ of the independent teacher in [0.6, 1.4], of the
tied teacher ≥ 1.8, their 95 % intervals disjoint, and the tied teacher's α rising with training. Prints each check; exits 1 if one fails.

    python benchmarks/check_regimes.py [OUT_DIR]      # OUT_DIR must not hold a run yet
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "regimes"
start = time.perf_counter()
subprocess.run([sys.executable, "-m", "toymodels", "reproduce", "regimes", "--scale", "cpu", "--out", str(out),
                "--quiet"], check=True)
minutes = (time.perf_counter() - start) / 60
fits = {fit["teacher"]: fit for fit in json.loads((out / "fit.json").read_text())["fits"]}
independent, tied = fits["independent"], fits["tied"]
steps = dict(tied["alpha_over_training"])
rise = (steps[min(steps, key=lambda s: abs(s - 0.1 * max(steps)))], steps[max(steps)])
checks = {
    f"wall time {minutes:.1f} min ≤ 20": minutes <= 20,
    f"independent α = {independent['alpha']:.2f} in [0.6, 1.4]": 0.6 <= independent["alpha"] <= 1.4,
    f"tied α = {tied['alpha']:.2f} ≥ 1.8": tied["alpha"] >= 1.8,
    f"intervals [{independent['alpha_low']:.2f}, {independent['alpha_high']:.2f}] and "
    f"[{tied['alpha_low']:.2f}, {tied['alpha_high']:.2f}] disjoint": independent["alpha_high"] < tied["alpha_low"],
    "tied α rises: {:.2f} at 10 % of training, {:.2f} at the end".format(*rise): rise[0] < rise[1],
}
for text, ok in checks.items():
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
print(f"results: {out}")
sys.exit(0 if all(checks.values()) else 1)
