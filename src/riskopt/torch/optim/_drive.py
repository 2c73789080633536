"""How a training loop drives each registered optimizer: one configuration ("row") per
optimizer and variant, a small problem, and a loop that runs the same script in one process or
on every rank of a process group (each rank its contiguous share of every global batch).

Used by the common test table (``tests/test_torch_optim_common.py``), the communication
benchmark (``benchmarks/torch_ddp_comm.py``) and the before / after measurement
(``benchmarks/torch_ddp_exactness.py``); not part of the public API.
"""
import copy

import torch

from .fcco import ALEXR2, SONEX, SONX, SOX
from .outer import GroupCVaR, Hinge, SquaredHinge
from .ooa import OOA
from .ascdro import ASCDRO
from .kl_dro import SCDRO
from .pgsmd2 import PGSMD2

__all__ = ["ROWS", "make_problem", "make_optimizer", "drive_step", "split", "run",
           "state_tensors", "guard_summary"]

#: name -> (class, keyword arguments, kind); ``kind`` says how the loop drives it
ROWS = {
    "scdro": (SCDRO, dict(radius=0.5, lr=0.1, beta=0.5), "scdro"),
    "rscdro": (SCDRO, dict(radius=0.5, lr=0.1, beta=0.5, stage_steps=2, mu=1e-3), "scdro"),
    "ascdro": (ASCDRO, dict(radius=0.5, lr=0.1, beta=0.5), "ascdro"),
    "rascdro": (ASCDRO, dict(radius=0.5, lr=0.1, beta=0.5, stage_steps=2), "ascdro"),
    "recover": (ASCDRO, dict(radius=None, shift_cost=0.5, lr=0.1, beta=0.5), "ascdro"),
    "pgsmd2": (PGSMD2, dict(radius=0.5, lr=0.1, dual_lr=0.05, gamma=10.0, center_every=2),
               "pgsmd2"),
    "spd": (PGSMD2, dict(radius=0.5, lr=0.1, dual_lr=0.05, gamma=None), "pgsmd2"),
    "sonex": (SONEX, dict(outer=GroupCVaR(0.5), lr=0.1), "fcco"),
    "sonex_adam": (SONEX, dict(outer=Hinge(2.0, 0.3), lr=0.05, update="adam"), "fcco"),
    "sonx": (SONX, dict(outer=Hinge(2.0, 0.3), lr=0.1), "fcco"),
    "sox": (SOX, dict(outer=SquaredHinge(2.0, 0.3), lr=0.1), "fcco"),
    "alexr2": (ALEXR2, dict(outer=Hinge(2.0, 0.3), lr=0.1, inner_lr=0.1, inner_steps=2),
               "fcco"),
    "ooa": (OOA, dict(tail_fraction=0.5, lr=0.1, dual_lr=0.1), "ooa"),
}


