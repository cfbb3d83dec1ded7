"""Serving engines: what vLLM, SGLang and TensorRT-LLM add to every step beyond the kernel stream.

Owns the serving-engine profile (`profile.py`: the dataclass, its TOML files, validation, the bundled
presets in `moesim/hardware_profiles/engines/`) and the pure functions of what an engine adds
(`overheads.py`: padding to captured graph sizes, the launch mode per step, host time and how much of it
the device hides, the tokens a tree verifies, the acceptance sync).

Imports nothing of the simulator (only `moesim.errors`, `moesim.atomic`, `moesim.reading`, `moesim.toml_files`): the speculative point
combines these functions with the step timers (`speculative/point.py`).
"""
