"""Pricing: the one route from a scenario to its predicted speeds, below the fits and the answers: the budget curve
(each budget resolved, replayed and priced by the time model) and the synthetic workloads it replays. Pages,
commands and the calibration all price through it."""
