r"""What every optimizer of :mod:`riskopt.torch.optim` shares: data parallelism (the batch
statistics all-gathered, the same update on every rank) and the divergence check.

Data parallelism
----------------
See :mod:`riskopt.torch.optim._comm` (:class:`~riskopt.torch.optim._comm.CommMixin`, which
:class:`GuardMixin` extends): every rank runs the same update on the gathered batch.

Divergence
----------
Each step, the optimizer hands the guard a cheap tracked objective (from the batch statistics
it already has) and what the *start rule* needs of the step (:meth:`_track`). The guard
folds, without a host sync,

* two flags: a non-finite tracked objective, and a *blow-up* (above ``blowup * max(1, |its
  first value|)``);
* the start rule: the run's *objective estimate* over the steps since the previous check
  (the window), judged against the *start*, the first step's estimate (the objective at the
  initial parameters). The estimate is the batch estimate of the objective each optimizer
  minimises, computed from its gathered batch at the check: SCDRO / ASCDRO / PG-SMD2 the
  KL-DRO value of each batch's losses (its dual minimised over ``lambda``, so a multiplier
  stuck at its bound does not inflate it), RECOVER the KL-penalised value; the compositional
  methods ``direct`` + the mean outer value of the tracked inner values (with the threshold
  ``s`` of :class:`~riskopt.torch.optim.GroupCVaR`); OOA the CVaR of the batch's group
  losses; averaged over the window. A run has diverged when that estimate is above
  ``start + rise * scale`` (``scale = max(|start|, the first batch's loss scale)``;
  ``rise = 1`` by default, the optimizers' ``rise=`` argument: twice a positive start) at two
  consecutive checks, however far it is from a blow-up. A transient spike is not reported;
  ``rise=math.inf`` turns the rule off.

Every ``check_every`` steps (and on :meth:`check_divergence`) the flags and the window's estimate
are read together with a scan of the parameters and the optimizer state for non-finite values
(one sync); a divergence is reported once, as a :class:`riskopt.DivergenceWarning`
(``on_divergence="warn"``, the default) or by raising :class:`DivergenceError`
(``on_divergence="raise"``), naming the optimizer, the step and the learning rate to try
(lr/10). The estimates are computed from the gathered batch, so under data parallelism every
rank takes the same decision at the same step. Non-finite *input* losses raise
:class:`DivergenceError` at once (on every rank: it is checked on the gathered batch).

Compiling
---------
Each optimizer's arithmetic (the batch statistics of ``surrogate`` and the update of
``step``: moving averages, multipliers, tables, projections) is a set of pure tensor
functions (:mod:`riskopt.torch.optim._updates`) with tensor-only control flow and no host
read. :meth:`GuardMixin.compile` compiles them with ``torch.compile(fullgraph=True)``; what
stays eager around them is the host bookkeeping: the index checks, the step counters and
schedules, the finiteness check of the input and this guard (at its cadence). Compiling
``opt.step`` itself is not supported (Dynamo treats an optimizer's Python state as
constant): ``torch.compile(opt.step)`` raises a ``RuntimeError`` that says so.
"""
import collections
import math
import os
import sys
import warnings

import numpy

import torch

from ...callbacks import DivergenceWarning
from . import _comm

__all__ = ["DivergenceError", "GuardMixin"]

_ON_DIVERGENCE = ("warn", "raise", "ignore")
#: the divergence flags of a fresh run (``first``: the step of the first flag; ``ref``: the
#: blow-up reference; ``start`` / ``scale``: the start rule's start and its scale, ``last``:
#: the last window's estimate; ``lam``: the KL windows' grid exponent for the next check's
#: bound, see ``_KLWindow._window_estimate``), and their types
#: ``stall``: the first step of the first run of ``stall_steps`` consecutive steps whose
#: gradient vanished for a reason the optimizer names (SCDRO: every weight underflowed), -1
#: if none yet; ``stall_run``: how many consecutive steps up to now have stalled;
#: ``stall_info``: the numbers at the first step of that run (until a stall is recorded: of
#: the current run) (SCDRO: ``lambda``, the batch's tracked dual, ``log s``), for the message
_G_FRESH = {"bad": False, "first": -1, "ref": math.nan, "start": math.nan,
            "scale": math.nan, "last": math.nan, "lam": math.nan, "stall": -1,
            "stall_run": 0, "stall_lam": math.nan, "stall_obj": math.nan, "stall_logs": math.nan}
