"""Several replicas behind a router, optionally with prefill and decode disaggregated."""
