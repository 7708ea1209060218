"""Analyses beyond the fit that need the trained students themselves (torch): hidden-state
diagnostics and layer removal (`diagnostics`), how a student's layer errors add up to its output
error (`layer_errors`), and the decomposed scaling law on the Chinchilla shapes (`scaling_law`).
The maths on tables alone (the budget ladder, its tails) is in `toymodels.results`; which modules
may import which is the design page's module table (docs/design.md).
"""