_G_TYPES = {"bad": (bool, torch.bool), "first": (int, torch.int64),
            "stall": (int, torch.int64), "stall_run": (int, torch.int64),
            **{k: (float, torch.float64) for k in ("ref", "start", "scale", "last", "lam",
                                                   "stall_lam", "stall_obj", "stall_logs")}}
_CPU = torch.device("cpu")
_SKIP = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
         os.path.dirname(os.path.abspath(torch.__file__)))


def _user_stacklevel():
    """The ``stacklevel`` of the first frame outside riskopt.torch and torch (the user's
    ``opt.step()`` line), for the caller of ``warnings.warn``."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP):
        frame, level = frame.f_back, level + 1
    return level


class DivergenceError(ValueError, ArithmeticError):
    """An optimizer of :mod:`riskopt.torch.optim` diverged (``on_divergence="raise"``) or was
    given non-finite losses. A ``ValueError`` (bad input) and an ``ArithmeticError``."""


class GuardMixin(_comm.CommMixin):
    """Mixin: ``_init_guard`` in ``__init__``; ``_gather`` for the batch statistics (from
    :class:`~riskopt.torch.optim._comm.CommMixin`),
    ``_track`` per step, ``_end_step`` at the end of ``step``; ``_guard_state`` /
    ``_load_guard_state`` in the checkpoints."""

    def _init_guard(self, process_group=None, on_divergence="warn", check_every=10,
                    blowup=1e6, rise=1.0):
        if on_divergence not in _ON_DIVERGENCE:
            raise ValueError(f"on_divergence must be one of {_ON_DIVERGENCE}, "
                             f"got {on_divergence!r}")
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 0:
            raise ValueError(f"check_every must be an int >= 0 (0: never), got {check_every!r}")
        if not (isinstance(blowup, (int, float)) and blowup > 1):
            raise ValueError(f"blowup must be a number > 1, got {blowup!r}")
        if isinstance(rise, bool) or not (isinstance(rise, (int, float)) and rise > 0):
            raise ValueError(f"rise must be a number > 0 (math.inf: off), got {rise!r}")
        self._init_comm(process_group)
        self.on_divergence, self.check_every, self.blowup = on_divergence, check_every, blowup
        self.rise = float(rise)
        dev = self.param_groups[0]["params"][0].device
        self._g = dict(_G_FRESH)
        self._g_on(dev)
        self._g_steps, self._g_reported, self._g_rose = 0, False, 0
        self._g_stall_reported = False
        self._g_window = collections.deque(maxlen=check_every or 10)
        self._g_inputs = []     # (what, step, 0-d bool on a device): read at the next check
        self._compile_kwargs, self._compiled = None, {}

    # ------------------------------------------------------------------ compiling
    def compile(self, **kwargs):
        """Compile the optimizer's tensor updates (the module docstring's "Compiling") with
        ``torch.compile(fn, fullgraph=True, **kwargs)`` (e.g. ``backend="inductor"``, the
        default, or ``"aot_eager"``); each is compiled at its first call. A graph break
        raises. Returns the optimizer."""
        if kwargs.pop("fullgraph", True) is not True:
            raise ValueError("the optimizers' updates compile with fullgraph=True only")
        self._compile_kwargs, self._compiled = dict(kwargs), {}
        return self

    def _kernel(self, fn):
        """``fn`` (a function of :mod:`~riskopt.torch.optim._updates`), compiled when
        :meth:`compile` was called."""
        if getattr(self, "_compile_kwargs", None) is None:
            return fn
        out = self._compiled.get(fn)
        if out is None:
            out = self._compiled[fn] = torch.compile(fn, fullgraph=True,
                                                     **self._compile_kwargs)
        return out

    def _check_input_finite(self, values, what):
        """Raise :class:`DivergenceError` when the gathered ``values`` (a tensor or a NumPy
        array) are not all finite. On a device (with ``check_every``) the test is a flag
        on the device, read with the next divergence check (no host sync per step): the
        error then comes at that check and names the step."""
        if isinstance(values, numpy.ndarray):
            ok = bool(numpy.isfinite(values).all())
        elif not values.numel():
            ok = True
        elif self.check_every and _comm._on_device(values):
            self._g_inputs.append((what, self._g_steps + 1, torch.isfinite(values).all()))
            return
        else:
            ok = _comm._all_finite(values)
        if not ok:
            self._raise_input(what, self._g_steps + 1)

    def _raise_input(self, what, step):
        raise DivergenceError(self._input_text(what, step))

    def _input_text(self, what, step):
        """The error for a failed input flag ``what`` (an optimizer may add its own flags)."""
        return (f"{type(self).__name__}: non-finite {what} at step {step}; the "
                f"model (or the loss) diverged: lower lr (now {self._lr_text()}) or check the "
                "data")

    def _check_inputs_posted(self):
        """The device flags of :meth:`_check_input_finite` since the previous check (one
        host read)."""
        if self._g_inputs:
            inputs, self._g_inputs = self._g_inputs, []
            for (what, step, _), ok in zip(inputs, torch.stack(
                    [f.to(inputs[0][2].device) for *_, f in inputs]).tolist()):
                if not ok:
                    self._raise_input(what, step)

    # ------------------------------------------------------------------ divergence
    def _lr_text(self):
        return ", ".join(f"{g['lr']:g}" for g in self.param_groups
                         if "lr" in g and not g.get("previous_iterate"))

    @torch.no_grad()
    def _track(self, objective, window=None, scale=None):
        """Fold the step's tracked objective (0-d tensor, cheap, or a float) into the non-finite and
        blow-up flags: Python numbers for a CPU objective (no sync to avoid, fewer small
        ops), tensors on its device otherwise (no host sync).

        ``window``: what the start rule needs of this step (the 0-d objective estimate, a
        Python float on a host path, or what :meth:`_window_value` turns into it, e.g. the
        batch's losses), kept until the
        next check; the first step's is the start. ``scale`` (a callable returning a 0-d
        tensor, e.g. the batch's mean absolute loss) is called at the first step only: the
        start's scale is ``max(|start|, scale())``."""
        host = isinstance(objective, float)     # (a host path's Python number)
        obj = objective if host else objective.detach()
        host = host or not _comm._on_device(obj)
        g = self._g_on(_CPU if host else obj.device, tensors=not host)
        if window is not None:
            if not isinstance(window, float) and window.requires_grad:
                window = window.detach()
            if self._g_steps == 0:
                self._set_start(g, window, scale)
            self._g_window.append(window)
        if host:
            v = float(obj)
            fin = math.isfinite(v)
            if math.isnan(g["ref"]):
                g["ref"] = max(abs(v), 1.0) if fin else 1.0
            bad = not fin or abs(v) > self.blowup * g["ref"]
            if bad and g["first"] < 0:
                g["first"] = self._g_steps + 1
            g["bad"] = g["bad"] or bad
            return
        self._track_tensor(obj, g)

    def _set_start(self, g, window, scale):
        """The start rule's start (the first step's estimate: the objective at the initial
        parameters) and its scale ``max(|start|, scale())``, without a host sync on a
        device."""
        v = self._window_value([window]).to(torch.float64)
        floor = None if scale is None else scale().to(torch.float64)
        if isinstance(g["start"], torch.Tensor):
            sc = v.abs() if floor is None else torch.maximum(v.abs(), floor.to(v.device))
            g["start"], g["scale"] = v.to(g["ref"].device), sc.clamp(min=1e-300).to(
                g["ref"].device)
        else:
            g["start"] = float(v)
            g["scale"] = max(abs(g["start"]), 0.0 if floor is None else float(floor), 1e-300)

    def _window_value(self, items):
        """The objective estimate of a window of steps (0-d float64 tensor): the mean of the
        steps' estimates. Optimizers that keep something else in the window (the batch's
        losses) override it."""
        if any(isinstance(t, float) for t in items):     # (a host path's: all on the CPU)
            return torch.tensor([float(t) for t in items], dtype=torch.float64).mean()
        return torch.stack([t.reshape(()).to(torch.float64) for t in items]).mean()

    def _window_estimate(self, items, limit):
        """The check's estimate as a Python float (flags on the host); ``limit``: the start
        rule's limit (an optimizer may return a bound that takes the same decision)."""
        return float(self._window_value(items).to(torch.float64))

    def _track_tensor(self, obj, g):
        """The device path of :meth:`_track`: ``g`` holds 0-d tensors on ``obj``'s device,
        updated without a host sync."""
        obj = obj.to(torch.float64)
        first = torch.where(torch.isfinite(obj), obj.abs().clamp(min=1.0), torch.ones_like(obj))
        g["ref"] = torch.where(torch.isnan(g["ref"]), first, g["ref"])
        bad = ~torch.isfinite(obj) | (obj.abs() > self.blowup * g["ref"])
        g["first"] = torch.where(bad & (g["first"] < 0),
                                 torch.full_like(g["first"], self._g_steps + 1), g["first"])
        g["bad"] = g["bad"] | bad

    def _flag_stall(self, stalled, info, persist=1):
        """Count a step whose gradient vanished: ``stalled`` a bool (host path) or a 0-d
        bool tensor (no host sync), ``info`` the optimizer's three numbers ``(lambda, tracked
        dual, log s)`` of that step (floats or 0-d tensors). Once ``persist`` consecutive
        steps have stalled, the stall is recorded (once: the first such run), with the first
        step of the run and its numbers, and reported at the next check
        (:meth:`_stall_text`); a shorter run is forgotten. Call after :meth:`_track`, at
        every step (a step that does not stall ends the run)."""
        g = self._g
        step = self._g_steps + 1
        if not isinstance(g["ref"], torch.Tensor):
            run = g["stall_run"] + 1 if stalled else 0
            g["stall_run"] = run
            if g["stall"] < 0:
                if run == 1:        # a run starts: its numbers (kept if it lasts)
                    g["stall_lam"], g["stall_obj"], g["stall_logs"] = (float(v) for v in info)
                if run >= persist:
                    g["stall"] = step + 1 - run
            return
        stalled = stalled.to(g["stall"].device)
        run = torch.where(stalled, g["stall_run"] + 1, torch.zeros_like(g["stall_run"]))
        open_ = g["stall"] < 0
        new = open_ & (run == 1)
        for k, v in zip(("stall_lam", "stall_obj", "stall_logs"), info):
            g[k] = torch.where(new, torch.as_tensor(v, dtype=torch.float64).to(g[k].device),
                               g[k])
        g["stall_run"] = run
        g["stall"] = torch.where(open_ & (run >= persist), (step + 1) - run, g["stall"])

    def _stall_text(self, step):
        """What the report of a stall (see :meth:`_flag_stall`) says (optimizers that flag one
        override it)."""
        return (f"{type(self).__name__} stalled at step {step}: its gradient vanished; "
                f"{self._advice()}")

    def _g_on(self, device, tensors=None):
        """The flags as Python numbers (CPU) or as tensors on ``device`` (``tensors``: which
        of the two; default: tensors off the CPU)."""
        g = self._g
        if not (device.type != "cpu" if tensors is None else tensors):
            if isinstance(g["ref"], torch.Tensor):
                self._g = g = {k: _G_TYPES[k][0](v) for k, v in g.items()}
        elif not isinstance(g["ref"], torch.Tensor) or g["ref"].device != device:
            self._g = g = {k: torch.as_tensor(v, dtype=_G_TYPES[k][1]).to(device)
                           for k, v in g.items()}
        return g

    def _closure(self, closure):
        """The loss of ``step``'s optional closure (evaluated with gradients), or None.

        Every ``step`` starts here: under ``torch.compile(opt.step)`` (Dynamo tracing) it
        raises instead of letting the trace freeze the optimizer's Python state (the
        counters, schedules and flags), which gave wrong numbers without a word."""
        if torch.compiler.is_compiling():
            raise RuntimeError(
                f"torch.compile of {type(self).__name__}.step is not supported: the trace "
                "would treat the optimizer's Python state (step counters, schedules) as "
                "constant. Call opt.compile() instead: it compiles the step's tensor "
                "updates with fullgraph=True and keeps the bookkeeping eager")
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()

    def _end_step(self):
        self._g_steps += 1
        if self.check_every and self._g_steps % self.check_every == 0:
            self.check_divergence()

    def _state_tensors(self):
        for group in self.param_groups:
            for p in group["params"]:
                yield p
                for v in self.state[p].values():
                    if isinstance(v, torch.Tensor) and v.is_floating_point():
                        yield v
        yield from self._extra_tensors()

    def _extra_tensors(self):
        return ()

    @torch.no_grad()
    def check_divergence(self):
        """Check now (one host sync): returns True when the run diverged, after reporting it
        (once) as ``on_divergence`` says. The objective estimate of the steps since the
        previous check above ``start + rise * scale`` counts when the previous check's was
        above too."""
        self._check_inputs_posted()
        g = self._g
        tensors = [t for t in self._state_tensors() if t.numel()]
        flags = ([torch.isfinite(t).all() for t in tensors]
                 if isinstance(g["ref"], torch.Tensor) else None)
        above = None
        if self._g_window:          # the window since the previous check
            items = list(self._g_window)
            self._g_window.clear()
            limit = g["start"] + self.rise * g["scale"]
            if isinstance(g["ref"], torch.Tensor):
                est = self._window_value(items).to(torch.float64)
                g["last"] = est.to(g["ref"].device)
            else:
                g["last"] = self._window_estimate(items, limit)
            above = g["last"] > limit     # NaN start: False
        if isinstance(g["ref"], torch.Tensor):    # device flags: read with the scan
            dev = g["bad"].device
            fin = (torch.stack([f.to(dev) for f in flags]).all() if flags
                   else torch.ones((), dtype=torch.bool, device=dev))
            up = torch.zeros((), dtype=torch.bool, device=dev) if above is None else above
            finite, blew, up, stalled = torch.stack(
                [fin, g["bad"], up, g["stall"].to(dev) >= 0]).tolist()
        else:       # (NumPy on CPU tensors: fewer small tensor ops)
            finite = all(_comm._all_finite(t) for t in tensors)
            blew, up, stalled = bool(g["bad"]), bool(above), g["stall"] >= 0
        if above is not None:
            self._g_rose = self._g_rose + 1 if up else 0
        rose = self._g_rose >= 2
        if finite and not blew and not rose:
            if not stalled:
                return False
            if self._g_stall_reported or self.on_divergence == "ignore":
                return True
            self._g_stall_reported = True          # once per run (a checkpoint keeps it)
            msg = self._stall_text(int(g["stall"]))
            if self.on_divergence == "raise":
                raise DivergenceError(msg)
            warnings.warn(msg, DivergenceWarning, stacklevel=_user_stacklevel())
            return True
        if self._g_reported or self.on_divergence == "ignore":
            return True
        self._g_reported = True
        first = int(g["first"])
        where = f"at step {first}" if first > 0 else f"by step {self._g_steps}"
        if not finite:
            what = "non-finite parameters or optimizer state"
        elif blew:
            what = f"its objective blew up (more than {self.blowup:g} x its first value)"
        else:
            start, last, scale = float(g["start"]), float(g["last"]), float(g["scale"])
            where = f"by step {self._g_steps}"
            what = (f"its objective estimate stayed above its start: {last:.4g} over the "
                    f"last steps against a start of {start:.4g} (limit start + {self.rise:g}"
                    f" x {scale:.3g}) at two consecutive checks")
        msg = (f"{type(self).__name__} diverged {where}: {what}; {self._advice()}")
        if self.on_divergence == "raise":
            raise DivergenceError(msg)
        warnings.warn(msg, DivergenceWarning, stacklevel=_user_stacklevel())
        return True

    def _advice(self):
        """What to change: lr/10 (the linear solvers' advice), the moving-average rate or
        gradient clipping."""
        lrs = [g["lr"] for g in self.param_groups
               if "lr" in g and not g.get("previous_iterate")]
        now = ", ".join(f"{lr:g}" for lr in lrs)
        try_ = ", ".join(f"{lr / 10:.3g}" for lr in lrs)
        return (f"lower lr (now {now}; try lr={try_}, lr/10), or the moving-average rate, "
                "or clip the gradients")

    # ------------------------------------------------------------------ checkpoints
    def _guard_state(self):
        # ``inputs``: the input flags of :meth:`_check_input_finite` not read yet (a bad
        # input between the previous check and this checkpoint is reported after a resume)
        return {"steps": self._g_steps, "reported": self._g_reported, "rose": self._g_rose,
                "stall_reported": self._g_stall_reported,
                "window": [torch.tensor(t, dtype=torch.float64) if isinstance(t, float)
                           else t.clone() for t in self._g_window],
                "inputs": [(what, step, flag.detach().clone())
                           for what, step, flag in self._g_inputs],
                **{k: torch.as_tensor(v, dtype=_G_TYPES[k][1]).clone()
                   for k, v in self._g.items()}}

    def _load_guard_state(self, state):
        if state is None:      # a checkpoint from before the guard
            return
        dev = self.param_groups[0]["params"][0].device
        self._g_steps, self._g_reported = int(state["steps"]), bool(state["reported"])
        self._g_rose = int(state.get("rose", 0))
        self._g_stall_reported = bool(state.get("stall_reported", False))
        self._g_window.clear()
        self._g_window.extend(t.to(dev) for t in state.get("window", ()))
        # (a checkpoint from before the pending input flags were saved: none pending)
        self._g_inputs = [(str(what), int(step), flag.to(dev, torch.bool).reshape(()))
                          for what, step, flag in state.get("inputs", ())]
        # a checkpoint from before the start rule has no start: the rule stays off
        self._g = {k: (state[k] if k in state else torch.as_tensor(_G_FRESH[k])).to(
            dev, _G_TYPES[k][1]) for k in _G_FRESH}
        self._g_on(dev)
