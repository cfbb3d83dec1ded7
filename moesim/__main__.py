"""`python -m moesim` runs the CLI (used where the console script is not installed)."""

from moesim.cli import main

main()
