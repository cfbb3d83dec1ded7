"""Routing models: how many distinct experts B sequences × T tokens pull into one MoE layer."""

from moesim.simulator.routing.base import DistinctExperts, RoutingModel
from moesim.simulator.routing.independent import IndependentRouting

__all__ = ["DistinctExperts", "IndependentRouting", "RoutingModel"]
