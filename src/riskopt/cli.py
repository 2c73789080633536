"""The ``riskopt`` command line.

::

    riskopt bench list                          bundled experiment specs
    riskopt bench show NAME                     print a bundled spec (TOML) to copy and edit
    riskopt bench run SPEC [--out DIR] [--jobs N] [--backend NAME] [--address ADDR]
                           [--max-cells K] [--fresh] [--no-plot] [--dry-run] [--quiet]
    riskopt bench plot RESULTS [--out DIR] [--x passes steps time] [--format png [pdf]]
    riskopt bench report RESULTS [--out report.md] [--format markdown|csv]
    riskopt bench reproduce [PAPER ...] [--results DIR] [--run] [--out REPORT.md]
    riskopt datasets list
    riskopt datasets info NAME
    riskopt warmup [SPEC ...]                   compile the kernels once (first run only)
    riskopt fit DATA --target COL [--risk cvar:0.1] ... --out model.skops
    riskopt predict MODEL DATA [--proba] [--out predictions.csv]
    riskopt evaluate MODEL DATA [--group COL ...] [--sensitive COL ...] [--out report.md]

``SPEC`` is a TOML file or the name of a bundled spec. Bad specs, unknown data sets,
missing results, unreadable or unwritable files and folders, and a results folder in use by
another run are reported in one line naming the offending key, file or column and the fix,
with exit status 2 (no traceback, nothing half-written). Repairs that let a run go on (a
corrupt cell file renamed aside and recomputed, a dead run's lock taken over) are one
``riskopt: warning:`` line each, even with ``--quiet``.
"""
import argparse
import errno
import sys

EXIT_USAGE = 2
_WRITE_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
                 errno.EISDIR, errno.ENOTDIR}


class _CLIError(Exception):
    pass


def _print(*args, **kwargs):
    print(*args, **kwargs, flush=True)


