"""`TrainSetupError`: a training run that cannot start as configured, said in words.

Its own module so that `training.py` (which picks the vision trainer) and `vision.py` (which
refuses settings it cannot train) both raise it without importing each other.
"""


class TrainSetupError(RuntimeError):
    """A run that cannot start as configured (said in words for the command line)."""
