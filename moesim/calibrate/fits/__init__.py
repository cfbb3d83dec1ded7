"""Pure fits from the suites' measurement tables to cost-model parameters (no torch): the primitives
(`primitives`), one fit per suite (`memory`, `launch`, `gemm`, `moe`) and the profile assembly (`build`); `silicon/`
fits the same kind of terms to NVIDIA aiconfigurator-core's measured kernel tables (`--from-silicon`).
"""
