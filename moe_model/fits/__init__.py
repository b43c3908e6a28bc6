"""Fits: the time model's parameters across every measured machine (calibration), one machine from its own
logs (machine_fit), the measured points they rest on (points, log_timings) and routing fitted to logs."""
