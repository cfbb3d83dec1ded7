"""Design screening: design spaces around a base model, comparability constraints, evaluation on a local
process pool or Ray, ranking and the Pareto front between small-batch SD speedup and large-batch throughput."""
