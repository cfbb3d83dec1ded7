"""The `moesim` command group: thin wrappers that parse flags, call the library and print.

Each command's module is imported only when that command runs (or shows its help), so that `moesim --help`
starts without numpy; `COMMANDS` holds each command's one-line summary for the group's help, and a test
checks that it matches the command's own.
"""

from __future__ import annotations

import importlib

import click

from moesim import __version__
from moesim.commands.renamed import MoesimGroup

COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": (
        "moesim.commands.simulate:simulate_command",
        "One SD point: decode step, verification of K drafts, speedup.",
    ),
    "sweep": (
        "moesim.commands.simulate:sweep_command",
        "SD speedup over models × batches × draft lengths, with peaks.",
    ),
    "serve": (
        "moesim.commands.serve:serve_command",
        "A simulated `vllm bench serve` run, with and without SD.",
    ),
    "screen": (
        "moesim.commands.screen:screen_command",
        "Rank hypothetical MoE designs for SD, with a Pareto front.",
    ),
    "layer": (
        "moesim.commands.simulate:layer_command",
        "One MoE layer's expert block, routed to hit exactly U experts.",
    ),
    "models": (
        "moesim.commands.catalog:models_command",
        "The bundled models, or one model as moesim understood it.",
    ),
    "profiles": (
        "moesim.commands.catalog:profiles_group",
        "The bundled hardware profiles; derive one for unseen hardware.",
    ),
    "engines": (
        "moesim.commands.engines:engines_command",
        "The serving-engine profiles: host costs, graph sizes, sources.",
    ),
    "routing": (
        "moesim.commands.routing:routing_group",
        "Routing statistics: fit, inspect, predict, generate, record.",
    ),
    "calibrate": (
        "moesim.commands.calibrate:calibrate_command",
        "Measure this device's costs and fit a hardware profile.",
    ),
    "validate": (
        "moesim.commands.validate:validate_group",
        "Predictions against measurements: torch, CSVs, runs, benchmarks.",
    ),
}
"""Command name → (module:attribute, one-line summary shown by `moesim --help`)."""


class LazyGroup(MoesimGroup):
    """A group whose commands are imported when first used; --help lists them from `COMMANDS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, _, attribute = COMMANDS[cmd_name][0].partition(":")
        try:
            command = getattr(importlib.import_module(module), attribute)
        except KeyboardInterrupt:  # Ctrl-C while the command loads (numpy, scipy, ...)
            from moesim.commands.common import interrupted

            interrupted()
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in COMMANDS.items()])


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(__version__, prog_name="moesim")
def cli() -> None:
    """Predict how much speculative decoding speeds up Mixture-of-Experts models on real and unseen GPUs.

    \b
    Start here:
      moesim sweep                     # every bundled model on an H200 profile, SD speedup vs batch
      moesim simulate --model qwen3-30b-a3b --hardware h200 --batch 1 --draft-len 3
      moesim calibrate --device cpu --quick --output cpu.toml
      moesim validate reference --profile cpu.toml --device cpu --quick
    """


def main() -> None:
    """Console-script entry point."""
    cli()
