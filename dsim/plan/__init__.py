"""`dsim plan`: the fewest GPUs and the best configuration per SLA tier (docs/plan.md).

targets.py (the step-time profiles searched), space.py (layouts x policies x K x max_num_seqs
per target), tiers.py (named tail SLAs), grid.py (each configuration's load bracket from the
step model and its grid), search.py (bisection on load over cached sweep points), answer.py
(per tier: the best per GPU, the fewest GPUs), launch.py (the winner's engine command),
report.py (plan.csv, points.csv, plan.png, report.md), pipeline.py and commands.py. Sits on
top: imports `pareto` (its cached points and colours), `run_inputs`, `run_spec`, `hardware`;
nothing below imports it."""
