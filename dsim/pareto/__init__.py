"""`dsim pareto`: the sweep config, cached resumable sweep points (processes or Ray),
frontiers, SLA anchors, plots and the report. Sits on top: imports `run`, `run_inputs`,
`run_spec` and `policies`; nothing below imports it."""
