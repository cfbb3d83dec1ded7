"""`python -m moesim` runs the CLI (used where the console script is not installed)."""

from moesim.console import main

main()
