"""Accelerators as data: the `HardwareProfile` (datasheet facts, empirical parameters, node links,
provenance), the documented defaults for uncalibrated profiles, and derivation for unseen hardware.

Imports nothing of the simulator outside this room (only `moesim.errors` and `moesim.atomic`).
"""
