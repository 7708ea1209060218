"""The Python API behind the CLI: run a sweep into a folder, fit it, read its certificates, its
budget ladder and its layer errors, and run the paper's experiments. It only gathers the public
names; each lives in the module that does its work (toymodels/runs/, toymodels/analysis/).

```python
from toymodels import resolve_config, run_sweep, fit_run
folder = run_sweep(resolve_config("quick", teachers=["tied"], temperatures=[0.1, 1.0]))
for fit in fit_run(folder.path):
    print(fit.teacher, fit.temperature, fit.alpha, fit.alpha_low, fit.alpha_high)
```
"""

from .runs.certificates import budget_noise
from .runs.experiment import Experiment, experiment_names, resolve_run_config
from .runs.figures import redraw, reference_exponents
from .runs.fits import (
                         budget_certificate,
                         fit_metrics,
                         fit_run,
                         fit_window,
                         fitted_run,
                         load_fits,
                         run_at_budget,
                         run_protocol,
                         write_fit,
)
from .runs.ladder import budget_ladder
from .runs.layer_errors import split_layer_errors
from .runs.reproduce import describe_experiments, reproduce
from .runs.sweep import join_runs, missing_jobs, run_sweep

__all__ = ["Experiment", "budget_certificate", "budget_ladder", "budget_noise", "describe_experiments", "experiment_names",
           "fit_metrics", "fit_run", "fit_window", "fitted_run", "join_runs", "load_fits", "missing_jobs", "redraw",
           "reference_exponents", "reproduce", "resolve_run_config", "run_at_budget", "run_protocol", "run_sweep",
           "split_layer_errors", "write_fit"]
