"""Serving benchmarks: vLLM / SGLang result files read in (`results`) and measured against `moesim serve` on the
same workload (`compare`). No torch here.
"""
