"""dsim: design and compare speculative-decoding verification schedulers in simulation."""

__version__ = "0.1.0"
