"""The bundled samples a user opens (model headers, logs, traces, ground-truth runs), installed as the package
`moe_model_samples` so that `moe_model.resources.data_path` finds them through importlib.resources; see docs/data.md.
"""
