"""Speed: the usual one-student-at-a-time loop (`baseline`) and `toymodels bench`, the population
engine timed against it (`bench`); the ops a step issues (`step_trace`); whether a replayed CUDA
graph trains as the eager step does, with a CPU stand-in for the graph (`replay`); the report of
a check that must leave a result, its parts run against a time budget (`time_budget`); how many
CPU threads a run trains on beside other busy processes (`threads`). Which modules
may import which is the design page's module table (docs/design.md).
"""
