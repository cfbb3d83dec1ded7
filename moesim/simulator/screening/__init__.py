"""Design screening: design spaces around a base model, constraints that keep designs comparable, chunked
fast-path evaluation on a local process pool or Ray, ranking and the Pareto front between small-batch SD
speedup and large-batch throughput.

May import every room below it (speculative/ included) and the scenario; never the API or the CLI.
"""
