"""Analyses beyond the fit: hidden-state diagnostics and layer removal of trained students
(`diagnostics`), and the decomposed scaling law on the Chinchilla shapes (`scaling_law`).

May import: `toymodels.models`, `toymodels.training.population`, `toymodels.results` and
`toymodels.plotting.style`.
"""
