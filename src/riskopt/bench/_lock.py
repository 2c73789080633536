"""One run per output folder: ``<out>/.riskopt-run.lock``.

The lock file holds who owns the folder (pid, host, start time, the pid's start tick from
``/proc`` to tell a reused pid, the command). It is created with ``O_EXCL`` semantics under an
``flock`` (so two runs starting at the same instant cannot both take it) and kept ``flock``-ed
while the run lasts; the kernel drops that ``flock`` when the process dies, even on
``kill -9``.

A second run finds the file and stops with one line naming the owner. A lock whose owner is
gone (a pid that no longer runs on this host, or a pid now used by another process) is stale:
it is taken over with a :class:`~riskopt.bench._io.RecoveryWarning`. A lock from another host
cannot be checked from here; the message says so and how to remove it.
"""
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path

from ._io import RecoveryWarning, describe_os_error, fsync_dir

LOCK_NAME = ".riskopt-run.lock"


class RunLockError(RuntimeError):
    """Another run works in this output folder (the message says which one)."""


def _proc_start(pid):
    """The start time of ``pid`` in clock ticks since boot (``None`` where unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid, start=None):
    """Whether ``pid`` runs here (and, when ``start`` is known, is the same process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        pass
    except OSError:
        return False
    if start is not None:
        now = _proc_start(pid)
        if now is not None and now != start:
            return False  # the pid was reused by another process
    return True


def describe(info):
    """``pid 123 on host h, started 2025-01-01T00:00:00+0000``."""
    return (f"pid {info.get('pid', '?')} on host {info.get('host', '?')}, started "
            f"{info.get('started', '?')}")


def read(out):
    """The owner recorded in ``out``'s lock file (``None`` if there is none or it is
    unreadable)."""
    try:
        info = json.loads((Path(out) / LOCK_NAME).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def holder(out):
    """The owner of a live lock on ``out`` (``None`` if free or stale)."""
    info = read(out)
    if info is None or _stale(info) is not None:
        return None
    return info


def _stale(info):
    """Why the lock described by ``info`` is stale, or ``None`` if its owner may be alive."""
    host = socket.gethostname()
    try:
        pid = int(info["pid"])
    except (KeyError, TypeError, ValueError):
        return "it names no process"
    if info.get("host") != host:
        return None
    if pid == os.getpid():
        return None
    if not _alive(pid, info.get("pid_start")):
        return f"process {pid} is gone"
    return None


class RunLock:
    """``with RunLock(out): ...`` holds ``out``'s lock or raises :class:`RunLockError`."""

    def __init__(self, out):
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self.fd = None

    def acquire(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: the file's content decides
            fcntl = None
        for _ in range(20):  # retried only when the file was replaced under us
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                from ._io import OutputError

                exc.filename = str(self.path)
                raise OutputError(describe_os_error(exc, "cannot create the lock file"))
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                info = read(self.out) or {}
                raise RunLockError(self._held(info)) from None
            except OSError:  # a file system without flock: the file's content decides
                pass
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the previous owner removed it between our open and flock
                os.close(fd)
                continue
            try:
                self._claim(fd)
            except BaseException:
                os.close(fd)
                raise
            self.fd = fd
            return self
        raise RunLockError(f"could not take the lock {self.path}; try again")

    def _claim(self, fd):
        raw = os.read(fd, 65536)
        if raw.strip():
            try:
                info = json.loads(raw)
                info = info if isinstance(info, dict) else {}
            except ValueError:
                info = {}
            why = _stale(info) if info else "the lock file is unreadable"
            if why is None:
                raise RunLockError(self._held(info))
            warnings.warn(f"taking over the lock of {self.out} from a run that is gone "
                          f"({describe(info) if info else 'unknown owner'}: {why})",
                          RecoveryWarning, stacklevel=4)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid_start":
              _proc_start(os.getpid()), "command": " ".join(sys.argv)[:500]}
        data = (json.dumps(me) + "\n").encode()
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, data)
        os.fsync(fd)
        fsync_dir(self.out)

    def _held(self, info):
        host = socket.gethostname()
        where = "" if info.get("host", host) == host else \
            " (another host: this one cannot check whether it still runs)"
        return (f"{self.out} is in use by another run ({describe(info)}){where}; wait for it "
                f"to finish, or delete {self.path} if that run is gone")

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # unlink while still holding the flock
        except OSError:
            pass
        os.close(self.fd)  # closing drops the flock
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
