"""Silicon profiles: moesim's terms fitted to NVIDIA aiconfigurator-core's measured kernel tables.

`tables` reads the parquet tables as data (schema-checked; the peer's estimator is never called), the
`*_fit` modules fit one group of profile fields each with held-out shapes (`holdout`), and `build` assembles a
profile of kind `silicon`. Needs pyarrow (`pip install 'moesim[silicon]'`); no torch.
"""
