"""The serving-engine profile: host costs, CUDA-graph capture, drafter style, provenance; its TOML files.

A profile says what a serving engine adds to each forward step beyond the kernels the step model times.
Facts read from an engine's source (captured graph sizes, padding, what runs above them, drafter styles)
and documented defaults (host costs, with their source) live in `[graphs]`, `[drafter]` and `[host]`;
values fitted from measured runs live apart in `[fitted]` (same names as `[host]`, overriding them) with
their quality in `[fit_quality.<name>]`, so a reader always sees what was read and what was fitted.

Bundled profiles live in `moesim/hardware_profiles/engines/<name>.toml`; `ideal` adds nothing (the
simulator's kernel stream as it is).
"""

from __future__ import annotations

import difflib
import functools
import itertools
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from moesim.atomic import atomic_write_text
from moesim.errors import MoesimError
from moesim.reading import parse_toml, read_text
from moesim.toml_files import dump_toml

SUFFIX = ".toml"
IDEAL = "ideal"
CAPTURE_UNITS = ("sequences", "tokens")
PADDING_RULES = ("next_captured", "none")
UNCAPTURED_MODES = ("eager", "piecewise")
DRAFT_SHAPES = ("chain", "tree")
DRAFTER_LAUNCHES = ("target", "graph", "eager", "piecewise")
VERIFY_MODES = ("multi_token", "batch_expansion")
FIRST_PASSES = ("one_token", "verified")
DRAFTER_TPS = ("target", "one")
PASS_PREPARATIONS = ("device", "host_unless_tp1")
PROFILE_KINDS = ("ideal", "documented", "fitted")


@dataclass(frozen=True)
class HostParameter:
    """One host-cost parameter: unit, physical meaning, bounds a fit may use."""

    unit: str
    meaning: str
    lower: float
    upper: float


# The host parameters a profile carries and a fit may change (bounds are what is physically plausible
# for a CPU process driving one step: a step never costs the host more than 100 ms).
HOST_PARAMETERS: dict[str, HostParameter] = {
    "step_us": HostParameter(
        "µs", "host work per forward step (scheduling, input preparation, output processing)", 0.0, 1e5
    ),
    "per_sequence_us": HostParameter(
        "µs",
        "host work per running sequence per step (block tables, sampling metadata, detokenising)",
        0.0,
        1e3,
    ),
    "per_token_us": HostParameter(
        "µs", "host work per token the step processes (input ids, positions, sampler rows)", 0.0, 1e2
    ),
    "overlap_fraction": HostParameter(
        "1", "share of min(host, device) hidden behind the device by asynchronous scheduling", 0.0, 1.0
    ),
    "draft_step_us": HostParameter(
        "µs", "host work per drafter pass (proposer inputs, tree building)", 0.0, 1e4
    ),
    "accept_sync_us": HostParameter(
        "µs", "per SD round: the device-to-host copy of accepted counts before the next round", 0.0, 1e4
    ),
    "sd_overlap_kept": HostParameter(
        "1",
        "share of the asynchronous overlap (overlap_fraction) the engine keeps while SD runs: 1 when its "
        "overlap scheduler runs SD rounds too (SGLang spec-v2, vLLM V1 async scheduling), 0 when SD turns "
        "it off (SGLang spec v1, vLLM V0); it also hides the acceptance sync",
        0.0,
        1.0,
    ),
    "sd_per_sequence_us": HostParameter(
        "µs",
        "host work per sequence per SD round beyond a decode step's: acceptance bookkeeping (rejected "
        "drafts' computed tokens and KV slots rolled back), the draft-token list, output processing of "
        "the extra accepted tokens",
        0.0,
        1e3,
    ),
    "runner_pass_us": HostParameter(
        "µs",
        "host work of one drafter pass the host prepares and reads back (`[drafter] pass_preparation`): "
        "building the pass's inputs, broadcasting them to the other tensor-parallel workers, returning "
        "the sampled tokens to the host",
        0.0,
        1e4,
    ),
    "runner_per_row_us": HostParameter(
        "µs",
        "host work per row of such a host-prepared drafter pass (its inputs, its sampled token)",
        0.0,
        1e3,
    ),
    "ngram_base_us": HostParameter("µs", "n-gram (prompt lookup) drafting on the host per round", 0.0, 1e4),
    "ngram_per_sequence_us": HostParameter("µs", "n-gram drafting per sequence per round", 0.0, 1e3),
}

# Parameters the ideal profile keeps at their defaults rather than 0: the n-gram drafter's own host costs
# (moesim's, not an engine's) and the SD share of an overlap that is 0 anyway.
SCALING_PARAMETERS = ("sd_overlap_kept", "ngram_base_us", "ngram_per_sequence_us")


