"""What a run leaves and what it means, read from its tables (its students are `toymodels.analysis`'s
to load and run): the run folder on disk (`storage`, `provenance`), α_ℓ with its interval
(`exponents`: numbers in, numbers out), certificates (`certification`) and their withdrawal by
later runs (`withdrawal`), a run's fits (`fitting`, into `depth_fit.DepthFit`), the test set's
noise (`noise`), the budget ladder (`ladder`) and the limits of its tail models (`tails`), and the
tables and documents of the fits (`report`).

Nothing here trains; which modules may import which is the design page's module table
(docs/design.md), which a test holds the imports to.
"""