def make_problem(n=48, d=4, hidden=8, n_groups=4, seed=0, dtype=torch.float64):
    """A regression problem with ``n_groups`` groups of growing noise and an MLP (seeded)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=dtype)
    groups = torch.arange(n) % n_groups
    y = X[:, 0] - 0.5 * X[:, 1] + 0.3 * groups.to(dtype) * torch.randn(n, generator=g,
                                                                       dtype=dtype)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.Tanh(),
                                torch.nn.Linear(hidden, 1)).to(dtype)
    return X, y, groups, model


def make_optimizer(name, params, n, n_groups, **extra):
    """The optimizer of row ``name`` (``extra`` overrides the row's keyword arguments)."""
    cls, kwargs, kind = ROWS[name]
    kwargs = {**kwargs, **extra}
    if kind == "pgsmd2":
        return cls(params, n, **kwargs)
    if kind in ("fcco", "ooa"):
        return cls(params, n_groups, **kwargs)
    return cls(params, **kwargs)


def _losses(out, t):
    return 0.5 * (out[:, 0] - t) ** 2


def _group_means(losses, gid):
    """The distinct group ids, the mean loss of each and the rows behind each."""
    ids, inv = torch.unique(gid, return_inverse=True)
    counts = torch.zeros(ids.numel(), dtype=losses.dtype).index_add_(
        0, inv, torch.ones_like(losses))
    sums = torch.zeros(ids.numel(), dtype=losses.dtype).index_add_(0, inv, losses)
    return ids, sums / counts, counts


def drive_step(kind, opt, model, module, X, y, groups, idx, scaler=None):
    """One training step of the optimizer ``opt`` (of ``kind``) on the rows ``idx``:
    ``model`` is what the forward pass calls (a DDP wrapper or the module), ``module`` the
    plain module (for the evaluations at the previous iterate); ``scaler``: a
    ``torch.amp.GradScaler`` (``scaler.scale(...).backward()``, ``scaler.step(opt)``)."""
    x, t = X[idx], y[idx]
    step_kwargs = {}
    if kind == "scdro":
        opt.zero_grad()
        out = opt.surrogate(_losses(model(x), t))
    elif kind == "ascdro":
        losses = _losses(model(x), t)
        prev = _losses(torch.func.functional_call(module, opt.previous_params(module), (x,)), t)
        opt.zero_grad()
        out = opt.surrogate(losses, prev)
    elif kind == "pgsmd2":
        losses = _losses(model(x), t)
        opt.zero_grad()
        out = (opt.weights(idx, losses=losses.detach()) * losses).sum()
        step_kwargs = dict(indices=idx, losses=losses.detach())
    elif kind == "fcco":      # with a direct term: a tenth of the batch's mean loss
        losses = _losses(model(x), t)
        ids, g_now, counts = _group_means(losses, groups[idx])
        g_prev = opt.evaluate_previous(       # (SONX, SOX: no g_prev, no second forward)
            module, lambda f: _group_means(_losses(f(x), t), groups[idx])[1]
        ) if opt.needs_previous else None
        opt.zero_grad()
        direct = 0.1 * losses.sum() / max(idx.numel(), 1)    # (a rank may get no row)
        out = opt.surrogate(ids, g_now, g_prev, counts=counts, direct=direct,
                            direct_count=idx.numel())
    elif kind == "ooa":
        ids, L, counts = _group_means(_losses(model(x), t), groups[idx])
        opt.zero_grad()
        out = opt.surrogate(ids, L, counts=counts)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    if scaler is None:
        out.backward()
        opt.step(**step_kwargs)
    else:
        scaler.scale(out).backward()
        scaler.step(opt, **step_kwargs)
        scaler.update()


def split(idx, rank, world):
    """Rank ``rank``'s contiguous share of the global batch ``idx`` (rank 0 takes the
    larger part when it does not divide: unequal per-rank batches)."""
    b = idx.numel()
    sizes = [b // world + (r < b % world) for r in range(world)]
    if world > 1 and sizes[-1] > 1:
        sizes[0], sizes[-1] = sizes[0] + 1, sizes[-1] - 1
    bounds = [sum(sizes[:r]) for r in range(world + 1)]
    return idx[bounds[rank]:bounds[rank + 1]]


def batches(n, steps, seed=1, sizes=(12, 12, 9, 16, 1)):
    """The global batches of a run: sampled rows (with some repeats across batches); the
    batch of one row leaves the last rank of two without any."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randperm(n, generator=g)[:sizes[k % len(sizes)]] for k in range(steps)]


def state_tensors(opt):
    """Every floating tensor of the optimizer's state (parameters' state, tables, scalars),
    flattened into one float64 vector (for comparisons)."""
    parts = [t.detach().double().reshape(-1) for t in opt._state_tensors()]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def run(name, steps, rank=0, world=1, wrap=None, seed=0, save_at=None, info=None,
        attach=False, dtype=torch.float64, **extra):
    """Train row ``name`` for ``steps`` steps (this rank's share of each global batch).

    ``wrap(module)`` returns what the forward calls (e.g. a DDP wrapper). Returns the
    parameters (flattened), the optimizer state vector and, with ``save_at``, the
    ``(model, optimizer)`` state dicts after ``save_at`` steps; ``info`` (a dict) receives
    the number of collectives the optimizer's gathers issued (``comm_calls``) and, with
    ``attach`` (the statistics carried on DDP's all-reduce: ``opt.attach(model)``), the steps
    that needed the out-of-range correction (``fixes``) and the bytes carried on it
    (``carried``); ``extra`` goes to the optimizer (e.g. ``process_group=False``).
    """
    X, y, groups, module = make_problem(seed=seed, dtype=dtype)
    model = module if wrap is None else wrap(module)
    kind = ROWS[name][2]
    opt = make_optimizer(name, module.parameters(), X.shape[0], 4, **extra)
    if attach:
        opt.attach(model)
    saved = None
    for k, idx in enumerate(batches(X.shape[0], steps)):
        if save_at is not None and k == save_at:
            saved = copy.deepcopy((module.state_dict(), opt.state_dict()))
        drive_step(kind, opt, model, module, X, y, groups, split(idx, rank, world))
    if info is not None:
        info["comm_calls"] = opt.comm_calls
        info["fixes"] = getattr(opt, "_post_fixes", 0)
        info["carried"] = getattr(opt._gatherer, "carried", 0)
        info["grad_reduces"] = getattr(opt, "_grad_reduces", 0)
        info["overlapped"] = getattr(opt, "overlapped", 0)
        info["guard"] = guard_summary(opt)
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    return flat, state_tensors(opt), saved


def guard_summary(opt):
    """The divergence guard's decision and numbers (for comparisons across ranks / runs)."""
    g = opt._g
    return {"reported": opt._g_reported, "rose": opt._g_rose, "steps": opt._g_steps,
            "stall": int(g["stall"]), "stall_run": int(g["stall_run"]),
            "stall_reported": opt._g_stall_reported,
            **{k: float(g[k]) for k in ("start", "scale", "last")}}


def resume(name, steps, saved, seed=0, info=None, **extra):
    """One process: load ``saved`` (taken after ``k`` steps) and finish the ``steps``
    (``info`` receives the guard's summary)."""
    X, y, groups, module = make_problem(seed=seed)
    model_state, opt_state = saved
    module.load_state_dict(model_state)
    kind = ROWS[name][2]
    opt = make_optimizer(name, module.parameters(), X.shape[0], 4, **extra)
    opt.load_state_dict(opt_state)
    done = opt_state_steps(opt)
    for idx in batches(X.shape[0], steps)[done:]:
        drive_step(kind, opt, module, module, X, y, groups, idx)
    if info is not None:
        info["guard"] = guard_summary(opt)
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    return flat, state_tensors(opt)


def opt_state_steps(opt):
    """The number of ``step`` calls behind an optimizer's state (the guard's counter)."""
    return opt._g_steps
