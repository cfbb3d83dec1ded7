"""The `moesim` command group: thin wrappers that parse flags, call the library and print."""

from __future__ import annotations

import click

from moesim import __version__
from moesim.commands.catalog import models_command, profiles_group


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="moesim")
def cli() -> None:
    """Predict how much speculative decoding speeds up Mixture-of-Experts models on real and unseen GPUs.

    \b
    Start here:
      moesim simulate --model qwen3-30b-a3b --hardware h200 --batch 1 --draft-len 3
      moesim sweep --model qwen3-30b-a3b,mixtral-8x7b --hardware h200 --plot speedup.png
      moesim calibrate --device cpu --quick --output cpu.toml
    """


cli.add_command(models_command)
cli.add_command(profiles_group)


def main() -> None:
    """Console-script entry point."""
    cli()
