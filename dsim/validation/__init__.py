"""The validation study (`dsim validate`): the simulator's predictions against real-model runs
on this machine. `settings` (what a study asks for), `plan` (prompt split, rate rule),
`profiles` and `bursts` (on-machine profiles, engine calibration), `reference` (the pass timed
inside every run to price it), `drift` (a run's drift within it), `step_check` (real steps
priced by the step model), `runs` (a real run and its simulations), `figures` and `report`
(outputs), `study` (the whole), `commands` (the CLI). Imports `real`, `run`, `run_inputs`, the
engine, `models`, `hardware` and `acceptance`; only the CLI imports it."""
