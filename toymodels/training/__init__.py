"""Training a sweep: the optimiser and schedules (`optim`), progress of long stages (`stages`),
the plan that cuts a sweep into jobs (`jobs`), a population of teachers, students and test set on
one device (`population`), the training loop (`engine`), the checks before a run (`preflight`)
and running jobs through joblib or dask (`runner`).

May import: `toymodels.config`, `toymodels.training.protocol`, `toymodels.models`, and
`toymodels.results` for where a job writes (the runner only).
"""
