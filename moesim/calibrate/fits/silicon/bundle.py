"""Regenerate the bundled silicon profiles: one per system × framework of the database that moesim has a
datasheet profile for (`build.SYSTEM_PROFILES`), newest version of each table.

    python -m moesim.calibrate.fits.silicon.bundle          # writes moesim/hardware_profiles/silicon/*.toml
"""

from __future__ import annotations

import sys
from pathlib import Path

from moesim.calibrate.fits.silicon import tables
from moesim.calibrate.fits.silicon.build import SYSTEM_PROFILES, calibrate_from_silicon
from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import list_profiles, save_profile

BUNDLED_DIR = Path(__file__).resolve().parents[3] / "hardware_profiles" / "silicon"


def bundle(directory: Path = BUNDLED_DIR, root: str | None = None) -> list[Path]:
    collections = tables.scan(tables.database_root(root))
    known = set(list_profiles())
    written = []
    directory.mkdir(parents=True, exist_ok=True)
    pairs = sorted(
        {(c.system, c.framework) for c in collections if c.framework not in tables.SHARED_FRAMEWORKS}
    )
    for system, framework in pairs:
        if SYSTEM_PROFILES.get(system) not in known:
            continue
        try:
            result = calibrate_from_silicon(f"{system}/{framework}", root)
        except MoesimError as error:  # a pair with no fitted table
            print(f"skipped {system}/{framework}: {error}", file=sys.stderr)
            continue
        path = directory / f"{result.profile.name}.toml"
        save_profile(
            result.profile, path, header=f"moesim silicon profile '{result.profile.name}' (bundle.py)"
        )
        written.append(path)
        print(f"wrote {path}", file=sys.stderr)
    return written


if __name__ == "__main__":  # pragma: no cover
    bundle()
