#!/usr/bin/env bash
# Lever "warm start from the previous rung" at ℓ 32 and 48 on the second tied teacher: rung ×4 again
# (12 000 steps from the discretised start), then 12 000 more steps from its students (the trained
# start, schedule G again): 24 000 steps in all, beside the plain ×8 rung's 24 000
# (figures/ladder_tied_r1_x8). Measured 2026-12-07 on a 2-core CPU, 14 + 16 min: see that page's reading.
set -e
T=toymodels
COMMON="--preset cpu --teacher tied --loss mse --depths 32,48 --replicates 1 --batch 1024 --lr 4e-3 --lr-depth-exponent 0.5 --schedule G --compile --device cpu --save-students --quiet --set first_replicate=1 --set test_batches=40 --steps 12000"
date
$T run $COMMON --start discretised --out runs/lever_x4_deep
date
$T run $COMMON --start trained --start-from runs/lever_x4_deep --out runs/lever_warm
date
