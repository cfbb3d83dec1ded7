"""`python -m moesim` runs the CLI (used where the console script is not installed)."""

import sys

try:
    from moesim.cli import main
except KeyboardInterrupt:  # Ctrl-C while the CLI loads: stop at once, no traceback
    sys.exit(130)

main()
