"""Crash-proof benchmark runs: corrupt files are quarantined and recomputed, one run per folder
(lock), umask-honouring durable writes, no temporary file and no worker left behind.

Every case asserts the specific message (error or RecoveryWarning) and that nothing partial
remains (no ``*.tmp``, no lock after the run, the table identical to an undisturbed run).
"""
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("joblib")

import riskopt.bench as rb  # noqa: E402
from riskopt.bench import _io, _lock, _procs, runner  # noqa: E402
from riskopt.bench._io import OutputError, RecoveryWarning  # noqa: E402
from riskopt.bench._lock import LOCK_NAME, RunLockError  # noqa: E402
from _cli_helpers import readonly_dir, solver_for_yacht  # noqa: E402


SOLVER = solver_for_yacht()
pytestmark = pytest.mark.skipif(SOLVER is None, reason="no stochastic solver is registered")
SRC = Path(runner.__file__).resolve().parents[2]


def _spec_dict(name="faults", seeds=(0, 1), lrs=(0.01, 0.03), passes=2):
    solver, nu = SOLVER or ("sgd", 0.0)
    return {"name": name, "description": "fault injection", "datasets": ["yacht"],
            "seeds": list(seeds), "passes": passes, "lr": list(lrs), "shift_cost": nu,
            "objectives": ["cvar:0.5"], "solvers": [solver], "plot": {"x": ["passes"]}}


def _spec(**kw):
    return rb.spec_from_dict(_spec_dict(**kw))


def _toml(path, **kw):
    d = _spec_dict(**kw)
    lines = [f"{k} = {json.dumps(v)}" for k, v in d.items() if k != "plot"]
    path.write_text("\n".join(lines) + '\n[plot]\nx = ["passes"]\n')
    return path


def _run(out, spec=None, **kw):
    return rb.run(spec or _spec(), out=out, jobs=1, progress=False, plot=False, **kw)


def _table(out):
    t = pd.read_parquet(Path(out) / "results.parquet").drop(columns="time")
    return t.sort_values(["solver", "config", "seed", "update"]).reset_index(drop=True)


