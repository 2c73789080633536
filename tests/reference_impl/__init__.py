"""Slow pure-NumPy twins of every numba kernel (one module per solver family).

Each twin takes the same inputs as its kernel (objective arrays, state tables, the sample
index sequence) and is written for clarity, not speed, directly from the paper's pseudo-code.
"""
