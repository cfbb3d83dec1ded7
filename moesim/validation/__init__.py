"""Validation: the simulator's predictions against measurements, by subject.

- `reference/`: the torch reference step, measured into rows (torch, imported lazily) and predicted from the
  same rows (pure): measure | predict | report, with the configurations, forced routing and shapes both halves
  rebuild a row from;
- `runs/`: measured speculative-decoding serving runs: the CSV schema and reading, each row's prediction under
  a serving engine and its score, and the serving-engine host parameters fitted to them;
- `bench/`: vLLM / SGLang benchmark results read in, and measured against `moesim serve`.
"""
