"""Real mode: the engine driving actual drafter and target passes (`dsim serve`) and the
validation study (`dsim validate`). Imports `run`, `run_inputs`, the engine, `models` and
`hardware`; nothing but the CLI imports it."""
