"""The serving room: a simpy model of a serving benchmark run on top of the step model.

Owns the scheduler's knobs and their defaults (`options`, light: the CLI reads them), requests and workloads
(`workload`), the paged KV cache (`kv`), seeded tokens per SD round (`draws`), the
per-step cost interface and its fast-path implementation (`step_cost`), the discrete-event loop (`loop`),
the benchmark metrics (`metrics`), runs and sweeps (`run`) and their plots (`plots`).
May import every room below it (models, hardware, routing, plan, execution, speculative) and the scenario;
nothing below imports it.
"""
