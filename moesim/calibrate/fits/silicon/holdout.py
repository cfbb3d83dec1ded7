"""Hold-out inside a silicon table: fit on part of the grid, report the error on the rest.

Rows are split by SHAPE (the columns that are not the swept size), so a held-out row's shape was never seen
by the fit: every HELD_OUT_EVERY-th shape in sorted order is held out. The quality of a fitted term is the
mean absolute percentage error of the cost model's prediction, in-sample and held out, with the row counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HELD_OUT_EVERY = 4  # one shape in four is held out


def held_out_mask(*shape_columns: np.ndarray) -> np.ndarray:
    """True for the rows whose shape (the tuple of `shape_columns`) is held out."""
    if not shape_columns or shape_columns[0].size == 0:
        return np.zeros(0, dtype=bool)
    keys = np.stack([np.asarray(c).astype(str) for c in shape_columns], axis=1)
    joined = np.array(["|".join(row) for row in keys])
    shapes, index = np.unique(joined, return_inverse=True)
    chosen = (np.arange(shapes.size) % HELD_OUT_EVERY) == HELD_OUT_EVERY - 1
    if shapes.size < HELD_OUT_EVERY:  # too few shapes to hold one out: hold out every fourth row instead
        return (np.arange(joined.size) % HELD_OUT_EVERY) == HELD_OUT_EVERY - 1
    return chosen[index.reshape(-1)]


def mape_percent(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean |predicted − measured| / measured, in percent (nan for no rows)."""
    if measured.size == 0:
        return float("nan")
    return float(np.mean(np.abs(predicted - measured) / measured) * 100.0)


@dataclass(frozen=True)
class FitQuality:
    """How well one fitted term reproduces its table: rows and MAPE on the fitted and the held-out shapes."""

    table: str  # system/framework/version/table
    rows_fit: int
    rows_held_out: int
    mape_fit_percent: float
    mape_held_out_percent: float
    note: str = ""  # what was selected (kernel source, dtype, routing) and what was left out

    @classmethod
    def of(
        cls, table: str, predicted: np.ndarray, measured: np.ndarray, held_out: np.ndarray, note: str = ""
    ) -> FitQuality:
        fit = ~held_out
        return cls(
            table=table,
            rows_fit=int(fit.sum()),
            rows_held_out=int(held_out.sum()),
            mape_fit_percent=mape_percent(predicted[fit], measured[fit]),
            mape_held_out_percent=mape_percent(predicted[held_out], measured[held_out]),
            note=note,
        )

    def beats(self, other: FitQuality) -> bool:
        """This fit predicts the held-out shapes better than `other` (what it would replace) on the same rows."""
        return self.mape_held_out_percent < other.mape_held_out_percent

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """The numbers of the profile's [fit_quality.<term>] table: rows and MAPEs of the fit, or with a
        prefix (`datasheet_`) the MAPEs of what it replaced (the datasheet profile) on the same rows."""
        counts = {"rows_fit": float(self.rows_fit), "rows_held_out": float(self.rows_held_out)}
        return {
            **({} if prefix else counts),
            f"{prefix}mape_fit_percent": round(self.mape_fit_percent, 3),
            f"{prefix}mape_held_out_percent": round(self.mape_held_out_percent, 3),
        }

    def sentence(self, term: str) -> str:
        """The provenance line of a fitted field."""
        return (
            f"{term}: fitted to {self.table} ({self.note}); {self.rows_fit} rows fitted, MAPE "
            f"{self.mape_fit_percent:.1f}%; {self.rows_held_out} rows of held-out shapes, MAPE "
            f"{self.mape_held_out_percent:.1f}%"
        )