def _leftovers(out):
    """Temporary files and locks under ``out`` (there must be none after a run)."""
    return sorted(str(p) for p in Path(out).rglob("*") if p.name.endswith(".tmp")
                  or p.name == LOCK_NAME)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An undisturbed run: its folder, its table (no time column), its f*."""
    out = tmp_path_factory.mktemp("reference") / "res"
    res = _run(out)
    assert res.complete and res.n_run == 4
    fstar = json.loads((out / "fstar.json").read_text())
    return out, _table(out), fstar


@pytest.fixture
def copy(reference, tmp_path):
    out = tmp_path / "res"
    shutil.copytree(reference[0], out)
    return out


def _cells(out):
    return sorted((Path(out) / "cells").glob("*.parquet"))


def _assert_recovered(out, reference, n_run):
    res = _run(out)
    assert res.complete and res.n_run == n_run and res.n_errors == 0
    pd.testing.assert_frame_equal(_table(out), reference[1])
    assert _leftovers(out) == []
    return res


# ---------------------------------------------------------------------------- corrupt cells
CORRUPTIONS = {
    "truncated": (lambda data, other: data[:100], "unreadable parquet"),
    "half": (lambda data, other: data[: len(data) // 2], "unreadable parquet"),
    "empty": (lambda data, other: b"", "unreadable parquet"),
    "garbage": (lambda data, other: bytes(np.random.default_rng(0).integers(
        0, 256, len(data), dtype=np.uint8)), "unreadable parquet"),
    "text": (lambda data, other: b"not a parquet file\n", "unreadable parquet"),
    "other_run": (lambda data, other: other, "it holds another run"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_cell_is_quarantined_and_recomputed(kind, copy, reference):
    victim, other = _cells(copy)[:2]
    make, reason = CORRUPTIONS[kind]
    bad = make(victim.read_bytes(), other.read_bytes())
    victim.write_bytes(bad)
    name = re.escape(victim.name)
    with pytest.warns(RecoveryWarning, match=rf"{name} is corrupt \({reason}.*\); "
                                             rf"moved aside to {name}\.corrupt-\d"):
        _assert_recovered(copy, reference, n_run=1)
    (aside,) = (copy / "cells").glob(f"{victim.name}.corrupt-*")
    assert aside.read_bytes() == bad  # kept for inspection, never deleted
    assert rb.runner.status(_spec(), copy) == (4, 4)


def test_cell_without_the_trace_columns_is_quarantined(copy, reference):
    victim = _cells(copy)[0]
    pd.DataFrame({"x": [1.0]}).to_parquet(victim)
    with pytest.warns(RecoveryWarning, match=r"is corrupt \(no column\(s\) update, step"):
        _assert_recovered(copy, reference, n_run=1)


@pytest.mark.parametrize("fill", [b"\x00", b"\xff"])
def test_cell_unreadable_only_past_its_footer_is_caught_at_the_merge(fill, copy, reference):
    """The footer reads (the start-up check passes), the data pages do not: the merge
    quarantines it and the run goes round once more."""
    victim = _cells(copy)[0]
    data = victim.read_bytes()
    end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    victim.write_bytes(data[:4] + fill * (end - 4) + data[end:])
    with pytest.warns(RecoveryWarning, match=rf"{re.escape(victim.name)} is corrupt "
                                             r"\(unreadable parquet"):
        _assert_recovered(copy, reference, n_run=1)


def test_status_does_not_count_or_touch_corrupt_cells(copy):
    victim = _cells(copy)[0]
    victim.write_bytes(b"")
    assert rb.runner.status(_spec(), copy) == (4, 3)
    assert victim.exists() and not list((copy / "cells").glob("*.corrupt-*"))


@pytest.mark.parametrize("content", [b'{"cell": ', b"\xff\xfe\x00", b""])
def test_corrupt_error_record_is_quarantined(content, copy, reference):
    victim = _cells(copy)[0]
    victim.unlink()
    err = victim.with_name(victim.name.replace(".parquet", ".error.json"))
    err.write_bytes(content)
    with pytest.warns(RecoveryWarning, match=rf"{re.escape(err.name)} is corrupt \(invalid JSON"):
        _assert_recovered(copy, reference, n_run=1)
    assert not err.exists()


# ---------------------------------------------------------------------------- f* cache
FSTAR = {
    "truncated": (lambda text: text[: len(text) // 2], r"fstar.json is corrupt \(invalid JSON"),
    "empty": (lambda text: "", r"fstar.json is corrupt \(invalid JSON"),
    "list": (lambda text: "[1, 2]", r"fstar.json is corrupt \(invalid JSON: a JSON list"),
    "null": (lambda text: "null", r"fstar.json is corrupt \(invalid JSON: a JSON NoneType"),
    "binary": (lambda text: "\udcff", r"fstar.json is corrupt \(invalid JSON"),
    "no_value": (lambda text: json.dumps({k: {"dataset": "yacht"} for k in json.loads(text)}),
                 r"entry \w+ is not used \(it has no finite f_star"),
    "nan_value": (lambda text: json.dumps({k: {**v, "f_star": "nan"}
                                           for k, v in json.loads(text).items()}),
                  r"entry \w+ is not used \(it has no finite f_star"),
    # a hand-edited f*: the table would mix the new f* with suboptimality of the old one
    "edited": (lambda text: json.dumps({k: {**v, "f_star": v["f_star"] - 1.0}
                                        for k, v in json.loads(text).items()}),
               r"entry \w+ is not used \(its checksum does not match its content"),
    "edited_reference": (lambda text: json.dumps({k: {**v, "key": {**v["key"], "x": 1}}
                                                  for k, v in json.loads(text).items()}),
                         r"entry \w+ is not used \(its checksum does not match"),
    "no_checksum": (lambda text: json.dumps({k: {kk: vv for kk, vv in v.items()
                                                 if kk != "checksum"}
                                             for k, v in json.loads(text).items()}),
                    r"entry \w+ is not used \(it has no checksum"),
    "other_key": (lambda text: json.dumps({"0" * 16: v for v in json.loads(text).values()}),
                  r"entry 0+ is not used \(its checksum does not match"),
}


@pytest.mark.parametrize("kind", list(FSTAR))
def test_broken_fstar_is_recomputed(kind, copy, reference):
    path = copy / "fstar.json"
    make, match = FSTAR[kind]
    text = make(path.read_text())
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.warns(RecoveryWarning, match=match):
        _assert_recovered(copy, reference, n_run=0)
    (rec,) = json.loads(path.read_text()).values()
    (ref,) = reference[2].values()
    assert rec["f_star"] == ref["f_star"]


# ---------------------------------------------------------------------------- the lock
def _write_lock(out, **info):
    out.mkdir(parents=True, exist_ok=True)
    base = {"pid": os.getpid(), "host": socket.gethostname(),
            "started": "2030-01-02T03:04:05+0000"}
    (out / LOCK_NAME).write_text(json.dumps({**base, **info}))
    return {**base, **info}


@pytest.fixture
def live_pid():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("owner", ["this process", "another live process", "another host"])
def test_held_lock_stops_a_second_run_naming_the_owner(owner, tmp_path, live_pid):
    out = tmp_path / "res"
    info = {"this process": {}, "another live process": {"pid": live_pid},
            "another host": {"pid": 1, "host": "elsewhere.example"}}[owner]
    info = _write_lock(out, **info)
    before = (out / LOCK_NAME).read_bytes()
    with pytest.raises(RunLockError, match=rf"^{re.escape(str(out))} is in use by another run "
                                           rf"\(pid {info['pid']} on host "
                                           rf"{re.escape(info['host'])}, started "
                                           r"2030-01-02T03:04:05\+0000\)") as exc:
        _run(out)
    assert "\n" not in str(exc.value) and f"delete {out / LOCK_NAME}" in str(exc.value)
    if owner == "another host":
        assert "cannot check" in str(exc.value)
    assert (out / LOCK_NAME).read_bytes() == before  # untouched
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing else written


@pytest.mark.parametrize("case", ["dead pid", "reused pid", "unreadable"])
def test_stale_lock_is_taken_over(case, copy, reference, live_pid):
    if case == "dead pid":
        _write_lock(copy, pid=_dead_pid())
        match = r"taking over the lock of .* from a run that is gone \(pid \d+ on host .*: " \
                r"process \d+ is gone\)"
    elif case == "reused pid":  # the pid runs, but it is not the process that took the lock
        if _lock._proc_start(live_pid) is None:
            pytest.skip("no /proc start times here")
        _write_lock(copy, pid=live_pid, pid_start=_lock._proc_start(live_pid) - 1)
        match = rf"process {live_pid} is gone"
    else:
        (copy / LOCK_NAME).write_text("{not json")
        match = r"unknown owner: the lock file is unreadable"
    with pytest.warns(RecoveryWarning, match=match):
        _assert_recovered(copy, reference, n_run=0)


def test_lock_is_released_and_holds_the_owner_meanwhile(tmp_path, monkeypatch):
    out, seen = tmp_path / "res", []
    real = runner._run_cell

    def spy(task):
        seen.append(json.loads((out / LOCK_NAME).read_text()))
        return real(task)

    monkeypatch.setattr(runner, "_run_cell", spy)
    _run(out)
    me = seen[0]
    assert me["pid"] == os.getpid() and me["host"] == socket.gethostname() and me["started"]
    assert _leftovers(out) == []


def test_a_write_error_mid_run_releases_the_lock_and_leaves_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "res"
    import pyarrow.parquet as pq

    real, calls = pq.write_table, []

    def fail_second(table, where, **kw):
        calls.append(1)
        if len(calls) == 2:
            where.write(b"PAR1 half")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", fail_second)
    with pytest.raises(OSError, match="No space left"):
        _run(out)
    assert _leftovers(out) == [] and len(_cells(out)) == 1
    monkeypatch.undo()
    res = _run(out)
    assert res.complete and res.n_reused == 1 and res.n_run == 3


def test_keyboard_interrupt_keeps_finished_cells_and_cleans_up(tmp_path, monkeypatch):
    out, calls = tmp_path / "res", []
    real = runner._run_cell

    def interrupt_third(task):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(runner, "_run_cell", interrupt_third)
    with pytest.raises(KeyboardInterrupt):
        _run(out)
    assert _leftovers(out) == [] and len(_cells(out)) == 2
    assert (out / "fstar.json").exists()
    monkeypatch.undo()
    assert _run(out).n_reused == 2


def test_sigterm_acts_as_ctrl_c_during_the_run_only(tmp_path, monkeypatch):
    out, seen = tmp_path / "res", []
    real = runner._run_cell

    def spy(task):
        seen.append(signal.getsignal(signal.SIGTERM))
        return real(task)

    monkeypatch.setattr(runner, "_run_cell", spy)
    before = signal.getsignal(signal.SIGTERM)
    _run(out)
    assert signal.getsignal(signal.SIGTERM) is before
    if before is signal.SIG_DFL:
        assert callable(seen[0]) and seen[0] is not signal.SIG_DFL
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            seen[0](signal.SIGTERM, None)


# ---------------------------------------------------------------------------- durability
def test_every_checkpoint_is_on_disk_before_the_next_run_starts(tmp_path, monkeypatch):
    """f* is written before any cell runs, each cell before the next one starts."""
    out, seen = tmp_path / "res", []
    real = runner._run_cell

    def spy(task):
        seen.append(((out / "fstar.json").exists(), len(_cells(out))))
        return real(task)

    monkeypatch.setattr(runner, "_run_cell", spy)
    _run(out)
    assert seen == [(True, k) for k in range(4)]


WRITERS = {
    "bytes": lambda p: _io.atomic_write_bytes(p, b"abc"),
    "json": lambda p: _io.atomic_write_json(p, {"a": 1}),
    "parquet": lambda p: _io.atomic_write_parquet(p, pd.DataFrame({"a": [1.0]})),
    "figure": lambda p: _io.atomic_savefig(__import__("matplotlib.figure").figure.Figure(),
                                           p.with_suffix(".png")),
}


@pytest.mark.parametrize("kind", list(WRITERS))
def test_file_and_folder_are_fsynced_around_the_rename(kind, tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", "dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file"))
        return real_fsync(fd)

    def replace(a, b):
        events.append(("replace", Path(a).name.endswith(".tmp")))
        return real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    WRITERS[kind](tmp_path / "f.out")
    assert events == [("fsync", "file"), ("replace", True), ("fsync", "dir")]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError(errno.ENOSPC, "disk full"),
                                 RuntimeError("writer bug")])
@pytest.mark.parametrize("kind", ["bytes", "parquet", "figure"])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(kind, exc, tmp_path,
                                                                   monkeypatch):
    target = tmp_path / ("f.png" if kind == "figure" else "f.out")
    target.write_bytes(b"old")

    def boom(fh):
        fh.write(b"partial")
        raise exc

    with pytest.raises(type(exc) if isinstance(exc, BaseException) else exc):
        _io.atomic_write(target, boom)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664),
                                        (0o077, 0o600)])
def test_files_honour_the_umask(mask, mode, tmp_path):
    old = os.umask(mask)
    try:
        out = tmp_path / "res"
        rb.run(_spec(lrs=(0.01,), seeds=(0,)), out=out, jobs=1, progress=False,
               plot=mask == 0o022)
    finally:
        os.umask(old)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"fstar.json", "results.parquet", "metadata.json",
                                       "spec.json", "selection.csv"}
    if mask == 0o022:
        assert (out / "figure.png").exists()
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in files} == \
        {p.name: oct(mode) for p in files}


def test_leftover_temporaries_of_a_killed_run_are_removed(copy, reference):
    junk = [copy / ".fstar.json.ab12cd34.tmp", copy / "cells" / ".0123.parquet.zz99yy88.tmp"]
    for p in junk:
        p.write_bytes(b"")
    keep = copy / ".notes.tmp"  # not a name the writer makes
    keep.write_text("mine")
    with pytest.warns(RecoveryWarning, match=r"removed 2 temporary file\(s\) left by an "
                                             r"interrupted run"):
        _run(copy)
    assert not any(p.exists() for p in junk) and keep.read_text() == "mine"


# ---------------------------------------------------------------------------- output folder
_readonly_dir = readonly_dir


@pytest.mark.parametrize("case", ["a file", "under a file", "read-only"])
def test_bad_output_folder_is_one_clear_error_before_any_work(case, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "_run_cell", lambda task: pytest.fail("ran a cell"))
    (tmp_path / "f").write_text("x")
    out, match = {
        "a file": (tmp_path / "f", r"output folder .*/f is a file, not a folder; choose "
                                   r"another output folder \(--out\)"),
        "under a file": (tmp_path / "f" / "res", r"output folder .*/f/res: .*/f is a file, "
                                                 r"not a folder"),
        "read-only": (None, r"cannot create output folder .*riskopt-ro-test: (permission "
                            r"denied|operation not permitted|read-only)"),
    }[case]
    if out is None:
        out = _readonly_dir(tmp_path) / "riskopt-ro-test"
    with pytest.raises(OutputError, match=match):
        _run(out)
    assert not out.exists() or case == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) in (["f"], ["f", "ro"])


# ---------------------------------------------------------------------------- processes
def _child(out, spec_path, jobs=1, delay=0.3, quiet_pipes=False):
    """``riskopt bench run`` in a subprocess; with jobs=1 each cell is slowed by ``delay``."""
    code = textwrap.dedent(f"""
        import sys, time
        import riskopt.bench.runner as r
        real = r._run_cell
        def slow(task):
            out = real(task)
            time.sleep({delay})
            return out
        r._run_cell = slow
        from riskopt.cli import main
        sys.exit(main(["bench", "run", {str(spec_path)!r}, "--out", {str(out)!r},
                       "--jobs", "{jobs}", "--quiet", "--no-plot"]))
    """)
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    pipe = subprocess.DEVNULL if quiet_pipes else subprocess.PIPE  # workers inherit pipes
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=pipe, stderr=pipe,
                            text=True)


def _wait_for(cond, timeout=240.0):
    """Poll ``cond`` until it holds. The default allows a loaded machine (a child process
    that compiles and writes its first cell took over 60 s at load 15 under ``nice``); a
    healthy run returns in seconds, so the wait costs nothing then."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def six_cells(tmp_path_factory):
    """A 6-cell spec (TOML) and its undisturbed table."""
    folder = tmp_path_factory.mktemp("six")
    path = _toml(folder / "six.toml", name="six", seeds=(0, 1, 2))
    out = folder / "ref"
    rb.run(path, out=out, jobs=1, progress=False, plot=False)
    return path, _table(out)


