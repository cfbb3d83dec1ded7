"""Speculative decoding: acceptance and the speedup formula, drafters and their cost, the speculative point
(draft + verify + accept → speedup) written once, sweeps and their plots.

May import every room below it and the scenario's defaults.
"""
