"""Figures: one style and caption helper (`style`), the figures of a run's fits (`fit_figures`)
and of hidden-state diagnostics (`diagnostics`).

May import: `toymodels.results` (fits and their maths) and `toymodels.models.teachers` (names); figures are
drawn from fits and tables, never from training.
"""
