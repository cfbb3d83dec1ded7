"""The torch reference: a real MoE forward step measured into rows, and the simulator's prediction of each row.

Two halves joined by the rows a run writes: measure (`measure`, `run`; torch, imported lazily by
`torch_model`) and predict (`predict.predict_rows`, `repredict`; pure, no torch), with `configs`,
`routing_replay` and `shapes` telling both how a row's model and forced routing are rebuilt. Reports and error
attribution in `report`.
"""
