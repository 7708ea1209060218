"""The experiment files of the paper's toy figures (`toymodels reproduce --list`), shipped as
`toymodels.experiments`."""
