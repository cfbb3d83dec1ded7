"""`RoutingEstimator`: the scikit-learn-style estimator that fits per-layer correlated routing to a trace.

`fit(trace)` validates, fits every layer (`fit.fit_layer`) and returns self; fitted attributes end in `_`;
`predict(batch, tokens)` checks it was fitted. Kept apart from `fit` so that only commands fitting traces
import scikit-learn.
"""

from __future__ import annotations

from collections.abc import Sequence

from sklearn.base import BaseEstimator

from moesim.errors import MoesimError
from moesim.simulator.bounds import check_seed
from moesim.simulator.routing.base import DistinctExperts
from moesim.simulator.routing.correlated import CorrelatedRouting, LayerRouting
from moesim.simulator.routing.fit import fit_layer, trace_layer_statistics
from moesim.simulator.routing.settings import FIT_DEFAULTS
from moesim.simulator.routing.trace import RoutingTrace


class RoutingEstimator(BaseEstimator):  # type: ignore[misc]
    """sklearn-style estimator: `fit(trace)` fits per-layer correlated routing; `predict(batch, tokens)`.

    Parameters: `max_distance` — overlap distances and window lengths measured (D); `n_groups`,
    `topk_groups` — group-limited routing (DeepSeek: 8 groups, top 4); `n_sim_sequences` — sequences
    simulated per fitting step; `seed`.
    """

    def __init__(
        self,
        max_distance: int = FIT_DEFAULTS.max_distance,
        n_groups: int = FIT_DEFAULTS.n_groups,
        topk_groups: int = FIT_DEFAULTS.topk_groups,
        n_sim_sequences: int = 256,
        seed: int = FIT_DEFAULTS.seed,
    ) -> None:
        check_seed(seed)
        self.max_distance = max_distance
        self.n_groups = n_groups
        self.topk_groups = topk_groups
        self.n_sim_sequences = n_sim_sequences
        self.seed = seed

    def fit(self, trace: RoutingTrace) -> RoutingEstimator:
        if self.max_distance < 1:
            raise MoesimError("max_distance", f"must be ≥ 1, got {self.max_distance}")
        self.statistics_ = [
            trace_layer_statistics(trace, i, self.max_distance) for i in range(trace.n_layers)
        ]
        fitted = []
        for stats in self.statistics_:
            fitted.append(
                (
                    int(stats["layer"]),
                    fit_layer(
                        stats["inclusion_frequency"],
                        stats["overlap"],
                        trace.top_k,
                        self.n_groups,
                        self.topk_groups,
                        n_sequences=self.n_sim_sequences,
                        seed=self.seed,
                    ),
                )
            )
        self.model_ = CorrelatedRouting(
            default=_median_layer(fitted),
            layers=tuple(fitted),
            assumption="correlated routing fitted to a trace",
            seed=self.seed,
        )
        self.n_experts_ = trace.n_experts
        self.top_k_ = trace.top_k
        return self

    def predict(self, batch: int, tokens: int) -> list[DistinctExperts]:
        """Distribution of distinct experts per fitted layer for `batch` sequences × `tokens` tokens."""
        return [
            self.model_.distinct_distribution(self.n_experts_, self.top_k_, batch, tokens, layer=index)
            for index, _ in self.model_.layers
        ]


def _median_layer(fitted: Sequence[tuple[int, LayerRouting]]) -> LayerRouting:
    """The layer with median adjacent-token behaviour, used when the caller names no layer."""
    order = sorted(fitted, key=lambda item: (item[1].sigma * item[1].token_corr, item[1].sequence_share))
    return order[len(order) // 2][1]
