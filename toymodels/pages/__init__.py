"""The documentation's results, generated from the committed run folders (`toymodels docs`).

  results          an experiment's committed result, and the cells every page shows it by
  experiment_page  one page per experiment (docs/experiments/NAME.md)
  summary          across experiments: the summary table, the findings, the navigation, the figure's points
  site             which file holds which generated page or block; checking and writing them

Every number on these pages comes from data: the protocol from the run's `config.json`, the fits
and certificates from its `fit.json`, the claim and the cost from the experiment file. The reading
of a result, prose a person writes, is `NAME.md` beside the experiment's file (the repository's
`experiments/NAME.md`), appended to its page. `toymodels docs --check` (and a test) says which
written file differs from what the data gives, so the docs cannot drift from the runs. Nothing
here imports the training of a run.
"""
