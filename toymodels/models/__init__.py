"""The networks and what they are trained on: the residual update every block makes (`blocks`),
the integrators that step a stack of blocks (`integrators`), the losses and their heads
(`losses`), the teachers' dynamics (`teachers`), where students start (`starts`) and the student
architectures and their batched population (`students`).

Nothing here trains, writes files or knows about runs; which modules may import which is the
design page's module table (docs/design.md), which a test holds the imports to.
"""
