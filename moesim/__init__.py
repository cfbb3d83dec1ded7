"""moesim: a discrete-event simulator of speculative decoding on sparse Mixture-of-Experts models."""

__version__ = "0.1.0"
