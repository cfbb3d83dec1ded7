"""Run `moesim calibrate` with the CPU timer reading this thread's CPU time instead of the wall clock.

Why: on a shared CPU (this 2-core development VM runs several engineers' tests at once) other processes
preempt the measuring thread, and wall-clock timings then measure the machine's load, not the CPU. With
one torch thread every op runs on the calling thread, so its CPU time is the op's own time (memory
stalls included). `moesim validate` times single-threaded CPU runs the same way (`--clock auto`).
Usage: python docs/validation/cpu/calibrate_thread_clock.py --device cpu --quick --threads 1 --output cpu.toml
"""

import sys
import time
import types

import moesim.calibrate.timing as timing
from moesim.commands.calibrate import calibrate_command

shim = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("__")})
shim.perf_counter_ns = time.thread_time_ns
shim.perf_counter = time.thread_time
timing.time = shim  # type: ignore[assignment]
calibrate_command(sys.argv[1:], prog_name="calibrate_thread_clock.py")
