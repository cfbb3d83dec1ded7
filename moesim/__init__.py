"""moesim: a discrete-event simulator of speculative decoding on sparse Mixture-of-Experts models.

    >>> import moesim
    >>> result = moesim.simulate(model="qwen3-30b-a3b", hardware="h200", batch=1, draft_len=3)
    >>> result.speedup > 1
    True

`simulate` (one SD point on the event timer), `sweep` (grids on the fast path), `serve` (a serving
benchmark run with and without SD) and `Scenario` (every default) load on first use, so `import moesim`
and `moesim --help` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from moesim.simulator.scenario import Scenario
    from moesim.simulator.serving.run import serve
    from moesim.simulator.simulate import simulate, sweep

_API = {"simulate": "moesim.simulator.simulate", "sweep": "moesim.simulator.simulate"}
_API["Scenario"] = "moesim.simulator.scenario"
_API["serve"] = "moesim.simulator.serving.run"


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'moesim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_API[name]), name)


__all__ = ["Scenario", "__version__", "serve", "simulate", "sweep"]
