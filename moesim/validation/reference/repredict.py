"""Re-score the measured rows of an earlier torch validation run with another profile or a changed model.

No device and no torch: each row's exact torch-reference plan is rebuilt from what the run recorded
(validation shape, device, dtype, layers, routing model and seed — the forced routing is re-sampled with
the row's own configuration seed, exactly as the measuring run sampled it), then predicted, summarised and
reported like a fresh run. Re-predicting a run with its own profile reproduces its predictions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moesim.calibrate.suites.timing import today
from moesim.errors import MoesimError
from moesim.reading import read_json_table
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.validation.reference.predict import predict_rows
from moesim.validation.reference.report import score_rows


def load_result(path: str | Path) -> dict[str, Any]:
    """An earlier run's result.json (`moesim validate reference --report` or `--json` output)."""
    p = Path(path)
    result = read_json_table("--repredict", p, "result.json of a validation run")
    if not isinstance(result.get("rows"), list) or not result["rows"]:
        raise MoesimError("--repredict", f"{p} has no measured rows", "give the result.json of a torch run")
    meta = result.get("meta", {})
    if meta.get("device") not in ("cpu", "cuda") or "shape" not in result["rows"][0]:
        raise MoesimError(
            "--repredict",
            f"{p} is not a torch-reference run (no device / validation shape recorded)",
            "re-predict runs of `moesim validate reference --device ...`; for other measurements use `moesim validate measured`",
        )
    return result


def repredict_result(
    result: dict[str, Any],
    hardware: HardwareProfile,
    cross_hardware: dict[str, HardwareProfile] | None = None,
    source: str = "",
) -> dict[str, Any]:
    """The earlier run's measured rows predicted with `hardware` (and each cross profile): rows + summary."""
    meta = result.get("meta", {})
    rows = predict_rows(meta, result["rows"], hardware, cross_hardware)
    summary = score_rows(rows, cross_hardware or {})
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


__all__ = ["load_result", "repredict_result"]
