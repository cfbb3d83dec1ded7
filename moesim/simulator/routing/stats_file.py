"""The routing statistics file (`moesim routing fit` output): fitted per-layer parameters plus the empirical
statistics they came from, as JSON. `load_routing_stats` turns it back into a RoutingModel."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from moesim.atomic import atomic_write_text
from moesim.errors import MoesimError
from moesim.reading import read_json_table
from moesim.simulator.bounds import MAX_EXPERTS, check_count
from moesim.simulator.routing.correlated import CorrelatedRouting, LayerRouting

FORMAT = "moesim-routing-stats"
STATS_SUFFIXES = (".json",)  # what `routing fit` writes: JSON (the reader goes by content, not the name)
VERSION = 1
DEFINITIONS = (
    "overlap[d-1] = mean |S_t ∩ S_(t+d)| / k over tokens t, t+d of one sequence; baseline_overlap = the same "
    "over tokens of different sequences; distinct_vs_tokens[T-1] = mean distinct experts of T consecutive "
    "tokens of one sequence; params: each token's k experts are the top-k of log(popularity) + sigma·(√"
    "sequence_share·z_sequence + √(1 − sequence_share)·y_token) + Gumbel noise, z fixed per sequence, y an AR(1) "
    "process with coefficient token_corr"
)


def _clean(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    if isinstance(value, np.generic):
        return _clean(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def layer_params_dict(layer: LayerRouting) -> dict[str, Any]:
    return {
        "sigma": layer.sigma,
        "sequence_share": layer.sequence_share,
        "token_corr": layer.token_corr,
        "popularity": list(layer.popularity),
    }


def stats_document(
    model: CorrelatedRouting, statistics: list[dict[str, Any]] | None = None, source: str = ""
) -> dict[str, Any]:
    """The JSON document of a fitted model and (optionally) its empirical per-layer statistics."""
    by_layer = {int(s["layer"]): s for s in statistics or []}
    default_index = next((i for i, layer in model.layers if layer == model.default), None)
    layers = []
    for index, layer in model.layers or ((0, model.default),):
        entry: dict[str, Any] = {"layer": index, "params": layer_params_dict(layer)}
        if index in by_layer:
            entry["empirical"] = {key: value for key, value in by_layer[index].items() if key != "layer"}
        layers.append(entry)
    return _clean(
        {
            "format": FORMAT,
            "version": VERSION,
            "source": source,
            "assumption": model.assumption,
            "n_experts": model.n_experts,
            "top_k": model.top_k,
            "n_groups": model.default.n_groups,
            "topk_groups": model.default.topk_groups,
            "seed": model.seed,
            "default_layer": default_index if default_index is not None else layers[0]["layer"],
            "definitions": DEFINITIONS,
            "layers": layers,
        }
    )


def save_routing_stats(
    path: str | Path,
    model: CorrelatedRouting,
    statistics: list[dict[str, Any]] | None = None,
    source: str = "",
) -> None:
    atomic_write_text(path, json.dumps(stats_document(model, statistics, source), indent=1) + "\n")


def _number(where: str, data: dict[str, Any], key: str, kind: type = float) -> Any:
    if key not in data:
        raise MoesimError(where, f"missing `{key}`", "regenerate the file with `moesim routing fit`")
    try:
        return kind(data[key])
    except (TypeError, ValueError, OverflowError):
        raise MoesimError(where, f"`{key}` must be a number, got {data[key]!r}") from None


def load_routing_stats(path: str | Path, field: str = "--routing") -> CorrelatedRouting:
    """Load a routing statistics file as a RoutingModel (a CorrelatedRouting with per-layer parameters)."""
    where = str(path)
    document = read_json_table(field, path, "routing statistics file (JSON)")
    if document.get("format") != FORMAT:
        raise MoesimError(where, f"not a routing statistics file (expected format {FORMAT!r})")
    n = check_count(_number(where, document, "n_experts", int), "n_experts", where, high=MAX_EXPERTS)
    k = check_count(_number(where, document, "top_k", int), "top_k", where, high=MAX_EXPERTS)
    groups = {
        "n_groups": check_count(
            _number(where, {"n_groups": 1} | document, "n_groups", int), "n_groups", where
        ),
        "topk_groups": check_count(
            _number(where, {"topk_groups": 1} | document, "topk_groups", int), "topk_groups", where
        ),
    }
    entries = document.get("layers")
    if not isinstance(entries, list) or not entries:
        raise MoesimError(where, "`layers` must be a non-empty list")
    layers: list[tuple[int, LayerRouting]] = []
    for entry in entries:
        index = _number(where, entry, "layer", int)
        params = entry.get("params")
        if not isinstance(params, dict):
            raise MoesimError(f"{where}: layer {index}", "missing `params`")
        popularity = params.get("popularity")
        if not isinstance(popularity, list) or len(popularity) != n:
            raise MoesimError(f"{where}: layer {index}", f"`popularity` must list {n} weights")
        try:
            layer = LayerRouting(
                tuple(float(p) for p in popularity),
                k,
                _number(f"{where}: layer {index}", params, "sigma"),
                _number(f"{where}: layer {index}", params, "sequence_share"),
                _number(f"{where}: layer {index}", params, "token_corr"),
                **groups,
            )
        except MoesimError as error:
            raise MoesimError(f"{where}: layer {index}", str(error)) from None
        layers.append((index, layer))
    default_index = int(document.get("default_layer", layers[0][0]))
    default = dict(layers).get(default_index, layers[0][1])
    return CorrelatedRouting(
        default,
        tuple(layers),
        assumption=f"correlated routing fitted to {document.get('source') or 'a trace'} ({Path(path).name})",
        seed=int(document.get("seed", 0)),
    )