def _err(msg):
    print(f"riskopt: error: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- bench
def _bench_list(args):
    from .bench.spec import bundled_specs, load_spec

    specs = bundled_specs()
    width = max(len(n) for n in specs) if specs else 0
    for name in specs:
        try:
            desc = load_spec(name, check_registry=False).description
        except Exception as exc:  # a broken bundled spec must not hide the others
            desc = f"(invalid: {exc})"
        _print(f"{name:<{width}}  {desc}")
    return 0


def _bench_show(args):
    from .bench.spec import read_spec_text

    text, _ = read_spec_text(args.name)
    sys.stdout.write(text)
    return 0


def _setup_backend(backend, address):
    """Connect the dask / ray joblib backends when asked."""
    if backend == "dask":
        try:
            from dask.distributed import Client
        except ImportError:
            raise _CLIError("--backend dask needs 'dask[distributed]' installed") from None
        return Client(address) if address else Client()
    if backend == "ray":
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError:
            raise _CLIError("--backend ray needs 'ray' installed") from None
        register_ray()
        ray.init(address=address) if address else ray.init()
        return None
    if address:
        raise _CLIError("--address is only used with --backend dask or ray")
    return None


def _bench_run(args):
    from .bench.runner import run
    from .bench.spec import load_spec

    if args.jobs is not None and args.jobs == 0:
        raise _CLIError("--jobs must be a positive number of workers or negative (-1: all "
                        "cores, -2: all but one)")
    if args.max_cells is not None and args.max_cells < 1:
        raise _CLIError("--max-cells must be >= 1")
    if args.backend is not None:
        from joblib.parallel import BACKENDS

        known = (set(BACKENDS) - {"multiprocessing"}) | {"dask", "ray"}
        if args.backend == "multiprocessing":
            raise _CLIError("--backend multiprocessing cannot hand back each run as it ends "
                            "(needed to save it at once); use loky, the default, which also "
                            "runs in processes")
        if args.backend not in known:
            raise _CLIError(f"unknown joblib backend {args.backend!r}; choose one of "
                            f"{', '.join(sorted(known))}")
    spec = load_spec(args.spec)
    if args.dry_run:
        from .bench.runner import prepare, status

        from pathlib import Path

        from .bench import _lock

        sizes, _ = prepare(spec)
        total, done = status(spec, args.out)
        _print(f"spec {spec.name}: valid")
        busy = _lock.holder(Path(args.out) if args.out else Path("results") / spec.name)
        if busy:
            _print(f"  in use by another run: {_lock.describe(busy)}")
        for d, sz in sizes.items():
            unit = "steps" if spec.dataset(d).streaming else "passes"
            _print(f"  {d}: {sz['n_train']} x {sz['n_features']}, {spec.budget(d)} {unit}")
        _print(f"  objectives: {', '.join(spec.objective_labels())}")
        _print(f"  solvers: {', '.join(s.display for s in spec.solvers)}; seeds {spec.seeds}")
        _print(f"runs: {total} total, {done} finished, {total - done} to run")
        return 0
    client = _setup_backend(args.backend, args.address)
    echo = None if args.quiet else (lambda m: _print(m, file=sys.stderr))
    try:
        res = run(spec, out=args.out, jobs=args.jobs, backend=args.backend,
                  progress=not args.quiet, max_cells=args.max_cells, fresh=args.fresh,
                  plot=not args.no_plot, echo=echo)
    finally:
        if client is not None:
            client.close()
    _print(f"runs: {res.n_cells} total, {res.n_reused} reused, {res.n_run} run now, "
           f"{res.n_errors} failed ({res.wall_seconds:.1f} s)")
    for desc, err in res.errors[:5]:
        _err(f"run failed: {desc}: {err.splitlines()[0]}")
    if res.n_errors:
        _err(f"{res.n_errors} run(s) failed; details in {res.out_dir / 'cells'}/*.error.json; "
             "rerun the same command to retry them")
    if res.table is None:
        _print(f"incomplete: finished runs are saved in {res.out_dir / 'cells'}; run the same "
               "command again to resume")
        return 1 if res.n_errors else 0
    _print(f"table: {res.table}")
    _print(f"selection: {res.selection}")
    _print(f"metadata: {res.metadata}")
    for f in res.figures:
        _print(f"figure: {f}")
    return 1 if res.n_errors else 0


def _bench_plot(args):
    from .bench import _partial
    from .bench.figures import plot_results

    try:
        table = None
        if _partial.is_interrupted(args.results):  # its complete groups, labelled partial
            table, note = _partial.partial_table(args.results)
            table.attrs["partial"] = note.line()
            _print(note.line())
        paths = plot_results(args.results, out_dir=args.out, x=args.x, formats=args.format,
                             table=table)
    except (FileNotFoundError, ValueError) as exc:
        raise _CLIError(str(exc)) from None
    for p in paths:
        _print(f"figure: {p}")
    return 0


def _bench_report(args):
    from .bench.report import build_report

    fmt = args.format or ("csv" if args.out and args.out.lower().endswith(".csv")
                          else "markdown")
    from pathlib import Path

    return _emit(lambda: build_report(
        args.results, fmt=fmt, relative_to=Path(args.out).parent if args.out else None),
        args.out)


def _emit(build, out):
    """Build a report (one-line errors) and write it to ``out`` atomically, or print it; a bad
    ``out`` is refused before the (possibly long) build."""
    from ._cli_evaluate import write_text
    from ._cli_fit import check_output

    if out:
        check_output(out)
    try:
        text = build()
    except (FileNotFoundError, ValueError) as exc:
        raise _CLIError(str(exc)) from None
    if out:
        write_text(text, out)
        _print(f"report: {out}")
    else:
        sys.stdout.write(text)
    return 0


def _bench_reproduce(args):
    from .bench.reproduce import build

    return _emit(lambda: build(args.papers, results_root=args.results, run=args.run,
                               jobs=args.jobs, out=args.out,
                               echo=None if args.quiet else _print), args.out)


def _warmup(args):
    from ._warmup import warmup

    _print("compiling the numba kernels of the default fits (first run only)")
    warmup(args.specs, log=_print)
    return 0


# ---------------------------------------------------------------------------- datasets
def _datasets_list(args):
    from . import datasets

    for name in datasets.names():
        line = name
        try:
            meta = datasets.info(name)
            extra = [f"{k}={meta[k]}" for k in ("task", "n_samples", "n_features", "present",
                                                "source") if meta.get(k) is not None]
            if extra:
                line = f"{name:<12} " + " ".join(extra)
        except Exception:  # a broken entry must not hide the others
            pass
        _print(line)
    return 0


def _datasets_info(args):
    from . import datasets

    names = list(datasets.names())
    if args.name not in names:
        raise _CLIError(f"unknown dataset {args.name!r}; available: {', '.join(names)}")
    for k, v in datasets.info(args.name).items():
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
            _print(f"{k}:")
            for item in v:
                head = item.get("path") or item.get("name") or ""
                rest = ", ".join(f"{a}={b}" for a, b in item.items()
                                 if a in ("present", "bytes", "downloadable")
                                 or (a == "missing_upstream" and b))
                _print(f"  - {head}" + (f" ({rest})" if rest else ""))
        elif isinstance(v, (list, tuple)):
            _print(f"{k}: {', '.join(map(str, v)) if v else '-'}")
        else:
            _print(f"{k}: {v}")
    return 0


# ---------------------------------------------------------------------------- parser
def _group(sub, name, help, description):
    """A command with sub-actions (``riskopt NAME ACTION``)."""
    p = sub.add_parser(name, help=help, description=description)
    actions = p.add_subparsers(dest=f"{name}_command", metavar="ACTION")
    actions.required = True
    return actions


def _action(group, name, func, help, description, positional=None):
    p = group.add_parser(name, help=help, description=description)
    if positional:
        p.add_argument(positional[0], help=positional[1])
    p.set_defaults(func=func)
    return p


def build_parser():
    from . import __version__

    p = argparse.ArgumentParser(
        prog="riskopt", description="riskopt: optimisers for spectral risks and DRO. Fit, "
        "apply and evaluate risk-averse linear models on CSV/parquet tables (fit, predict, "
        "evaluate), run the papers' benchmarks (bench) and list the data sets (datasets). "
        "'riskopt COMMAND --help' describes each command.")
    p.add_argument("--version", action="version", version=f"riskopt {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    bsub = _group(sub, "bench", "run experiment specs and plot their results",
                  "Run experiment specs (TOML) and plot their results.")
    _action(bsub, "list", _bench_list, "list the bundled specs",
            "List the bundled experiment specs.")
    _action(bsub, "show", _bench_show, "print a bundled spec",
            "Print a bundled spec (TOML) to copy and edit.",
            ("name", "bundled spec name (see 'riskopt bench list')"))

    b_run = bsub.add_parser(
        "run", help="run (or resume) a spec", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  riskopt bench run quick --jobs 2            # bundled smoke test, ~1 min\n"
               "  riskopt bench run my_spec.toml --out results/mine\n"
               "  riskopt bench run prospect_fig3 --max-cells 200   # a chunk; rerun to go on\n"
               "  riskopt bench list                            # the specs of every family\n"
               "on a cluster (any joblib backend; workers need riskopt installed and\n"
               "RISKOPT_DATA for non-bundled data; only this process writes files):\n"
               "  riskopt bench run prospect_fig3 --backend dask --address tcp://host:8786\n"
               "  riskopt bench run prospect_fig3 --backend ray --address auto\n"
               "for wall-time figures use --jobs 1 (workers compete for cores).",
        description="Run every (dataset, objective, solver, step size, seed) of a spec, select "
                    "each solver's step size, write results.parquet, selection.parquet, "
                    "metadata.json and the figures. Finished runs are saved at once; running "
                    "the same command again resumes an interrupted run.")
    b_run.add_argument("spec", help="TOML file or bundled spec name")
    b_run.add_argument("--out", metavar="DIR", help="output folder (default results/<spec name>)")
    b_run.add_argument("--jobs", "-j", type=int, metavar="N",
                       help="parallel workers (-1: all cores; default: the spec's 'jobs' or -1)")
    b_run.add_argument("--backend", metavar="NAME",
                       help="joblib backend: loky (default), threading, dask (needs "
                            "dask.distributed), ray")
    b_run.add_argument("--address", metavar="ADDR",
                       help="dask scheduler / ray cluster address for --backend dask|ray")
    b_run.add_argument("--max-cells", type=int, metavar="K",
                       help="stop after K new runs (resume later with the same command)")
    b_run.add_argument("--fresh", action="store_true",
                       help="discard this spec's finished runs and f* cache first")
    b_run.add_argument("--no-plot", action="store_true", help="do not draw the figures")
    b_run.add_argument("--dry-run", action="store_true",
                       help="check the spec (data, objectives, solver parameters) and count "
                            "the runs left, without running anything")
    b_run.add_argument("--quiet", "-q", action="store_true",
                       help="no progress bars or status lines")
    b_run.set_defaults(func=_bench_run)

    b_plot = bsub.add_parser(
        "plot", help="draw figures from a results folder",
        description="Draw suboptimality vs passes / time figures (selected step sizes; median "
                    "and band over seeds) from a results folder. Never reruns solvers.")
    b_plot.add_argument("results", help="results folder (or its results.parquet)")
    b_plot.add_argument("--out", metavar="DIR", help="where to write (default: the folder)")
    b_plot.add_argument("--x", nargs="+", choices=["passes", "steps", "time"],
                        help="x axes (default: the spec's plot.x)")
    b_plot.add_argument("--format", nargs="+", default=["png"], metavar="FMT",
                        help="file formats (default: png, a small palette PNG; add pdf for "
                             "a vector copy)")
    b_plot.set_defaults(func=_bench_plot)

    b_rep = bsub.add_parser(
        "report", help="a results folder as a Markdown (or CSV) report",
        description="Write the report of a results folder: metadata (commit, machine, wall "
                    "time), f* per problem, the selected configurations with final "
                    "suboptimality and passes to 1e-4 / 1e-8, recorded model metrics and "
                    "the figures. Never reruns solvers.")
    b_rep.add_argument("results", help="results folder of 'riskopt bench run'")
    b_rep.add_argument("--out", metavar="FILE", help="file to write (default: standard output)")
    b_rep.add_argument("--format", choices=["markdown", "csv"], default=None,
                       help="default: from --out's extension, else markdown")
    b_rep.set_defaults(func=_bench_report)

    b_rp = bsub.add_parser(
        "reproduce", help="the papers' experiments next to their claims (Markdown report)",
        description="For every experiment of the named papers (default: all five): our "
                    "figure, the paper's claim, what our results show and a verdict. Uses the "
                    "results under --results; --run runs the specs that have none "
                    "(resumable).")
    b_rp.add_argument("papers", nargs="*", metavar="PAPER",
                      help="paper names (default: all five; an unknown name is reported "
                           "with the list of known ones)")
    b_rp.add_argument("--results", default="benchmarks/results", metavar="DIR",
                      help="folder holding one results folder per spec")
    b_rp.add_argument("--run", action="store_true", help="run the specs without results")
    b_rp.add_argument("--jobs", type=int, default=None, metavar="N",
                      help="parallel runs (with --run)")
    b_rp.add_argument("--out", metavar="FILE", help="file to write (default: standard output)")
    b_rp.add_argument("--quiet", "-q", action="store_true",
                      help="no progress lines while --run runs the specs")
    b_rp.set_defaults(func=_bench_reproduce)

    dsub = _group(sub, "datasets", "list and describe data sets",
                  "List and describe the data sets riskopt can load.")
    _action(dsub, "list", _datasets_list, "list data set names",
            "List the data sets riskopt can load.")
    _action(dsub, "info", _datasets_info, "describe one data set", "Describe one data set.",
            ("name", "data set name (see 'riskopt datasets list')"))

    p_warm = sub.add_parser(
        "warmup", help="compile the numba kernels once (first run only)",
        description="Compile and cache the numba kernels of the default fits (RiskRegressor, "
                    "RiskClassifier, binary and multiclass), of 'riskopt fit' with each "
                    "documented --risk on a regression and a classification target, and of "
                    "the solvers of the named bench specs, so that the first real run starts "
                    "fast. The kernels are "
                    "cached on disk (NUMBA_CACHE_DIR); a second warmup has nothing to do.")
    p_warm.add_argument("specs", nargs="*", metavar="SPEC",
                        help="bench specs whose solvers to compile too (e.g. quick)")
    p_warm.set_defaults(func=_warmup)

    from ._cli_evaluate import add_parser as add_evaluate
    from ._cli_fit import add_parsers

    add_parsers(sub)
    add_evaluate(sub)
    return p


#: warnings a user acts on, shown as one ``riskopt: warning:`` line (no source location)
_USER_WARNINGS = ("RecoveryWarning", "ConvergenceWarning", "DegenerateFitWarning",
                  "DivergenceWarning", "ModelVersionWarning")


def _show_warning(default):
    """Repairs of a results folder (RecoveryWarning) and the fit's convergence, divergence and
    degenerate-model warnings as one ``riskopt: warning:`` line each."""
    def show(message, category, filename, lineno, file=None, line=None):
        if category.__name__ in _USER_WARNINGS:
            print(f"riskopt: warning: {message}", file=sys.stderr, flush=True)
        else:
            default(message, category, filename, lineno, file, line)
    return show


def _interrupt_handler(hard):
    """SIGINT: one line and exit 130 (``riskopt._runtime.hard_exit``: no traceback, the
    temporary files of writes in progress removed). ``bench`` commands keep their clean stop
    (KeyboardInterrupt: workers stopped, finished runs saved) unless a kernel is compiling,
    where llvmlite may swallow the interrupt."""
    from . import _runtime

    def handler(signum, frame):
        if hard or _runtime.compiling():
            _runtime.hard_exit()
        raise KeyboardInterrupt
    return handler


def main(argv=None):
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else None
    if main_thread:  # Ctrl-C while the parser or the libraries load: one line, exit 130
        signal.signal(signal.SIGINT, _interrupt_handler(True))
    try:
        return _main(argv, main_thread)
    finally:
        if main_thread and previous is not None:  # in-process callers get theirs back
            signal.signal(signal.SIGINT, previous)


def _main(argv, main_thread):
    import contextlib
    import signal

    from . import _runtime

    parser = build_parser()
    args = parser.parse_args(argv)
    if main_thread:
        signal.signal(signal.SIGINT, _interrupt_handler(args.command != "bench"))
    # the compile notice: every command but bench, whose runner warms the kernels up itself
    # and reports its own progress (its stderr is its status lines)
    with (_runtime.compile_notice_to(_runtime.stderr_notice) if args.command != "bench"
          else contextlib.nullcontext()):
        return _dispatch(args)


def _dispatch(args):
    import warnings

    try:
        from .bench._io import OutputError, RecoveryWarning, describe_os_error
        from .bench._lock import RunLockError
        from .bench.spec_tools import SpecError
    except ImportError:  # pragma: no cover
        SpecError = OutputError = RunLockError = ValueError
        RecoveryWarning, describe_os_error = UserWarning, str
    from ._cli_fit import FitError as _FitError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", RecoveryWarning)
            warnings.showwarning = _show_warning(warnings.showwarning)
            return args.func(args)
    except SpecError as exc:
        _err(f"bad spec: {exc}")
        return EXIT_USAGE
    except (_CLIError, _FitError, OutputError, RunLockError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except FileNotFoundError as exc:
        _err(str(exc) if exc.errno is None else describe_os_error(exc, "cannot open"))
        return EXIT_USAGE
    except ImportError as exc:
        _err(f"{exc}; install the benchmark extras: pip install 'riskopt[bench]'")
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `riskopt datasets list | head`
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file system failure: which file, and what to do
        _err(describe_os_error(exc, "cannot write" if exc.errno in _WRITE_ERRORS
                               else "cannot access"))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted; finished runs are saved -- run the same command again to resume")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
