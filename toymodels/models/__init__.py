"""The networks and what they are trained on: the residual block (`blocks`), the losses and their
heads (`losses`), the teachers' dynamics (`teachers`), where students start (`starts`) and the
student architectures and their batched population (`students`).

May import: `toymodels.errors`, `toymodels.registry` and one another, in that order. Nothing
here trains, writes files or knows about runs.
"""
