#!/usr/bin/env bash
# The GPU loan in one command, which the device tool runs as is from the repository root:
#
#     benchmarks/gpu_loan.sh                                     # on the loan: results under $OUT
#     OUT=/tmp/check benchmarks/gpu_loan.sh --toy [--fail regimes/graphed]   # a test of it on a CPU
#
# It installs the project without touching the machine's torch (a CUDA build the project's pin
# would replace; the machine holds the other dependencies and reaches no index), says what it
# found, and runs two phases within 9 minutes of command time, compile included, leaving a
# 15-minute loan room for one rerun:
#   1. benchmarks/graph_check.py (6 minutes), its JSON to $OUT/graph_check.json, its log to
#      $OUT/gpu_loan.log; options after --toy go to it;
#   2. the run that would decide the tied exponent (experiments/ladder_tied_x512.toml) for the
#      time left, interrupted at the end so that it checkpoints: it continues the part an earlier
#      loan brought back where the repository holds one (figures/ladder_tied_x512/gpu), else it
#      starts; the part comes back in $OUT/ladder_tied_x512, its log in $OUT/decide.log.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMAND_S=540  # 9 minutes
CHECK_S=360  # the graph check's share (its paper-scale phase fits only a longer one); the decisive run gets the rest
END_S=20  # after the check's budget: its last variant's end, the JSON written, the process gone

if [[ -z "${OUT:-}" ]]; then
    echo "gpu_loan.sh: \$OUT is not set: the folder the results go to (the device tool sets it)" >&2
    exit 2
fi
toy=()
if [[ "${1:-}" == "--toy" ]]; then
    shift
    toy=(--toy --device cpu --steps 12)
fi
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"

python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .
python3 - <<'EOF'
import torch

import toymodels
from toymodels.api import Experiment, reproduce, run_sweep  # every dependency there, the experiments resolved
from toymodels.version import __version__

device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
print(f"toymodels {__version__} from {toymodels.__path__[0]}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"device: {device}", flush=True)
EOF

# At the hard limit an interrupt: the check records it against the variant it stopped and writes its JSON.
timeout -s INT -k 10 $((CHECK_S - SECONDS)) \
    python3 benchmarks/graph_check.py --out "$OUT" --budget-s $((CHECK_S - SECONDS - END_S)) "${toy[@]}" "$@" \
    2>&1 | tee "$OUT/gpu_loan.log" || true

# Phase 2: an interrupt at the end makes the run write its checkpoint; `toymodels run --resume`
# continues it on the next loan (or on any machine).
scale=gpu
[[ ${#toy[@]} -gt 0 ]] && scale=toy
part="$OUT/ladder_tied_x512"
if [[ -f figures/ladder_tied_x512/$scale/config.json ]]; then
    cp -r "figures/ladder_tied_x512/$scale" "$part"
    decide=(toymodels run --resume "$part")
else
    decide=(toymodels reproduce ladder_tied_x512 --scale "$scale" --out "$part" --quiet)
    [[ $scale == gpu ]] && decide+=(--compile)
fi
timeout -s INT -k 20 $((COMMAND_S - SECONDS)) "${decide[@]}" 2>&1 | tee "$OUT/decide.log" || true
