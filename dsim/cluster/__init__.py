"""Several replicas behind a router, optionally with prefill and decode disaggregated: the
resolved topology, routers, the KV link and per-replica figures. Imports the engine (its
replicas) and `metrics`; never `run`, `pareto` or `real`."""
