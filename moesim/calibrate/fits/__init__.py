"""Pure fits from the suites' measurement tables to cost-model parameters (no torch): the primitives
(`primitives`), one fit per suite (`memory`, `launch`, `gemm`, `moe`) and the profile assembly (`build`).
"""
