"""The `moesim` command group: thin wrappers that parse flags, call the library and print."""

from __future__ import annotations

import click

from moesim import __version__
from moesim.commands.calibrate import calibrate_command
from moesim.commands.catalog import models_command, profiles_group
from moesim.commands.engines import engines_command
from moesim.commands.renamed import MoesimGroup
from moesim.commands.routing import routing_group
from moesim.commands.screen import screen_command
from moesim.commands.serve import serve_command
from moesim.commands.simulate import layer_command, simulate_command, sweep_command
from moesim.commands.validate import validate_command


@click.group(
    cls=MoesimGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(__version__, prog_name="moesim")
def cli() -> None:
    """Predict how much speculative decoding speeds up Mixture-of-Experts models on real and unseen GPUs.

    \b
    Start here:
      moesim sweep                     # every bundled model on an H200 profile, SD speedup vs batch
      moesim simulate --model qwen3-30b-a3b --hardware h200 --batch 1 --draft-len 3
      moesim calibrate --device cpu --quick --output cpu.toml
      moesim validate --profile cpu.toml --device cpu --quick
    """


for command in (
    simulate_command,
    sweep_command,
    screen_command,
    layer_command,
    models_command,
    profiles_group,
    engines_command,
    routing_group,
    calibrate_command,
    validate_command,
    serve_command,
):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli()
