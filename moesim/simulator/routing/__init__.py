"""Routing models: how many distinct experts B sequences × T tokens pull into one MoE layer."""

from moesim.simulator.routing.base import DistinctExperts, RoutingModel
from moesim.simulator.routing.correlated import CorrelatedRouting, LayerRouting, RankDistinct
from moesim.simulator.routing.fit import RoutingEstimator
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.routing.presets import routing_from_cli, summary_routing, typical_routing
from moesim.simulator.routing.stats_file import load_routing_stats, save_routing_stats
from moesim.simulator.routing.trace import RoutingTrace, load_trace, save_trace

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
