"""Uncalibrated profiles: a datasheet's facts with the documented empirical defaults (`defaults`), rendered
as the bundled datasheet profiles and regenerated from them (`python -m moesim.simulator.hardware.defaults`)."""

from __future__ import annotations

from pathlib import Path

from moesim.atomic import atomic_write_text
from moesim.simulator.hardware.defaults import default_assumption_notes, default_empirical
from moesim.simulator.hardware.profile import PROFILE_SUFFIX, HardwareProfile, load_profile, render_profile
from moesim.simulator.hardware.sections import Datasheet, NodeSpec, Provenance


def datasheet_profile(
    name: str,
    datasheet: Datasheet,
    node: NodeSpec,
    source: str,
    date: str = "",
    extra_assumptions: tuple[str, ...] = (),
) -> HardwareProfile:
    """An uncalibrated profile: datasheet facts plus the documented empirical defaults."""
    return HardwareProfile(
        name=name,
        datasheet=datasheet,
        empirical=default_empirical(datasheet),
        provenance=Provenance(
            kind="datasheet",
            source=source,
            date=date,
            software={},
            assumptions=tuple(extra_assumptions) + default_assumption_notes(datasheet),
        ),
        node=node,
    )


_HEADER = (
    "moesim hardware profile '{name}' (datasheet kind: no measurement behind [empirical]).\n"
    "[datasheet] and [node] hold facts; edit them here. [empirical] is generated from the documented\n"
    "defaults in moesim/simulator/hardware/defaults.py: after editing either, run\n"
    "`python -m moesim.simulator.hardware.defaults` (a test checks the two agree)."
)


def render_datasheet_profile(
    name: str,
    datasheet: Datasheet,
    node: NodeSpec,
    source: str,
    date: str = "",
    extra_assumptions: tuple[str, ...] = (),
) -> str:
    """The TOML text of a datasheet profile, [empirical] filled from `default_empirical`."""
    profile = datasheet_profile(name, datasheet, node, source, date, extra_assumptions)
    return render_profile(profile, header=_HEADER.format(name=name))


def bundled_profiles_dir() -> Path:
    """The source-tree directory of the bundled profiles (for regeneration; reading uses importlib)."""
    return Path(__file__).resolve().parents[2] / "hardware_profiles"


def regenerate_bundled_profiles(directory: Path | None = None) -> list[Path]:
    """Rewrite [empirical] and the default notes of every datasheet-kind profile in `directory`."""
    directory = bundled_profiles_dir() if directory is None else directory
    written = []
    for path in sorted(directory.glob(f"*{PROFILE_SUFFIX}")):
        old = load_profile(str(path))
        if old.provenance.kind != "datasheet":
            continue
        extras = tuple(a for a in old.provenance.assumptions if not a.startswith("empirical."))
        text = render_datasheet_profile(
            old.name, old.datasheet, old.node, old.provenance.source, old.provenance.date, extras
        )
        atomic_write_text(path, text)
        written.append(path)
    return written
