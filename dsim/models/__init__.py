"""The real small models: the target (SmolLM2-135M), the drafter family, training data,
training, the speculative round, the ragged target pass with its KV cache, decoding,
acceptance-trace collection, the toy decoder and CPU profiles measured through the ragged pass.
Imports `acceptance`, `hardware` (the profile's measurement helpers) and the shared helpers;
never the engine, `run`, `pareto` or `real`."""

import warnings

# The GPU machine's scripts (serving_profile, engine_probes) run on torch alone: torch works
# without numpy and says so at import, once per process; silenced here, before any submodule
# imports torch.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
