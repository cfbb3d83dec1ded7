"""The shipped table of sampled routing statistics: what the seeded sequence banks of the catalogue's
typical routing give, so that a run does not simulate them again.

A correlated-routing bank is BANK_SEQUENCES sequences simulated token by token (a random draw and a top-k
selection over [sequences, experts] per token and layer parameter set): about a second of a whole-catalogue
sweep, for figures that depend only on the routing parameters and the seed. The table keeps, under a
digest of everything an entry depends on (`table_key`), the few numbers the simulator reads from them:
per bank, how many of its sequences use each expert within their first t tokens, and the overlap curve a
typical preset describes itself with. Entries are integers or float64, so looking one up gives the very
floats simulating gives. A key not in the table is simulated as before.

`python -m moesim.simulator.routing.bank_table_writer` rewrites the file; `tests/test_bank_table.py`
recomputes a sample of its entries and checks that every catalogue model's typical routing is in it.
"""

from __future__ import annotations

import functools
import hashlib
import zipfile
from importlib import resources
from pathlib import Path

import numpy as np

TABLE_FILE = "routing_bank_table.npz"


def table_key(kind: str, *parts: object) -> str:
    """The table's name for an entry of `kind` ("hits", "overlaps") whose figures depend on `parts`
    (plain numbers, strings and tuples of them: their repr is exact, so equal parameters give equal keys)."""
    digest = hashlib.sha256(repr((kind, *parts)).encode()).hexdigest()[:32]
    return f"{kind}-{digest}"


def table_path() -> Path:
    """Where the shipped table lives (moesim/data/)."""
    return Path(str(resources.files("moesim").joinpath("data", TABLE_FILE)))


@functools.cache
def _names() -> frozenset[str]:
    """The entries the shipped table holds (its zip directory: no entry is decompressed to list them)."""
    path = table_path()
    if not path.is_file():
        return frozenset()
    with zipfile.ZipFile(path) as archive:
        return frozenset(name.removesuffix(".npy") for name in archive.namelist())


@functools.cache
def shipped_entry(key: str) -> np.ndarray | None:
    """The shipped entry `key` (read-only), or None when the table does not hold it; only the entries a
    run asks for are read (a `simulate` needs one or two of them)."""
    if key not in _names():
        return None
    with np.load(table_path(), allow_pickle=False) as table:
        entry = table[key]
    entry.setflags(write=False)
    return entry


def write_table(entries: dict[str, np.ndarray], path: Path) -> None:
    """Write `entries` as the table at `path`: an `.npz` (compressed, in key order, with a fixed timestamp,
    so that equal tables are equal files)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in sorted(entries.items()):
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(member, "w") as out:
                np.lib.format.write_array(out, np.asarray(array), allow_pickle=False)
    _names.cache_clear()
    shipped_entry.cache_clear()


__all__ = ["TABLE_FILE", "shipped_entry", "table_key", "table_path", "write_table"]
