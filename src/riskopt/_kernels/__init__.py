"""Numba kernels: plain loops over arrays, no validation (that lives in Python).

Every kernel here has a slow pure-NumPy twin in ``tests/reference_impl.py``.
"""
from .._runtime import install_compile_listener

install_compile_listener()  # the "compiling riskopt kernels, first run only" notice
