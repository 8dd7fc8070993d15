"""dsim: design and compare speculative-decoding verification schedulers in simulation.

Data flows one way: the spec (`run_spec`, strings as the user wrote them) is read once by
`run_inputs` (through `spec_grammar`) into typed inputs; `run` drives the engine and cluster
over them; `metrics`, `pareto` and the reports analyse the records. Layers below never import
layers above (`tests/test_structure.py`); docs/design.md, Code layout, has the map.
"""

__version__ = "0.1.0"
