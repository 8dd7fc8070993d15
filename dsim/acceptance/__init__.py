"""Acceptance: the parametric models and presets, measured acceptance traces and their replay,
vLLM scrapes, STS calibration and reliability, confidence discrimination and the spreads
measured on a trace (evidence). Imports only dsim's file and grammar helpers
(`errors`, `inputs`, `tables`, `fileio`, `spec_grammar`), never the engine or above."""
