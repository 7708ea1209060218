"""The worked plug-ins of docs/extending.md, shipped as `toymodels.examples`: name one as
`examples/NAME.py:DEFINITION` (an experiment file does) from a clone of the repository or from an
installed wheel alike; `python -m toymodels.examples` lists them with where they lie."""
