"""Architecture rules of ``src/riskopt``, checked statically with :mod:`ast` (nothing imported).

Import graph
------------
Every ``import`` / ``from ... import`` statement at any depth (module level, inside functions,
inside ``if TYPE_CHECKING`` blocks, inside ``try``) is an edge, relative imports resolved
against the importing module. ``from pkg import name`` where ``pkg.name`` is a module of the
package is an edge to that submodule (and to ``pkg/__init__``, which Python runs first). A
package ``__init__`` importing its own submodules is fine; a submodule importing its parent
package (``from . import x`` where ``x`` is not a module, ``from .. import samplers`` resolves
to the submodule) is an edge to the ``__init__``. Imports outside ``riskopt`` are ignored.

Rules
-----
* no import cycle between modules (a package ``__init__`` importing its own submodules does
  not count as the reverse of their imports of it: those edges are dropped for the check,
  since Python runs ``__init__`` first and a submodule may use its package's already-bound
  names only lazily; an import of the *parent* package from a submodule is kept, so a
  submodule that imports ``riskopt`` while ``riskopt/__init__`` imports it is reported);
* layering, lowest first; a module may import from its own layer or lower ones, never from a
  higher one:

  ====  ==============================================================================
  0     ``_validation``, ``_kernels`` (numba loops; they see only arrays), ``_plugins``
        (the entry-point loader; standard library only), ``_kl`` (the KL-DRO maths, NumPy),
        ``_runtime`` (the compile notice and the Ctrl-C exit; standard library only)
  1     ``losses``, ``risks``, ``samplers``, ``datasets`` (data and the problem pieces),
        ``_scaling`` (the estimators' standardised coordinates; reads the risk classes)
  2     ``objectives`` (the problem families; L-BFGS for their reference optimum lives
        in ``objectives/_lbfgs.py``)
  3     ``callbacks``, ``metrics`` (traces, timeouts, per-group metrics; they see
        objectives only through arguments), ``fairness`` (the constrained solver)
  4     ``solvers`` (the one run loop, the registry, one module per method)
  5     ``estimators``, ``_estimator_solve`` (their solver runs), ``_degenerate`` (their
        useless-model check), ``torch``, ``bench`` (users of solvers), ``_fair`` and
        ``_estimator_params`` (the estimators' fairness glue and parameter constraints)
  6     ``_cli_fit``, ``_cli_table`` (its input table), ``_cli_evaluate``, ``_cli_fair``,
        ``_warmup``, ``cli``, ``model_io`` (model files), ``__main__`` (``python -m
        riskopt``), ``riskopt/__init__`` (entry points and re-exports)
  ====  ==============================================================================

  The top-level package ``riskopt/__init__`` re-exports from every layer, so it sits on top;
  a module of a lower layer importing ``riskopt`` itself is an upward import.
* no source file over 800 lines;
* no ``DRIVERS`` name (the per-family driver table is gone);
* ``spl`` / ``splplus`` (whole words / identifiers, any case) in no generic module: the
  benchmark runner, the spec schema, the plotting / figures module and the CLI.
"""
import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "riskopt"

LAYERS = [
    ("_validation", "_kernels", "_plugins", "_kl", "_design", "_runtime"),
    ("losses", "risks", "samplers", "datasets", "_scaling"),
    ("objectives",),
    ("callbacks", "metrics", "fairness"),
    ("solvers",),
    ("estimators", "_estimator_solve", "_degenerate", "torch", "bench", "_fair",
     "_estimator_params"),
    ("_cli_fit", "_cli_table", "_cli_evaluate", "_cli_progress", "_warmup", "cli", "riskopt",
     "_cli_fair", "model_io", "__main__"),
]
MAX_LINES = 800
GENERIC_MODULES = ["bench/runner.py", "bench/spec.py", "bench/plotting.py", "bench/figures.py",
                   "cli.py"]


# ------------------------------------------------------------------------------- the graph
def _modules():
    """``{dotted name: path}`` of every module of the package (``pkg`` for ``pkg/__init__``)."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name):
    return MODULES[name].name == "__init__.py"


def _resolve(module, level, target):
    """Absolute dotted name of a (possibly relative) import in ``module``."""
    if level == 0:
        return target
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _known(name):
    """The longest prefix of ``name`` that is a module of the package (or None)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in MODULES:
            return cand
        parts.pop()
    return None


