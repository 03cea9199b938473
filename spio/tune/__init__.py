"""Performance models: predict each config's latency so the first call picks a near-best config.

collect (measure (params, config) samples on a GPU) → train (XGBoost on log latency, one model per
kernel family and GPU) → eval (regret of the top-1 pick on held-out layer shapes) → select.
"""
