"""The networks and what they are trained on: the residual update every block makes (`blocks`),
the integrators that step a stack of blocks through each layer's field (`integrators`), the
losses and their heads (`losses`), the teachers' dynamics (`teachers`), where students start
(`starts`), the student architectures and their batched population (`students`), the layers'
weights (`weights`) and the random streams (`streams`).

Nothing here trains, writes files or knows about runs; which modules may import which is the
design page's module table (docs/design.md), which a test holds the imports to.
"""
