"""Timing: the cost model (roofline with achieved efficiencies), the cache model, the launch model,
collective times, and the two timers behind one interface — the event timer and the closed-form fast path.

May import models/, hardware/, routing/ and plan/; never speculative/, the scenario or the API above it.
"""
