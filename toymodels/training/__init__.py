"""Training a sweep: the optimiser and schedules (`optim`), progress of long stages (`stages`), a
config with its names resolved once (`protocol`), the plan that cuts a sweep into jobs (`jobs`), a
population of teachers, students and test set on one device (`population`), the training loop
(`engine`), racing starts (`racing`), the checks before a run (`preflight`) and a finished run's
trained students, read for the trained start (`trained_runs`).

May import: `toymodels.config`, `toymodels.errors`, `toymodels.registry` and `toymodels.models`.
Nothing here writes a run folder (`toymodels.runs` does).
"""
