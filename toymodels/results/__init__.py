"""What a run leaves and what it means: the run folder on disk (`storage`), α_ℓ with its interval,
certificates and gaps (`fitting`: numbers in, numbers out) and the tables and documents of the
fits (`report`).

May import: `toymodels.config`, `toymodels.errors` and `toymodels.training` (the columns the engine
records, the protocol a run folder resolves). Nothing here trains.
"""
