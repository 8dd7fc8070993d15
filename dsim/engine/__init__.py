"""The serving engine: a simpy replica with continuous batching and speculative decoding, its
limits and cost models, backends, clocks, step log and per-request records. Imports only
`acceptance`, `hardware`, `workload` and the shared helpers; never `metrics`, `cluster`,
`run`, `pareto`, `real` or `models` (`tests/test_structure.py`)."""
