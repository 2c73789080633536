"""Sphinx configuration of the riskopt documentation.

Build (warnings are errors)::

    make docs
    # or, in an environment with ``pip install -e ".[docs]"``:
    python -m sphinx -W --keep-going -b html docs build/docs/html

The API pages are generated from the numpydoc docstrings (``sphinx.ext.napoleon``); the CLI help,
the data-set table, the bundled benchmark specs and the solver table come from the code at build
time (``docs/_ext/riskopt_docs.py``), so they cannot drift from it.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

import riskopt  # noqa: E402

project = "riskopt"
author = "the riskopt developers"
copyright = "the riskopt developers, MIT licence"
release = riskopt.__version__
version = riskopt.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    # MathJax shipped with the site (copied to _static/mathjax when the build ends): the math
    # renders offline, nothing is loaded from a CDN
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "riskopt_docs",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"
language = "en"

# -- autodoc / napoleon (numpydoc-style docstrings) -------------------------------------------
autodoc_default_options = {"member-order": "bysource"}
autodoc_inherit_docstrings = False   # never show torch.nn.Module's or scikit-learn's text as ours
autodoc_typehints = "none"
autodoc_class_signature = "mixed"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = False
napoleon_use_rtype = False
napoleon_include_init_with_doc = False

# -- math -----------------------------------------------------------------------------------------
# the local copy of sphinx-mathjax-offline (MathJax 3, TeX input, CommonHTML output); set here
# as well as by the extension so that a CDN default of sphinx.ext.mathjax can never come back
mathjax_path = "mathjax/tex-chtml.js"

# -- HTML ---------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"riskopt {release}"
html_static_path = []
pygments_style = "sphinx"
