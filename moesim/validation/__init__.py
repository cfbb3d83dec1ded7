"""Validation: measured torch reference runs against the simulator's predictions for the same work.

Two halves joined by the rows a run writes: measure (`measure`, `run`; torch, imported lazily by
`reference.py`) and predict (`predict.predict_rows`, `repredict`; pure, no torch), with `configs` telling
both how a row's model and forced routing are rebuilt. Reports and error attribution in `report`.
"""
