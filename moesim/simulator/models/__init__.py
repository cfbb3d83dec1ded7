"""The MoE architecture as data: `ModelSpec` (`spec`) and its checks (`validate`), its exact weight /
parameter counts (`weights`), sequence state (`sequence_state`) and FLOPs (`flops`), its layer pattern
(`layers`), override flags for hypothetical designs (`overrides`), the bundled catalogue and Hugging Face
config import.

Imports nothing of the simulator outside this room (only `moesim.errors`).
"""
