"""Speed: the usual one-student-at-a-time loop (`baseline`) and `toymodels bench`, the population
engine timed against it (`bench`).

May import: `toymodels.config`, `toymodels.models`, `toymodels.training`.
"""
