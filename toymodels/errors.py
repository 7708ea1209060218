"""The one exception type the CLI turns into a single line and exit status 2."""


class ToymodelsError(ValueError):
    """Bad input from a user: a wrong option, a missing file, a folder that is not a run."""
