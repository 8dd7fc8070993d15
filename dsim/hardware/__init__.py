"""Hardware load profiles: reading and the step-time model, GPU estimates calibrated on
measured data (the model zoo, roofline, fits) and measurement. Imports only the shared
helpers, except `commands`, which reaches `dsim.models`' ragged pass to measure CPU profiles."""
