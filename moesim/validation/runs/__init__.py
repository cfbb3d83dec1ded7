"""Measured speculative-decoding serving runs: the CSV schema and reading (`schema`), each representable row
predicted under a serving engine and scored (`predict`), and the serving-engine host parameters fitted to the
runs (`fit`). No torch here.
"""