@dataclass(frozen=True)
class HostCosts:
    """Host work an engine adds per step (field meanings, units and bounds: `HOST_PARAMETERS`)."""

    step_us: float = 0.0
    per_sequence_us: float = 0.0
    per_token_us: float = 0.0
    overlap_fraction: float = 0.0
    draft_step_us: float = 0.0
    accept_sync_us: float = 0.0
    sd_overlap_kept: float = 1.0  # 1: SD rounds overlap as decode steps do (the ideal and older files)
    sd_per_sequence_us: float = 0.0
    runner_pass_us: float = 0.0
    runner_per_row_us: float = 0.0
    # moesim's n-gram defaults (speculative/drafters.py: a host-side suffix match, a few µs per sequence)
    ngram_base_us: float = 10.0
    ngram_per_sequence_us: float = 1.0


@dataclass(frozen=True)
class CudaGraphs:
    """Which steps replay a captured CUDA graph.

    `sizes` are the captured batch sizes (`capture_unit = "sequences"`) or token counts (`"tokens"`);
    empty means every size is captured (no padding). `max_tokens` > 0 also leaves steps of more tokens
    uncaptured (vLLM's max_cudagraph_capture_size). A step pads up to the next captured size
    (`padding = "next_captured"`); one that is not captured runs `uncaptured` (eager launches, or
    piecewise graphs with attention launched eagerly between them).
    """

    enabled: bool = True
    capture_unit: Literal["sequences", "tokens"] = "sequences"
    sizes: tuple[int, ...] = ()
    max_tokens: int = 0
    padding: Literal["next_captured", "none"] = "next_captured"
    uncaptured: Literal["eager", "piecewise"] = "eager"


@dataclass(frozen=True)
class DrafterStyle:
    """How the engine runs the drafter: a chain verifies K + 1 tokens per sequence, a tree its
    `tree_draft_tokens` (with tree-masked attention); drafter passes in graph replay, eager, piecewise
    graphs (each drafter layer's attention launched eagerly between graph pieces) or like the target step
    (`target`); a tree's drafter passes run `tree_topk` candidates per sequence;
    `draft_vocab_size` > 0 is a reduced drafter LM head (EAGLE-3). The target scores the drafts in one
    pass of q tokens per sequence (`multi_token`), or by batch expansion: q one-token rows per sequence,
    each attending over the whole context (vLLM V0's scorer with CUDA graphs).

    `first_pass`: a round's first drafter pass runs one token per sequence like the others (`one_token`,
    the ideal engine), or over the positions the round just verified (`verified`: K + 1 per sequence for a
    chain, the tree's draft tokens), which puts the accepted tokens into the drafter's KV cache before it
    proposes — vLLM 0.33.0 `v1/spec_decode/llm_base_proposer.py` `propose` and SGLang 0.5.23
    `speculative/eagle_worker_v2.py` `_draft_extend_for_decode` both do so (`speculative.drafters`).

    `draft_tp` / `head_tp`: the tensor parallelism a separate draft model / a hidden-state head (EAGLE,
    MTP) runs at on a multi-GPU layout: the target's (`target`, split like the target's attention), or
    unsplit on one of the target's GPUs while the others wait (`one`: vLLM 0.6.3 runs EAGLE only so).

    `pass_preparation`: how the proposer's K passes get their inputs. `device`: prepared on the device
    (each pass costs the host `draft_step_us`); `host_unless_tp1`: each pass's inputs are built on the
    host and its sampled tokens read back before the next (`runner_pass_us + runner_per_row_us × rows`,
    not hidden), unless the drafter runs at TP 1, when only the first pass is and the K − 1 others advance
    on the GPU (vLLM 0.6.3 `spec_decode/multi_step_worker.py` `sampler_output`).

    `bonus_rows`: every drafter pass also re-runs, for each sequence whose previous round accepted all K
    drafts, the position before its bonus token (which the drafter never saw) as an extra row: B·(1 + p)
    rows for a share p of such sequences (vLLM 0.6.3 `_expand_execute_model_request`)."""

    shape: Literal["chain", "tree"] = "chain"
    tree_draft_tokens: int = 0
    tree_topk: int = 1  # tree branching: each drafter pass extends this many candidates per sequence
    launch: Literal["target", "graph", "eager", "piecewise"] = "target"
    draft_vocab_size: int = 0
    verify_mode: Literal["multi_token", "batch_expansion"] = "multi_token"
    first_pass: Literal["one_token", "verified"] = "one_token"
    draft_tp: Literal["target", "one"] = "target"
    head_tp: Literal["target", "one"] = "target"
    pass_preparation: Literal["device", "host_unless_tp1"] = "device"
    bonus_rows: bool = False


