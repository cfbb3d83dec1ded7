"""Which configurations a validation run measures, and how a recorded row is rebuilt from its run's meta.

The join between the two halves of validation: measurement (torch) and prediction (pure) both derive a
row's model and forced routing from the same few recorded facts — validation shape, device, dtype,
layers, routing model and seed — so a rows file measured anywhere can be predicted anywhere, with no
torch installed. No torch here.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from moesim.errors import MoesimError
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.routing.base import RoutingModel
from moesim.validation.reference.routing_replay import StepRouting, sample_step_routing
from moesim.validation.reference.shapes import SHAPES, validation_model

BATCHES = (1, 2, 4, 8, 16, 32)
DRAFT_LENS = (0, 1, 3, 7)
QUICK_BATCHES = (1, 4, 32)
QUICK_DRAFT_LENS = (0, 1, 3, 7)

_LAYERS_IN_NAME = re.compile(r"-(\d+)L-(cpu|gpu)$")


def validation_grid(
    quick: bool, batches: list[int] | None = None, draft_lens: list[int] | None = None
) -> list[tuple[int, int]]:
    """(batch, draft length) pairs: the issue's full grid, or the quick one (3 batches × 4 draft lengths)."""
    bs = batches or list(QUICK_BATCHES if quick else BATCHES)
    ks = draft_lens if draft_lens is not None else list(QUICK_DRAFT_LENS if quick else DRAFT_LENS)
    if 0 not in ks:
        ks = [0, *ks]  # the verify/decode ratio needs the decode step
    return [(b, k) for b in bs for k in ks]


def config_seed(model: str, batch: int, draft_len: int, seed: int) -> int:
    """A stable seed per configuration (so reruns sample the same routing)."""
    return zlib.crc32(f"{model}|{batch}|{draft_len}|{seed}".encode()) & 0x7FFFFFFF


def default_routing(model: ModelSpec, name: str) -> RoutingModel:
    """The routing model that drives validation: 'typical' (correlated, documented default) or 'uniform'."""
    if name == "uniform":
        from moesim.simulator.routing.independent import IndependentRouting

        return IndependentRouting()
    if name == "typical":
        from moesim.simulator.routing.presets import typical_routing

        return typical_routing(model.n_experts, model.top_k, model.n_groups, model.topk_groups)
    raise MoesimError("--routing", f"unknown routing {name!r}", "choose typical or uniform")


def moe_layers(spec: ModelSpec) -> tuple[int, ...]:
    """Indices of the spec's MoE layers (the layers forced routing is sampled for)."""
    return tuple(i for i, kind in enumerate(spec.layer_ffn) if kind == "moe")


def config_routing(
    spec: ModelSpec, routing: RoutingModel, batch: int, draft_len: int, seed: int
) -> StepRouting:
    """The forced routing of one configuration: one sample per MoE layer, seeded by the configuration."""
    return sample_step_routing(
        routing,
        spec.n_experts,
        spec.top_k,
        batch,
        draft_len + 1,
        moe_layers(spec),
        config_seed(spec.name, batch, draft_len, seed),
    )


def run_layers(meta: dict[str, Any], model_name: str) -> int | None:
    """The layer count the run used: recorded in meta, else read from the spec name ("...-4L-gpu")."""
    if meta.get("layers"):
        return int(meta["layers"])
    match = _LAYERS_IN_NAME.search(model_name)
    return int(match.group(1)) if match else None


def run_routing_name(meta: dict[str, Any]) -> str:
    """The routing model option of the run ('typical' or 'uniform'); older runs recorded the description only."""
    if meta.get("routing_name"):
        return str(meta["routing_name"])
    return "uniform" if "independent" in str(meta.get("routing", "")).lower() else "typical"


def row_spec(meta: dict[str, Any], row: dict[str, Any]) -> ModelSpec:
    """The validation spec the row measured, rebuilt and checked against the recorded name."""
    key = row.get("shape")
    if key not in SHAPES:
        raise MoesimError("--repredict", f"row {row.get('model')}: unknown validation shape {key!r}")
    spec = validation_model(key, meta["device"], meta.get("dtype") or "bf16", run_layers(meta, row["model"]))
    if spec.name != row["model"]:
        raise MoesimError(
            "--repredict",
            f"rebuilt spec {spec.name!r} differs from the measured {row['model']!r}",
            "re-predict with the moesim version that measured the run",
        )
    return spec


def row_routing(meta: dict[str, Any], spec: ModelSpec, row: dict[str, Any]) -> StepRouting:
    """The forced routing the row was measured with: the same seeded sample the measuring run drew."""
    routing = default_routing(spec, run_routing_name(meta))
    return config_routing(spec, routing, row["batch"], row["draft_len"], int(meta.get("seed", 0)))


__all__ = [
    "BATCHES",
    "DRAFT_LENS",
    "QUICK_BATCHES",
    "QUICK_DRAFT_LENS",
    "config_routing",
    "config_seed",
    "default_routing",
    "moe_layers",
    "row_routing",
    "row_spec",
    "run_layers",
    "run_routing_name",
    "validation_grid",
]
