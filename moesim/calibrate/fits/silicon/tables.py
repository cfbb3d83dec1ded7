"""The reader of NVIDIA's aiconfigurator-core silicon database: measured kernel tables as data.

aiconfigurator-core 0.12.0 (Apache-2.0, `pip install 'moesim[silicon]'`) ships, under
`aiconfigurator_core/systems/data/`, one parquet table per measured operation:

    <system>/<op>/<framework>/<version>/<table>.parquet     e.g. h200_sxm/moe/sglang/0.5.14/moe_perf.parquet

`system` and `framework` are the database's own names (`h200_sxm`, `sglang`); `latency` is in milliseconds
(in `moe_a2a_perf`, microseconds).
This module finds the tables without importing the package (its estimator is never called: moesim fits its
own terms), lists them with their row counts from the parquet footers, picks one version per table for a
`SYSTEM/FRAMEWORK[/VERSION]` selection, and reads the columns a fit needs after checking them against the
schemas below. Everything it refuses ends in one `MoesimError` naming the file and the column.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moesim.errors import MoesimError

PACKAGE = "aiconfigurator_core"
PINNED_VERSION = "0.12.0"
LICENCE = "Apache-2.0"
DATA_SUBDIR = ("systems", "data")
INSTALL_FIX = "pip install 'moesim[silicon]' (aiconfigurator-core==0.12.0), or give --silicon-data DIR"
# The collective libraries' own tables sit beside the frameworks' (comm/nccl/<version>/nccl_perf.parquet);
# every framework of a system uses them.
SHARED_FRAMEWORKS = ("nccl",)

_INT, _FLOAT, _STR = "int", "float", "str"
# The columns each fitted table must carry, with their kind (pyarrow integer, floating or string types).
SCHEMAS: dict[str, dict[str, str]] = {
    "gemm_perf": {
        "kernel_source": _STR,
        "gemm_dtype": _STR,
        "m": _INT,
        "n": _INT,
        "k": _INT,
        "latency": _FLOAT,
    },
    "moe_perf": {
        "kernel_source": _STR,
        "moe_dtype": _STR,
        "num_tokens": _INT,
        "hidden_size": _INT,
        "inter_size": _INT,
        "topk": _INT,
        "num_experts": _INT,
        "moe_tp_size": _INT,
        "moe_ep_size": _INT,
        "distribution": _STR,
        "latency": _FLOAT,
    },
    "generation_attention_perf": {
        "kernel_source": _STR,
        "batch_size": _INT,
        "isl": _INT,
        "num_heads": _INT,
        "num_key_value_heads": _INT,
        "head_dim": _INT,
        "attn_dtype": _STR,
        "kv_cache_dtype": _STR,
        "step": _INT,
        "latency": _FLOAT,
    },
    "context_attention_perf": {
        "kernel_source": _STR,
        "batch_size": _INT,
        "isl": _INT,
        "num_heads": _INT,
        "num_key_value_heads": _INT,
        "head_dim": _INT,
        "attn_dtype": _STR,
        "kv_cache_dtype": _STR,
        "latency": _FLOAT,
    },
    "generation_mla_perf": {
        "kernel_source": _STR,
        "mla_dtype": _STR,
        "kv_cache_dtype": _STR,
        "num_heads": _INT,
        "batch_size": _INT,
        "isl": _INT,
        "tp_size": _INT,
        "step": _INT,
        "latency": _FLOAT,
    },
    "context_mla_perf": {
        "kernel_source": _STR,
        "mla_dtype": _STR,
        "num_heads": _INT,
        "batch_size": _INT,
        "isl": _INT,
        "tp_size": _INT,
        "latency": _FLOAT,
    },
    "custom_allreduce_perf": {
        "kernel_source": _STR,
        "allreduce_dtype": _STR,
        "num_gpus": _INT,
        "message_size": _INT,
        "latency": _FLOAT,
    },
    "nccl_perf": {
        "op_name": _STR,
        "nccl_dtype": _STR,
        "num_gpus": _INT,
        "message_size": _INT,
        "latency": _FLOAT,
    },
    # the MoE all-to-all (DeepEP dispatch / combine): SGLang's two tables, TensorRT-LLM's and vLLM's one
    "wideep_deepep_ll_perf": {
        "node_num": _INT,
        "hidden_size": _INT,
        "num_token": _INT,
        "num_topk": _INT,
        "num_experts": _INT,
        "dispatch_avg_t_us": _FLOAT,
        "combine_avg_t_us": _FLOAT,
    },
    "wideep_deepep_normal_perf": {
        "node_num": _INT,
        "hidden_size": _INT,
        "num_token": _INT,
        "num_topk": _INT,
        "num_experts": _INT,
        "dispatch_sms": _INT,
        "dispatch_transmit_us": _FLOAT,
        "combine_sms": _INT,
        "combine_transmit_us": _FLOAT,
    },
    "moe_a2a_perf": {
        "comm_backend": _STR,
        "phase": _STR,
        "comm_dtype": _STR,
        "ep_size": _INT,
        "node_num": _INT,
        "hidden_size": _INT,
        "topk": _INT,
        "num_experts": _INT,
        "num_tokens": _INT,
        "latency": _FLOAT,  # µs in this table
    },
}


# Columns read when a table has them (older collections lack them): a100_sxm's attention tables predate
# sliding-window rows and carry no `window_size` (every row is full attention).
OPTIONAL_COLUMNS: dict[str, dict[str, str]] = {
    "generation_attention_perf": {"window_size": _INT},
    "context_attention_perf": {"window_size": _INT},
}


# The tables `build` fits profile fields to (the others are listed, and the attention ones schema-checked).
FITTED_TABLES = (
    "moe_perf",
    "gemm_perf",
    "nccl_perf",
    "custom_allreduce_perf",
    "generation_attention_perf",
    "generation_mla_perf",
    "context_attention_perf",
    "context_mla_perf",
    "wideep_deepep_ll_perf",
    "wideep_deepep_normal_perf",
    "moe_a2a_perf",
)


@dataclass(frozen=True)
class Collection:
    """One table of one (system, op, framework, version) collection, with its row count."""

    system: str
    op: str
    framework: str
    version: str
    table: str
    path: Path
    rows: int

    @property
    def label(self) -> str:
        """`system/framework/version/table` as the provenance of a fitted field names it."""
        return f"{self.system}/{self.framework}/{self.version}/{self.table}"


def database_root(path: str | Path | None = None) -> Path:
    """The directory of the tables: `path` if given, else the installed aiconfigurator-core's data."""
    if path is not None:
        root = Path(path).expanduser()
        if not root.is_dir():
            raise MoesimError(
                "--silicon-data", f"{root} is not a directory", "give the systems/data directory"
            )
        return root
    spec = importlib.util.find_spec(PACKAGE)  # locates the package without running its __init__
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise MoesimError("--from-silicon", "aiconfigurator-core is not installed", INSTALL_FIX)
    root = Path(locations[0]).joinpath(*DATA_SUBDIR)
    if not root.is_dir():
        raise MoesimError("--from-silicon", f"the installed aiconfigurator-core has no {root}", INSTALL_FIX)
    return root


