"""Figures: one style and caption helper (`style`), the figures of a run's fits (`fit_figures`), of
hidden-state diagnostics (`diagnostics`), of the budget ladder (`ladder`), of the layer-error
split (`layer_errors`), of the decomposed scaling law (`scaling_law`) and the summary of every
committed experiment (`summary`). Figures are drawn from fits and tables, never from training;
which modules may import which is the design page's module table (docs/design.md).
"""
