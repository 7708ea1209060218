"""What a run leaves and what it means: the run folder on disk (`storage`, `provenance`), α_ℓ with
its interval (`exponents`: numbers in, numbers out), certificates (`certification`), a run's fits
(`fitting`, into `depth_fit.DepthFit`), the budget ladder (`ladder`) and the tables and documents
of the fits (`report`).

May import: the ground floor (`toymodels.config`, `errors`, `vocabulary`), `toymodels.models` (a
run's students rebuilt) and `toymodels.training` (the protocol a run folder resolves). Nothing
here trains.
"""
