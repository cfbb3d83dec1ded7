"""Distinct experts: routing models (independent, correlated, typical, fitted from traces or summary
statistics), traces and statistics files, expert placement over expert-parallel ranks and per-rank work.

Imports nothing of the simulator outside this room. The names below load on first use (PEP 562), so
importing one light submodule (base, correlated, independent) does not pull in scipy or scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moesim.simulator.routing.base import DistinctExperts, RoutingModel
    from moesim.simulator.routing.correlated import CorrelatedRouting, LayerRouting, RankDistinct
    from moesim.simulator.routing.estimator import RoutingEstimator
    from moesim.simulator.routing.independent import IndependentRouting
    from moesim.simulator.routing.presets import routing_from_cli, summary_routing, typical_routing
    from moesim.simulator.routing.stats_file import load_routing_stats, save_routing_stats
    from moesim.simulator.routing.trace import RoutingTrace, load_trace, save_trace

_SOURCES = {
    "DistinctExperts": "base",
    "RoutingModel": "base",
    "CorrelatedRouting": "correlated",
    "LayerRouting": "correlated",
    "RankDistinct": "correlated",
    "RoutingEstimator": "estimator",
    "IndependentRouting": "independent",
    "routing_from_cli": "presets",
    "summary_routing": "presets",
    "typical_routing": "presets",
    "load_routing_stats": "stats_file",
    "save_routing_stats": "stats_file",
    "RoutingTrace": "trace",
    "load_trace": "trace",
    "save_trace": "trace",
}


def __getattr__(name: str) -> Any:
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_SOURCES[name]}"), name)


__all__ = [
    "CorrelatedRouting",
    "DistinctExperts",
    "IndependentRouting",
    "LayerRouting",
    "RankDistinct",
    "RoutingEstimator",
    "RoutingModel",
    "RoutingTrace",
    "load_routing_stats",
    "load_trace",
    "routing_from_cli",
    "save_routing_stats",
    "save_trace",
    "summary_routing",
    "typical_routing",
]
