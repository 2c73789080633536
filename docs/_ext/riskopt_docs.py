"""Sphinx directives that render facts from the code itself, so the pages cannot drift from it.

* ``.. riskopt-cli::`` -- the ``--help`` text of every ``riskopt`` command (from
  :func:`riskopt.cli.build_parser`); an argument such as ``bench run`` restricts it to that
  command and its sub-commands.
* ``.. riskopt-datasets::`` -- one row per name of :func:`riskopt.datasets.names` with the facts
  of :func:`riskopt.datasets.info` (what ``riskopt datasets list`` prints, without the
  machine-dependent ``present`` column).
* ``.. riskopt-specs::`` -- the bundled benchmark specs and their descriptions
  (``riskopt bench list``).
* ``.. riskopt-reproduction::`` -- the summary of the reproduction report (``riskopt bench
  reproduce``) built from the committed results under ``benchmarks/results``: paper, item,
  spec or script, the paper's claim, verdict, what our results show and the notes.
* ``.. riskopt-solvers::`` -- the solver registry: name, class, problem, the ``convergent`` flag
  and the constructor defaults.
"""
import argparse
import inspect
import os
import re
from contextlib import contextmanager

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

_HELP_WIDTH = "92"
_KINDS = {"regression": "bundled", "real": "data folder", "synthetic": "synthetic"}


@contextmanager
def _columns(width):
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(parser, path=()):
    yield path, parser
    for name, sub in _subcommands(parser).items():
        yield from _walk(sub, path + (name,))


def _table(header, rows, widths=None):
    """RST list-table source lines."""
    out = [".. list-table::", "   :header-rows: 1"]
    if widths:
        out.append("   :widths: " + " ".join(str(w) for w in widths))
    out.append("")
    for row in [header] + rows:
        first = True
        for cell in row:
            text = str(cell).replace("\n", " ") or "\\-"
            out.append(("   * - " if first else "     - ") + text)
            first = False
    return out


def _literal(text):
    return "``" + str(text).replace("`", "'") + "``"


class CLIDirective(SphinxDirective):
    optional_arguments = 10
    has_content = False

    def run(self):
        from riskopt.cli import build_parser

        want = tuple(self.arguments)
        result = []
        with _columns(_HELP_WIDTH):
            for path, parser in _walk(build_parser()):
                if path[:len(want)] != want:
                    continue
                title = " ".join(("riskopt",) + path)
                result.append(nodes.rubric(text=title))
                block = nodes.literal_block(text=parser.format_help().rstrip())
                block["language"] = "text"
                result.append(block)
        if not result:
            raise self.error(f"no riskopt command {' '.join(want)!r}")
        return result


class DatasetsDirective(SphinxDirective):
    has_content = False

    def run(self):
        from riskopt import datasets

        rows = []
        for name in datasets.names():
            meta = datasets.info(name)
            rows.append([
                _literal(name), _KINDS.get(meta.get("kind"), meta.get("kind", "")),
                meta.get("task", ""),
                meta.get("n_samples", meta.get("rows", "")), meta.get("n_features", ""),
                ", ".join(meta.get("groups") or []) or "\\-",
                meta.get("source", ""),
            ])
        lines = _table(["name", "kind", "task", "rows", "features", "groups", "source"], rows,
                       widths=[18, 9, 9, 8, 7, 12, 37])
        return self.parse_text_to_nodes("\n".join(lines))


class SpecsDirective(SphinxDirective):
    has_content = False

    def run(self):
        from riskopt.bench.spec import bundled_specs, load_spec

        rows = []
        for name in bundled_specs():
            desc = load_spec(name, check_registry=False).description
            rows.append([_literal(name), desc])
        return self.parse_text_to_nodes("\n".join(_table(["spec", "description"], rows,
                                                         widths=[22, 78])))


_FAMILY_DOC = {"spectral": "spectral risk (:class:`~riskopt.Objective`)",
               "ru_cvar": "RU-CVaR (:class:`~riskopt.objectives.ru_cvar.RUCVaRObjective`)"}


class SolversDirective(SphinxDirective):
    has_content = False

    def run(self):
        from riskopt import solvers

        def order(name):  # spectral-risk solvers first, then the biased ones, then the others
            cls = solvers.get_class(name)
            return ("spectral" not in cls.families, not getattr(cls, "convergent", True), name)

        rows = []
        for name in sorted(solvers.available(), key=order):
            cls = solvers.get_class(name)
            params = inspect.signature(cls.__init__).parameters
            defaults = [f"{k}={v.default!r}" for k, v in params.items()
                        if k != "self" and v.default is not inspect.Parameter.empty]
            problem = ", ".join(_FAMILY_DOC.get(f, _literal(f)) for f in cls.families)
            rows.append([
                _literal(name), f":class:`~riskopt.solvers.{cls.__name__}`", problem,
                "yes" if getattr(cls, "convergent", True) else "**no (biased)**",
                ", ".join(_literal(d) for d in defaults),
            ])
        lines = _table(["name", "class", "problem", "``convergent``", "defaults"], rows,
                       widths=[14, 16, 22, 10, 38])
        return self.parse_text_to_nodes("\n".join(lines))


def _escape(text):
    """Plain text for an RST cell: ``|``, ``*``, backquotes, ``_`` and backslashes escaped."""
    return re.sub(r"([\\*`|_])", r"\\\1", str(text))


class ReproductionDirective(SphinxDirective):
    has_content = False

    def run(self):
        from riskopt.bench.reproduce import entries

        root = os.path.join(os.path.dirname(self.env.srcdir), "benchmarks", "results")
        rows = [[_escape(r["paper"]), _escape(r["item"]), _literal(r["spec"]),
                 _escape(r["claim"]), f"**{r['verdict']}**",
                 _escape(r["ours"] + (f". Notes: {r['notes']}" if r["notes"] else ""))]
                for r in entries(results_root=root)]
        lines = _table(["paper", "item", "spec or script", "claim", "verdict", "ours"], rows,
                       widths=[8, 12, 16, 24, 8, 32])
        return self.parse_text_to_nodes("\n".join(lines))


def setup(app):
    app.add_directive("riskopt-cli", CLIDirective)
    app.add_directive("riskopt-datasets", DatasetsDirective)
    app.add_directive("riskopt-specs", SpecsDirective)
    app.add_directive("riskopt-solvers", SolversDirective)
    app.add_directive("riskopt-reproduction", ReproductionDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