def installed_version() -> str:
    """The installed aiconfigurator-core's version ('' when not installed or a directory is read)."""
    from importlib import metadata

    try:
        return metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        return ""


def scan(root: Path) -> list[Collection]:
    """Every table under `root`, its rows read from the parquet footer (no data is loaded)."""
    import pyarrow.parquet as pq

    out = []
    for path in sorted(root.glob("*/*/*/*/*.parquet")):
        version_dir = path.parent
        framework_dir = version_dir.parent
        op_dir = framework_dir.parent
        try:
            rows = pq.read_metadata(path).num_rows
        except Exception as exc:  # pyarrow raises several types for a damaged footer
            raise MoesimError(
                str(path), f"is not a readable parquet file ({exc})", "reinstall the package"
            ) from None
        out.append(
            Collection(
                system=op_dir.parent.name,
                op=op_dir.name,
                framework=framework_dir.name,
                version=version_dir.name,
                table=path.stem,
                path=path,
                rows=int(rows),
            )
        )
    if not out:
        raise MoesimError("--silicon-data", f"{root} holds no <system>/<op>/<framework>/<version>/*.parquet")
    return out


def version_key(version: str) -> Any:
    """Sort key of a framework version (PEP 440: 1.3.0rc20 > 1.3.0rc10, 0.5.6.post2 > 0.5.6)."""
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


@dataclass(frozen=True)
class Selection:
    """A `SYSTEM/FRAMEWORK[/VERSION]` choice and the one collection per table it resolves to."""

    system: str
    framework: str
    version: str  # as asked; '' = the newest of each table
    tables: dict[str, Collection]

    @property
    def name(self) -> str:
        return f"{self.system}/{self.framework}" + (f"/{self.version}" if self.version else "")

    def get(self, table: str) -> Collection | None:
        return self.tables.get(table)


def parse_selection(text: str) -> tuple[str, str, str]:
    """'h200_sxm/sglang' or 'h200_sxm/sglang/0.5.14' → (system, framework, version or '')."""
    parts = [p for p in text.strip().split("/")]
    if len(parts) not in (2, 3) or not all(parts):
        raise MoesimError(
            "--from-silicon",
            f"expected SYSTEM/FRAMEWORK[/VERSION], got {text!r}",
            "e.g. h200_sxm/sglang or h200_sxm/sglang/0.5.14; `--from-silicon list` shows them",
        )
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


def primary_release(collections: list[Collection]) -> str:
    """The framework version whose collection holds the most tables (ties: the newer): its main release.
    A later version holding a few re-collected tables (trtllm 1.3.0rc23's one-dtype moe_perf on b200_sxm)
    does not replace it."""
    counts: dict[str, int] = {}
    for c in collections:
        counts[c.version] = counts.get(c.version, 0) + 1
    return max(counts, key=lambda v: (counts[v], version_key(v)))


