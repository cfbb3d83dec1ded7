"""Re-score the measured rows of an earlier torch validation run with another profile or a changed model.

No device and no torch: each row's exact torch-reference plan is rebuilt from what the run recorded
(validation shape, device, dtype, layers, routing model and seed — the forced routing is re-sampled with
the row's own configuration seed, exactly as the measuring run sampled it), then predicted, summarised and
reported like a fresh run. Re-predicting a run with its own profile reproduces its predictions.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from moesim.calibrate.timing import today
from moesim.errors import MoesimError
from moesim.reading import read_json_table
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.spec import ModelSpec
from moesim.validation.predict import predict_reference_step
from moesim.validation.report import add_errors_and_ratios, cross_device_summaries, summarise
from moesim.validation.routing_replay import StepRouting, sample_step_routing
from moesim.validation.runner import config_seed, default_routing
from moesim.validation.shapes import SHAPES, validation_model

_LAYERS_IN_NAME = re.compile(r"-(\d+)L-(cpu|gpu)$")
# Measured fields carried over unchanged from the earlier run.
_MEASURED_KEYS = (
    "model",
    "shape",
    "device",
    "launch",
    "batch",
    "draft_len",
    "tokens_per_seq",
    "m_tokens",
    "context_len",
    "measured_s",
    "spread",
    "round_spread",
    "n_samples",
)


def load_result(path: str | Path) -> dict[str, Any]:
    """An earlier run's result.json (`moesim validate --report` or `--json` output)."""
    p = Path(path)
    result = read_json_table("--repredict", p, "result.json of a validation run")
    if not isinstance(result.get("rows"), list) or not result["rows"]:
        raise MoesimError("--repredict", f"{p} has no measured rows", "give the result.json of a torch run")
    meta = result.get("meta", {})
    if meta.get("device") not in ("cpu", "cuda") or "shape" not in result["rows"][0]:
        raise MoesimError(
            "--repredict",
            f"{p} is not a torch-reference run (no device / validation shape recorded)",
            "re-predict runs of `moesim validate --device ...`; for other measurements use --measured",
        )
    return result


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
    moe_layers = tuple(i for i, kind in enumerate(spec.layer_ffn) if kind == "moe")
    seed = config_seed(spec.name, row["batch"], row["draft_len"], int(meta.get("seed", 0)))
    return sample_step_routing(
        routing, spec.n_experts, spec.top_k, row["batch"], row["draft_len"] + 1, moe_layers, seed
    )


def repredict_result(
    result: dict[str, Any],
    hardware: HardwareProfile,
    cross_hardware: dict[str, HardwareProfile] | None = None,
    source: str = "",
) -> dict[str, Any]:
    """The earlier run's measured rows predicted with `hardware` (and each cross profile): rows + summary."""
    meta = result.get("meta", {})
    rows: list[dict[str, Any]] = []
    mismatched: list[str] = []
    for old in result["rows"]:
        spec = row_spec(meta, old)
        routing = row_routing(meta, spec, old)
        distinct = float(np.mean(routing.distinct_experts())) if spec.is_moe else 0.0
        if old.get("distinct_experts") is not None and abs(distinct - float(old["distinct_experts"])) > 1e-9:
            mismatched.append(f"{spec.name} B={old['batch']} K={old['draft_len']}")
        args = (spec, hardware, old["batch"], old["draft_len"] + 1, old["context_len"], routing.loads)
        pred = predict_reference_step(*args, old.get("launch") or meta.get("launch", "eager"))
        cross = {
            name: predict_reference_step(spec, other, *args[2:], old.get("launch") or meta["launch"]).step_s
            for name, other in (cross_hardware or {}).items()
        }
        rows.append(
            {key: old.get(key) for key in _MEASURED_KEYS}
            | {
                "distinct_experts": distinct,
                "n_kernels": pred.n_kernels,
                "predicted_s": pred.step_s,
                "predicted_breakdown_s": pred.breakdown_s,
                "predicted_terms_s": pred.terms_s,
                "cross_predicted_s": cross,
            }
        )
    if mismatched:
        raise MoesimError(
            "--repredict",
            f"re-sampled routing differs from the measured run for {', '.join(mismatched[:3])}"
            + (f" and {len(mismatched) - 3} more" if len(mismatched) > 3 else ""),
            "the run used another seed or routing model than its result.json records",
        )
    add_errors_and_ratios(rows)
    summary = summarise(rows)
    summary["cross_device"] = cross_device_summaries(rows, cross_hardware or {})
    new_meta = dict(meta) | {
        "title": f"torch reference on {meta.get('device_name', meta.get('device'))} "
        f"({meta.get('launch', 'eager')}), re-predicted with profile {hardware.name}",
        "profile": hardware.name,
        "profile_provenance": f"{hardware.provenance.kind}: {hardware.provenance.source}",
        "repredicted_from": source or meta.get("command", ""),
        "measured_with_profile": meta.get("profile"),
        "repredicted_date": today(),
    }
    notes = list(result.get("notes", []))
    notes.append(
        f"re-predicted offline from {source or 'an earlier run'} (measured {meta.get('date', '?')}, predicted "
        f"then with {meta.get('profile', '?')}); measurements unchanged, routing re-sampled with the run's seeds"
    )
    return {"rows": rows, "summary": summary, "meta": new_meta, "notes": notes}


__all__ = ["load_result", "repredict_result", "row_routing", "row_spec", "run_layers", "run_routing_name"]