@dataclass(frozen=True)
class SamplerPasses:
    """Bytes the engine's sampler and acceptance move over full-vocabulary tensors beyond what the step
    plan prices (one fp32 read of the logits per row, `plan.head`), counted from the engine's source; each
    a count of tensor passes × their element size, so 0 for an engine whose greedy path is an argmax.

    - `bytes_per_logit`: per row and vocabulary entry of every step, the sampler's own passes;
    - `sd_bytes_per_logit`: more per row and entry of every pass under SD (probabilities it keeps for the
      acceptance);
    - `draft_bytes_per_logit`: per sequence, draft position and entry of a round: the draft probabilities'
      copies and the rejection sampler over them;
    - `verify_bytes_per_logit`: per sequence, verified position and entry of a round: the target
      probabilities' copies.
    They run at the device's elementwise memory bandwidth (`breakdown` row `sampler`)."""

    bytes_per_logit: float = 0.0
    sd_bytes_per_logit: float = 0.0
    draft_bytes_per_logit: float = 0.0
    verify_bytes_per_logit: float = 0.0


@dataclass(frozen=True)
class EngineProvenance:
    """Where the profile's values came from: sources read (file and version), software, assumptions."""

    kind: Literal["ideal", "documented", "fitted"]
    engine: str
    sources: tuple[str, ...] = ()
    software: dict[str, str] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServingEngineProfile:
    """What one serving engine adds to each step (see the module docstring)."""

    name: str
    description: str
    host: HostCosts
    graphs: CudaGraphs
    drafter: DrafterStyle
    provenance: EngineProvenance
    fitted: dict[str, float] = field(default_factory=dict)
    fit_quality: dict[str, dict[str, float]] = field(default_factory=dict)
    sampler: SamplerPasses = SamplerPasses()

    @functools.cached_property
    def effective_host(self) -> HostCosts:
        """The host costs in force: documented defaults with fitted values applied over them."""
        return replace(self.host, **self.fitted)

    @property
    def is_ideal(self) -> bool:
        """True when the profile adds nothing to the kernel stream (today's simulator exactly)."""
        host = self.effective_host
        no_host = all(getattr(host, n) == 0.0 for n in HOST_PARAMETERS if n not in SCALING_PARAMETERS)
        graphs_as_given = self.graphs.enabled and not self.graphs.sizes and not self.graphs.max_tokens
        drafter_as_given = self.drafter == DrafterStyle() and self.sampler == SamplerPasses()
        defaults_as_given = all(getattr(host, n) == getattr(HostCosts, n) for n in SCALING_PARAMETERS)
        return no_host and graphs_as_given and drafter_as_given and defaults_as_given

    def with_fitted(
        self, values: dict[str, float], quality: dict[str, dict[str, float]], **prov: Any
    ) -> ServingEngineProfile:
        """A copy carrying fitted host values and their quality (validated), provenance kind `fitted`."""
        provenance = replace(self.provenance, kind="fitted", **prov)
        out = replace(self, fitted={**self.fitted, **values}, fit_quality=quality, provenance=provenance)
        profile_from_dict(profile_to_dict(out), f"fitted profile {self.name}")
        return out


# --- TOML ---------------------------------------------------------------------------------------------------

_SECTIONS = (
    "name",
    "description",
    "host",
    "graphs",
    "drafter",
    "sampler",
    "provenance",
    "fitted",
    "fit_quality",
)


def profile_to_dict(p: ServingEngineProfile) -> dict[str, Any]:
    """The profile as TOML-ready data (the inverse of `profile_from_dict`)."""
    out: dict[str, Any] = {
        "name": p.name,
        "description": p.description,
        "host": {k: float(v) for k, v in asdict(p.host).items()},
        "graphs": {**asdict(p.graphs), "sizes": list(p.graphs.sizes)},
        "drafter": asdict(p.drafter),
        "sampler": {k: float(v) for k, v in asdict(p.sampler).items()},
        "provenance": {
            "kind": p.provenance.kind,
            "engine": p.provenance.engine,
            "sources": list(p.provenance.sources),
            "software": dict(p.provenance.software),
            "assumptions": list(p.provenance.assumptions),
        },
    }
    if p.fitted:
        out["fitted"] = {k: float(v) for k, v in p.fitted.items()}
    if p.fit_quality:
        out["fit_quality"] = {k: {m: float(v) for m, v in q.items()} for k, q in p.fit_quality.items()}
    return out