def test_kill_9_then_rerun_gives_the_same_table(six_cells, tmp_path):
    spec_path, table = six_cells
    out = tmp_path / "res"
    proc = _child(out, spec_path, delay=0.5)
    try:
        _wait_for(lambda: len(_cells(out)) >= 2 or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        # a second run meanwhile is refused, naming the live run
        with pytest.raises(RunLockError, match=rf"in use by another run \(pid {proc.pid} on "
                                               rf"host {re.escape(socket.gethostname())}, "
                                               r"started "):
            rb.run(spec_path, out=out, jobs=1, progress=False, plot=False)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and (out / LOCK_NAME).exists()
    n_before = len(_cells(out))
    assert 2 <= n_before < 6
    with pytest.warns(RecoveryWarning, match=rf"from a run that is gone \(pid {proc.pid} "):
        res = rb.run(spec_path, out=out, jobs=1, progress=False, plot=False)
    assert res.complete and res.n_reused == n_before and res.n_run == 6 - n_before
    pd.testing.assert_frame_equal(_table(out), table)
    assert _leftovers(out) == []


def test_sigterm_stops_a_cli_run_cleanly(six_cells, tmp_path):
    spec_path, _ = six_cells
    out = tmp_path / "res"
    proc = _child(out, spec_path)
    try:
        _wait_for(lambda: len(_cells(out)) >= 1 or proc.poll() is not None)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.strip() == ("riskopt: error: interrupted; finished runs are saved -- run the "
                           "same command again to resume")
    assert _leftovers(out) == [] and 1 <= len(_cells(out)) < 6


def test_workers_exit_when_their_parent_is_killed(tmp_path):
    """The watchdog of a worker: ``watch_parent`` in a grandchild, ``kill -9`` of the child."""
    pid_file = tmp_path / "grandchild.pid"
    procs_path = Path(_procs.__file__)
    grandchild = textwrap.dedent(f"""
        import importlib.util, os, sys, time
        spec = importlib.util.spec_from_file_location("p", {str(procs_path)!r})
        p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)
        p.watch_parent(int(sys.argv[1]))
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
    """)
    child = textwrap.dedent(f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {grandchild!r}, str(os.getpid())])
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child])
    try:
        _wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=30)
        gpid = int(pid_file.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        _wait_for(lambda: not Path(f"/proc/{gpid}").exists()
                  or "Z" in Path(f"/proc/{gpid}/stat").read_text().split(")")[1][:3],
                  timeout=5)
        assert time.monotonic() - t0 < 2.0
    finally:
        proc.kill()
        proc.wait()


def test_watch_parent_is_a_no_op_outside_a_direct_child():
    before = list(_procs._WATCHED)
    _procs.watch_parent(os.getpid())  # the parent itself (jobs=1, threading)
    _procs.watch_parent(os.getppid() + 10 ** 6)  # a remote worker: not our parent
    _procs.watch_parent(None)
    assert _procs._WATCHED == before


def _children(pid):
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _running(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("moment", [
    "f* written",  # one worker has had a task, the other none yet
    pytest.param("workers started", marks=pytest.mark.slow),
    pytest.param("cells written", marks=pytest.mark.slow)])
def test_loky_workers_die_with_a_killed_run(moment, tmp_path):
    """End to end with loky: ``kill -9`` of the parent; all its workers are gone within
    seconds (before: they idled on for minutes, the default idle timeout being 300 s)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc")
    spec_path = _toml(tmp_path / "s.toml", name="loky", seeds=(0, 1, 2, 3),
                      lrs=(0.001, 0.003, 0.01), passes=400)
    out = tmp_path / "res"
    proc = _child(out, spec_path, jobs=2, delay=0, quiet_pipes=True)
    ready = {"workers started": lambda: len(_children(proc.pid)) >= 3,
             "f* written": lambda: (out / "fstar.json").exists(),
             "cells written": lambda: len(_cells(out)) >= 1}[moment]
    kids = []
    try:
        _wait_for(lambda: ready() or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, "the run ended before it could be killed"
        kids = _children(proc.pid)
        assert kids
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        _wait_for(lambda: not any(_running(k) for k in kids), timeout=10)
    finally:
        proc.kill()
        proc.wait()
        for k in kids:  # never leave a stray worker behind, whatever happened
            if _running(k):
                os.kill(k, signal.SIGKILL)
