"""`python -m moesim` runs the CLI (used where the console script is not installed)."""

import os
import signal

# Ctrl-C before `moesim.interrupt` takes over (while the package itself loads): nothing has started, so stop
# with the shell's status for SIGINT and no traceback.
signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))

from moesim.console import main  # noqa: E402

main()
