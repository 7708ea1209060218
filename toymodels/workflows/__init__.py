"""Workflows: a sweep from its config to a finished, fitted run folder, and the experiments built on them.

  stages              a run's stages from its one protocol: pretrain, sweep, polish, doubled polish, rungs
  plugins             a run's plug-in sources copied into it, with their hashes
  parallel            the sweep's jobs side by side through joblib (local processes or dask), progress
  polish              the polish merged into the run as one more start (and the doubled polish)
  certificates        the budget certificate of a doubled polish
  fits                α over the run's depth window: fit.txt, fit.json, fits.csv; a run read at a budget
  sweep               `run_sweep` stage after stage, `join_runs` for a grid split by replicate
  ladder              a run's budget ladder read from its rungs' folders
  layer_errors        a run's layer-error split, of its saved students or its parts'
  experiment          the experiment file format (experiments/*.toml): read and checked, nothing run
  experiment_figures  an experiment's figures from the fits of its run and of the runs beside it
  reproduce           an experiment run, fitted and drawn (`toymodels reproduce`)

Nothing is imported here, so that reading an experiment file (the docs generator does) does not
import the training of one.
"""
