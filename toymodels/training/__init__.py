"""Training a sweep, module by module in the order a run meets them:

  protocol      a config with every name resolved once into its component
  preflight     the checks before any work (a sweep that cannot run is refused in one line)
  planning      what a sweep costs (memory, matmul FLOPs) and how it is cut into jobs
  jobs          a job: a block of the sweep's students, and how it is cut in two
  population    teachers, students, loss and test set on one device; evaluates, never trains
  samples       a step's training samples: fresh, a block of steps at a time, or a pool
  optim         the optimisers (Adam, Muon) for stacked populations, a rate per student, and the schedules
  trainer       what training adds to a population: its optimiser, the schedule, the plateau test, rebuilds
  recording     what a job records while it trains (evaluations, training losses, where time went)
  racing        a start far behind its student's leader, not catching up, stops
  compiler      torch.compile with room for every rebuild of a long run's population
  cuda_graphs   the training step captured once as a CUDA graph and replayed (CUDA only)
  engine        one process trains a population (a sweep, or one job of it) on one device
  progress      long stages that are not training steps (labelling, compiling) report how far they are
  trained_runs  a finished run's trained students, read for the trained start

Nothing here writes a run folder (`toymodels.workflows` does); which modules may import which is the
design page's module table (docs/design.md).
"""