class _Table:
    """One table of a profile file; every error names the file and the dotted field."""

    def __init__(self, source: str, section: str, data: Any, known: tuple[str, ...]) -> None:
        self.source, self.section = source, section
        if not isinstance(data, dict):
            raise self.error("", f"must be a table ([{section}])")
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise self.error(unknown[0], "is not a known field", f"known fields: {', '.join(known)}")
        self.data = data

    def error(self, key: str, problem: str, fix: str = "") -> MoesimError:
        dotted = f"{self.section}.{key}" if key else self.section
        return MoesimError(f"{self.source}: {dotted}", problem, fix)

    def get(self, key: str, default: Any) -> Any:
        return self.data.get(key, default)

    def number(self, key: str, default: float, lower: float, upper: float) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        if not lower <= value <= upper:
            raise self.error(key, f"must be in [{lower:g}, {upper:g}], got {value!r}")
        return float(value)

    def whole(self, key: str, default: int, lower: int = 0) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < lower:
            raise self.error(key, f"must be a whole number >= {lower}, got {value!r}")
        return int(value)

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> Any:
        value = self.get(key, default)
        if value not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "must be an array of strings")
        return tuple(value)


def _read_host(source: str, section: str, data: Any, defaults: dict[str, float]) -> dict[str, float]:
    table = _Table(source, section, data, tuple(HOST_PARAMETERS))
    return {
        name: table.number(name, defaults.get(name, 0.0), spec.lower, spec.upper)
        for name, spec in HOST_PARAMETERS.items()
        if name in table.data or name in defaults
    }


def _read_graphs(source: str, data: Any) -> CudaGraphs:
    t = _Table(source, "graphs", data, tuple(f.name for f in fields(CudaGraphs)))
    sizes = t.get("sizes", [])
    if not isinstance(sizes, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes
    ):
        raise t.error("sizes", "must be an array of positive whole numbers", "e.g. sizes = [1, 2, 4, 8]")
    if any(b <= a for a, b in itertools.pairwise(sizes)):
        raise t.error("sizes", "must be strictly increasing")
    return CudaGraphs(
        enabled=t.flag("enabled", True),
        capture_unit=t.choice("capture_unit", "sequences", CAPTURE_UNITS),
        sizes=tuple(sizes),
        max_tokens=t.whole("max_tokens", 0),
        padding=t.choice("padding", "next_captured", PADDING_RULES),
        uncaptured=t.choice("uncaptured", "eager", UNCAPTURED_MODES),
    )


def _read_drafter(source: str, data: Any) -> DrafterStyle:
    t = _Table(source, "drafter", data, tuple(f.name for f in fields(DrafterStyle)))
    style = DrafterStyle(
        shape=t.choice("shape", "chain", DRAFT_SHAPES),
        tree_draft_tokens=t.whole("tree_draft_tokens", 0),
        tree_topk=t.whole("tree_topk", 1, lower=1),
        launch=t.choice("launch", "target", DRAFTER_LAUNCHES),
        draft_vocab_size=t.whole("draft_vocab_size", 0),
        verify_mode=t.choice("verify_mode", "multi_token", VERIFY_MODES),
        first_pass=t.choice("first_pass", "one_token", FIRST_PASSES),
        draft_tp=t.choice("draft_tp", "target", DRAFTER_TPS),
        head_tp=t.choice("head_tp", "target", DRAFTER_TPS),
        pass_preparation=t.choice("pass_preparation", "device", PASS_PREPARATIONS),
        bonus_rows=t.flag("bonus_rows", False),
    )
    if style.shape == "tree" and style.tree_draft_tokens < 2:
        raise t.error(
            "tree_draft_tokens", "a tree verifies at least 2 tokens per sequence", "set it, e.g. 16"
        )
    return style


def _read_sampler(source: str, data: Any) -> SamplerPasses:
    t = _Table(source, "sampler", data, tuple(f.name for f in fields(SamplerPasses)))
    return SamplerPasses(**{f.name: t.number(f.name, 0.0, 0.0, 1e4) for f in fields(SamplerPasses)})


def _read_provenance(source: str, data: Any) -> EngineProvenance:
    t = _Table(source, "provenance", data, tuple(f.name for f in fields(EngineProvenance)))
    software = t.get("software", {})
    if not isinstance(software, dict) or not all(isinstance(v, str) for v in software.values()):
        raise t.error("software", 'must be a table of name = "version" strings')
    engine = t.get("engine", "")
    if not isinstance(engine, str) or not engine:
        raise t.error("engine", "must name the serving engine (vllm, sglang, trtllm, none)")
    return EngineProvenance(
        kind=t.choice("kind", "documented", PROFILE_KINDS),
        engine=engine,
        sources=t.strings("sources"),
        software=dict(software),
        assumptions=t.strings("assumptions"),
    )