def _imports(module):
    """Set of package modules imported by ``module`` (any depth), with the line numbers."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    edges = {}

    def add(target, lineno):
        tgt = _known(target)
        if tgt is not None and tgt != module:
            edges.setdefault(tgt, lineno)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "riskopt":
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module or "")
            if base.split(".")[0] != "riskopt":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:      # ``from pkg import submodule``
                    add(sub, node.lineno)
                else:                   # a name of ``base`` (its __init__ or a module)
                    add(base, node.lineno)
    return edges


GRAPH = {m: _imports(m) for m in MODULES}


def _parent_packages(module):
    parts = module.split(".")
    return {".".join(parts[:k]) for k in range(1, len(parts))}


def _cycle_graph():
    """The graph the cycle check runs on: a package ``__init__`` -> own submodule edges
    dropped (a package importing its submodules is how packages are built)."""
    out = {}
    for m, targets in GRAPH.items():
        keep = set()
        for t in targets:
            if _is_package(m) and t.startswith(m + "."):
                continue
            keep.add(t)
        out[m] = keep
    return out


def _find_cycles(graph):
    """Strongly connected components with more than one module (Tarjan), and one cycle in each."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for comp in comps:
        members = set(comp)
        start = comp[0]
        # shortest path start -> ... -> start inside the component (BFS)
        prev, frontier, found = {start: None}, [start], None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            frontier = nxt
        path, v = [start], found
        while v is not None and v != start:
            path.insert(1, v)
            v = prev[v]
        cycles.append(path + [start])
    return cycles


def _layer(module):
    if module == "riskopt":
        return len(LAYERS) - 1
    top = module.split(".")[1]
    for k, names in enumerate(LAYERS):
        if top in names:
            return k
    raise AssertionError(f"module {module} is in no layer: add riskopt.{top} to LAYERS in "
                         f"{Path(__file__).name} (and to its docstring)")


# ------------------------------------------------------------------------------- the tests
def test_the_import_graph_is_built_from_the_sources():
    """Guards the parser: known edges must be there, or every later check is vacuous."""
    assert "riskopt.solvers.base" in GRAPH["riskopt.solvers.lbfgs"]
    assert "riskopt.callbacks" in GRAPH["riskopt.solvers.base"]
    assert "riskopt.samplers" in GRAPH["riskopt.solvers.base"]  # lazy ``from .. import``
    assert "riskopt._cli_fit" in GRAPH["riskopt.cli"]  # (riskopt/__init__ imports lazily)
    assert "riskopt.objectives.spectral" in GRAPH["riskopt.objectives"]
    assert len(MODULES) > 30


def test_resolves_relative_and_submodule_imports():
    assert _resolve("riskopt.solvers.base", 2, "callbacks") == "riskopt.callbacks"
    assert _resolve("riskopt.solvers", 1, "base") == "riskopt.solvers.base"
    assert _resolve("riskopt.solvers.base", 1, "") == "riskopt.solvers"
    assert _known("riskopt.objectives.spectral.Objective") == "riskopt.objectives.spectral"


def test_cycle_finder_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _find_cycles(graph) == [["a", "b", "c", "a"]]
    assert _find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    cycles = _find_cycles(_cycle_graph())
    assert not cycles, "import cycles in src/riskopt:\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def test_no_import_from_a_lower_layer_up():
    bad = []
    for m, targets in GRAPH.items():
        for t, lineno in targets.items():
            if _layer(t) > _layer(m):
                bad.append(f"{MODULES[m].relative_to(SRC)}:{lineno}: {m} (layer {_layer(m)}) "
                           f"imports {t} (layer {_layer(t)})")
    assert not bad, "imports from a lower layer up:\n" + "\n".join(sorted(bad))


def test_every_module_has_a_layer():
    for m in MODULES:
        _layer(m)


def test_no_source_file_over_800_lines():
    long = {str(p.relative_to(SRC)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"source files over {MAX_LINES} lines: {long}"


def test_no_drivers_table():
    hits = []
    for p in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            name = (node.id if isinstance(node, ast.Name) else
                    node.attr if isinstance(node, ast.Attribute) else
                    node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                    None)
            if name is None and isinstance(node, ast.alias):
                name = node.asname or node.name.split(".")[-1]
            if name == "DRIVERS":
                hits.append(f"{p.relative_to(SRC)}:{getattr(node, 'lineno', '?')}")
    assert not hits, f"a DRIVERS table is still defined or used: {sorted(set(hits))}"


_SPL = re.compile(r"(?<![A-Za-z0-9])(splplus|spl)(?![A-Za-z0-9])", re.IGNORECASE)


def test_spl_word_pattern():
    for text in ("spl", "SPLPlus", "splplus", "bench.splplus", "'spl'", "spl_plus", "run_spl"):
        assert _SPL.search(text.replace("_", " ")), text
    for text in ("splitting", "display", "explain", "xsplplus", "spline", "SPLIT"):
        assert not _SPL.search(text.replace("_", " ")), text


@pytest.mark.parametrize("rel", GENERIC_MODULES)
def test_no_spl_in_generic_modules(rel):
    path = PKG / rel
    if not path.exists():
        pytest.skip(f"{rel} does not exist")
    hits = [f"{rel}:{k}: {line.strip()}"
            for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if _SPL.search(line.replace("_", " "))]
    assert not hits, "family-specific names in a generic module:\n" + "\n".join(hits)