def select(collections: Iterable[Collection], text: str) -> Selection:
    """For each table of the system under the framework (and the shared collective tables), the newest
    collection at or below the framework's release: the one asked (/VERSION), else its primary release
    (`primary_release`), so a table re-collected later for a few shapes does not hide the full one."""
    system, framework, version = parse_selection(text)
    items = list(collections)
    systems = sorted({c.system for c in items})
    if system not in systems:
        raise MoesimError("--from-silicon", f"unknown system {system!r}", f"known: {', '.join(systems)}")
    frameworks = sorted({c.framework for c in items if c.system == system} - set(SHARED_FRAMEWORKS))
    if framework not in frameworks:
        raise MoesimError(
            "--from-silicon", f"{system} has no framework {framework!r}", f"known: {', '.join(frameworks)}"
        )
    own = [c for c in items if c.system == system and c.framework == framework]
    versions = sorted({c.version for c in own}, key=version_key)
    if version and version not in versions:
        raise MoesimError(
            "--from-silicon",
            f"{system}/{framework} has no version {version!r}",
            f"known: {', '.join(versions)}",
        )
    release = version or primary_release(own)
    own = [c for c in own if version_key(c.version) <= version_key(release)]
    shared = [c for c in items if c.system == system and c.framework in SHARED_FRAMEWORKS]
    chosen: dict[str, Collection] = {}
    for c in sorted(own + shared, key=lambda c: (c.framework in SHARED_FRAMEWORKS, version_key(c.version))):
        if c.framework in SHARED_FRAMEWORKS and c.table in chosen and chosen[c.table].framework == framework:
            continue  # the framework's own table wins over the shared one of the same name
        chosen[c.table] = c
    return Selection(system, framework, version, chosen)


def _kind(arrow_type: Any) -> str:
    import pyarrow.types as pt

    if pt.is_integer(arrow_type):
        return _INT
    if pt.is_floating(arrow_type):
        return _FLOAT
    if pt.is_string(arrow_type) or pt.is_large_string(arrow_type):
        return _STR
    return str(arrow_type)


def read_columns(collection: Collection, columns: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The table's `columns` (default: its schema's) as numpy arrays, after checking names and kinds.

    Numbers come back as int64 / float64 arrays, strings as object arrays; a missing column, a column of
    another kind, or a non-positive / non-finite latency is refused naming the file and the column.
    """
    import pyarrow.parquet as pq

    schema = SCHEMAS.get(collection.table)
    if schema is None:
        raise MoesimError(
            collection.label, "has no schema moesim reads", f"tables read: {', '.join(SCHEMAS)}"
        )
    arrow_schema = pq.read_schema(collection.path)
    optional = OPTIONAL_COLUMNS.get(collection.table, {})
    schema = {**schema, **{name: kind for name, kind in optional.items() if name in arrow_schema.names}}
    wanted = list(columns) if columns is not None else list(schema)
    for name in wanted:
        expected = schema.get(name)
        if name not in arrow_schema.names:
            raise MoesimError(
                f"{collection.label}: {name}",
                "column is missing",
                f"the table has {', '.join(arrow_schema.names)}; moesim reads aiconfigurator-core {PINNED_VERSION}",
            )
        got = _kind(arrow_schema.field(name).type)
        if expected is not None and got != expected:
            raise MoesimError(f"{collection.label}: {name}", f"is {got}, expected {expected}")
    table = pq.read_table(collection.path, columns=wanted)
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        column = table.column(name)
        kind = schema.get(name, _kind(column.type))
        if kind == _STR:
            out[name] = np.asarray(column.to_pylist(), dtype=object)
        else:
            out[name] = column.to_numpy().astype(np.int64 if kind == _INT else np.float64)
    latency = out.get("latency")
    if latency is not None and latency.size and not (np.all(np.isfinite(latency)) and np.all(latency > 0)):
        bad = int(np.nonzero(~(np.isfinite(latency) & (latency > 0)))[0][0])
        raise MoesimError(f"{collection.label}: latency", f"row {bad} is {latency[bad]!r}", "expected ms > 0")
    return out


def listing(collections: list[Collection], root: Path) -> str:
    """The text of `moesim calibrate --from-silicon list`: systems, frameworks, versions, tables, rows."""
    version = installed_version()
    lines = [
        f"silicon database: {root} ({PACKAGE.replace('_', '-')} {version or 'directory'}, {LICENCE}); "
        f"{len(collections)} tables, {sum(c.rows for c in collections):,} rows",
        "SYSTEM/FRAMEWORK/VERSION: table rows ... (fitted tables marked *)",
    ]
    keys = sorted({(c.system, c.framework, c.version) for c in collections})
    for system in sorted({k[0] for k in keys}):
        lines.append(system)
        for _, framework, ver in sorted(
            (k for k in keys if k[0] == system), key=lambda k: (k[1], version_key(k[2]))
        ):
            tables = sorted(
                (c for c in collections if (c.system, c.framework, c.version) == (system, framework, ver)),
                key=lambda c: c.table,
            )
            cells = " ".join(f"{c.table}{'*' if c.table in FITTED_TABLES else ''} {c.rows:,}" for c in tables)
            lines.append(f"  {framework}/{ver}: {cells}")
    return "\n".join(lines)
