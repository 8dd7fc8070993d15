"""Real mode: the engine driving actual drafter and target passes (`dsim serve`): the backend,
its workload and the runner. Imports `run`, `run_inputs`, the engine and `models`; only command
modules and `validation` import it."""
