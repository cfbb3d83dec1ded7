"""Validation: measured torch reference runs against the simulator's predictions for the same work.

torch is imported only by `reference.py` (and lazily by the runner); the rest is plain numpy.
"""
