"""Real mode: the engine driving actual drafter and target passes (`dsim serve`), the ragged
forward pass and CPU profiling. Imports `run`, `run_inputs`, the engine, `models` and
`hardware`; only command modules and `validation` import it."""
