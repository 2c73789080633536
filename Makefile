# Two commands do everything on a fresh machine: `make demo` (main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export RISKOPT_DATA ?= $(abspath $(CURDIR)/../shared/data)
export NUMBA_CACHE_DIR ?= $(abspath $(CURDIR)/.numba_cache)

.PHONY: install warmup demo test test-slow bench-speed docs clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,bench]"
	$(PY) -m pip install -q "torch==2.13.0" && $(PY) -c "import torch" || \
		{ $(PY) -m pip uninstall -q -y torch || true; \
		  echo "torch not installed (or it does not import): its tests will be skipped"; }
	touch $@

install: $(VENV)/.installed

# compile (and cache) the numba kernels of the default fits and of the quick spec once
warmup: install
	$(VENV)/bin/riskopt warmup quick

demo: install warmup
	$(VENV)/bin/riskopt bench run quick --jobs 2
	$(PY) benchmarks/demo_tail.py --out results/quick

test: install
	$(PY) -m pytest -q -p no:cacheprovider

test-slow: install
	$(PY) -m pytest -q -p no:cacheprovider -m slow

bench-speed: install
	$(PY) benchmarks/speed.py

# The documentation site (Sphinx, warnings are errors) into build/docs/html.
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e ".[docs]"
	touch $@

docs: install $(VENV)/.docs-installed
	$(PY) -m sphinx -E -W --keep-going -q -b html docs build/docs/html
	@# math renders offline: MathJax is in the build and no page loads a script from the network
	@test -f build/docs/html/_static/mathjax/tex-chtml.js || \
		{ echo "docs: no MathJax in build/docs/html/_static/mathjax" >&2; exit 1; }
	@! grep -rlE '<script[^>]+src="(https?:)?//' --include='*.html' build/docs/html || \
		{ echo "docs: the pages above load a script from the network" >&2; exit 1; }
	@echo "documentation: build/docs/html/index.html"

clean:
	rm -rf $(VENV) .numba_cache results