def _read_fit_quality(source: str, data: Any) -> dict[str, dict[str, float]]:
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise MoesimError(f"{source}: fit_quality", "must be a table of [fit_quality.<name>] tables")
    out: dict[str, dict[str, float]] = {}
    for name, metrics in data.items():
        t = _Table(source, f"fit_quality.{name}", metrics, tuple(metrics))
        out[name] = {m: t.number(m, 0.0, -math.inf, math.inf) for m in metrics}
    return out


def profile_from_dict(d: Any, source: str) -> ServingEngineProfile:
    """Build and validate a profile from TOML data; `source` prefixes every error."""
    if not isinstance(d, dict):
        raise MoesimError(source, "is not a table of profile sections")
    unknown = sorted(set(d) - set(_SECTIONS))
    if unknown:
        raise MoesimError(
            f"{source}: {unknown[0]}", "is not a known section", f"known: {', '.join(_SECTIONS)}"
        )
    if "provenance" not in d:
        raise MoesimError(
            f"{source}: provenance", "section is missing", "add [provenance] with kind and engine"
        )
    name = d.get("name", Path(source).name.removesuffix(SUFFIX))
    if not isinstance(name, str) or not name.strip():
        raise MoesimError(f"{source}: name", f"must be a non-empty string, got {name!r}")
    description = d.get("description", "")
    if not isinstance(description, str):
        raise MoesimError(f"{source}: description", "must be a string")
    host = HostCosts(**_read_host(source, "host", d.get("host", {}), asdict(HostCosts())))
    fitted = _read_host(source, "fitted", d.get("fitted", {}), {})
    return ServingEngineProfile(
        name=name,
        description=description,
        host=host,
        graphs=_read_graphs(source, d.get("graphs", {})),
        drafter=_read_drafter(source, d.get("drafter", {})),
        sampler=_read_sampler(source, d.get("sampler", {})),
        provenance=_read_provenance(source, d["provenance"]),
        fitted=fitted,
        fit_quality=_read_fit_quality(source, d.get("fit_quality", {})),
    )


def render_profile(profile: ServingEngineProfile, header: str = "") -> str:
    """The profile as TOML text, validated first so an invalid profile is never written."""
    data = profile_to_dict(profile)
    profile_from_dict(data, f"serving engine {profile.name}")
    return dump_toml(data, header)


def save_profile(profile: ServingEngineProfile, path: str | os.PathLike[str], header: str = "") -> None:
    """Write the profile atomically (a reader never sees half a file)."""
    atomic_write_text(path, render_profile(profile, header))


def _parse(text: str, source: str) -> ServingEngineProfile:
    return profile_from_dict(parse_toml("--serving-engine", text, source, "serving-engine profile"), source)


def _bundled_dir() -> Any:
    return resources.files("moesim").joinpath("hardware_profiles", "engines")


def list_serving_engines() -> list[str]:
    """Names of the bundled serving-engine profiles (`ideal` first)."""
    names = sorted(e.name.removesuffix(SUFFIX) for e in _bundled_dir().iterdir() if e.name.endswith(SUFFIX))
    return sorted(names, key=lambda n: (n != IDEAL, n))


@functools.cache
def _bundled(name: str) -> ServingEngineProfile:
    """A bundled profile, parsed once per process (profiles are frozen; every scenario resolves one)."""
    entry = _bundled_dir().joinpath(name + SUFFIX)
    return _parse(entry.read_text(encoding="utf-8"), f"engines/{name}{SUFFIX}")


def load_serving_engine(name_or_path: str | ServingEngineProfile) -> ServingEngineProfile:
    """A bundled profile by name (`ideal`, `vllm`, `sglang`, `trtllm`) or any profile file by path."""
    if isinstance(name_or_path, ServingEngineProfile):
        return name_or_path
    known = list_serving_engines()
    name = name_or_path.strip().lower()
    if name in known:
        return _bundled(name)
    if name_or_path.endswith(SUFFIX) or os.sep in name_or_path or "/" in name_or_path:
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise MoesimError(
                "serving_engine",
                f"profile file {name_or_path} does not exist",
                "give a .toml path or a bundled name",
            )
        return _parse(read_text("--serving-engine", path, "serving-engine profile"), name_or_path)
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise MoesimError(
        "serving_engine",
        f"unknown serving engine {name_or_path!r}",
        f"{hint}known: {', '.join(known)}; or a path to a .toml profile (see `moesim engines`)",
    )
