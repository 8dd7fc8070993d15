"""The real small models: the target (SmolLM2-135M), the drafter family, training data,
training, decoding, acceptance-trace collection and the toy decoder. Imports `acceptance`
and the shared helpers; never the engine, `run`, `pareto` or `real`."""
