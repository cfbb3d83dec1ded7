"""The MoE architecture as data: `ModelSpec`, its exact parameter / byte / FLOP counts, override flags for
hypothetical designs, the bundled catalogue and Hugging Face config import.

Imports nothing of the simulator outside this room (only `moesim.errors`).
"""
