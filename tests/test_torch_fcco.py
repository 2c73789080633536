"""The PyTorch FCCO optimizers (riskopt.torch.optim.fcco): SONEX / SONX / SOX / ALEXR2 / OOA
step by step against their NumPy twins (tests/reference_impl/fcco_torch.py), the outer
functions' Moreau gradients against numerical minimisation, checkpoints, devices, argument
errors, and convergence to the exact group-DRO optimum (cvxpy)."""
import io

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

torch = pytest.importorskip("torch")
F = torch.nn.functional

from reference_impl import fcco_torch as twin  # noqa: E402
from riskopt.torch.optim import (  # noqa: E402
    ALEXR2, OOA, SONEX, SONX, SOX, AbsHinge, GroupCVaR, Hinge, SquaredHinge,
    project_capped_simplex)

M, D = 6, 3


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one thread (OpenMP spinning on a shared 2-core machine costs 100x)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

# name: (torch outer, twin outer, offsets of the inner values, use a direct term)
OUTERS = {
    "hinge": (lambda: Hinge(2.0, 0.0), ("hinge", 2.0, 0.0), 0.62, True),
    "abshinge": (lambda: AbsHinge(3.0, 0.02), ("abshinge", 3.0, 0.02), 0.69, True),
    "sqhinge": (lambda: SquaredHinge(3.0, 0.1), ("sqhinge", 3.0, 0.1, False), 0.5, False),
    "abssqhinge": (lambda: SquaredHinge(3.0, 0.02, absolute=True),
                   ("sqhinge", 3.0, 0.02, True), 0.69, True),
    "cvar": (lambda: GroupCVaR(0.5), ("cvar", 0.5), 0.0, False),
}


def _problem(seed=0, n=120):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    g = np.arange(n) % M
    y = (X @ rng.normal(size=D) + 0.5 * rng.normal(size=n) > 0).astype(float)
    return X, y, g


def _steps(g, T, b1=3, b2=4, direct=False, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(T):
        ids = rng.choice(M, size=b1, replace=False)
        rows = [rng.choice(np.flatnonzero(g == i), size=b2) for i in ids]
        out.append({"I": ids, "rows": rows,
                    "drows": rng.choice(len(g), size=5) if direct else None})
    return out


def _theta(model):
    return np.concatenate([model.weight.detach().numpy().ravel(),
                           model.bias.detach().numpy()])


def _run(make_opt, steps, X, y, offsets, seed=0, model=None, opt=None):
    """Runs the torch optimizer on the twin's step sequence; one (theta, s, u) per step."""
    torch.manual_seed(seed)
    model = model or torch.nn.Linear(D, 1).double()
    opt = opt or make_opt(model.parameters())
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    out = []
    for st in steps:
        def inner(f, st=st):
            return torch.stack([F.binary_cross_entropy_with_logits(
                f(Xt[rows])[:, 0], yt[rows]) - offsets[i] for i, rows in zip(st["I"],
                                                                            st["rows"])])
        g_now = inner(model)
        g_prev = opt.evaluate_previous(model, inner)
        direct = None
        if st["drows"] is not None:
            direct = F.binary_cross_entropy_with_logits(model(Xt[st["drows"]])[:, 0],
                                                        yt[st["drows"]])
        opt.zero_grad()
        opt.surrogate(torch.as_tensor(st["I"]), g_now, g_prev, direct=direct).backward()
        opt.step()
        out.append((_theta(model), opt.s, opt.indexed_state("u").numpy().copy()))
    return out, model, opt


CASES = [(meth, outer, upd) for meth in ("sonex", "sonx", "alexr2", "sox") for outer in OUTERS
         for upd in ("momentum", "adam") if meth != "sox" or outer.endswith("sqhinge")]


@pytest.mark.parametrize("method,outer,update", CASES)
def test_fcco_matches_numpy_twin_step_by_step(method, outer, update):
    make_outer, spec, off, direct = OUTERS[outer]
    X, y, g = _problem()
    offsets = off + 0.02 * np.arange(M)
    steps = _steps(g, 20, direct=direct)
    lr = 0.2 if update == "momentum" else 0.05
    wd = 0.01
    torch.manual_seed(0)
    theta0 = _theta(torch.nn.Linear(D, 1).double())
    adam = update == "adam"
    if method == "alexr2":
        def make(p):
            return ALEXR2(p, M, make_outer(), lr=lr, inner_lr=0.1, nu=0.5, inner_steps=3,
                          smoothing=0.05, update=update, weight_decay=wd)
        ref = twin.alexr2(X, y, offsets, spec, theta0, steps, M, lr, 0.1, 0.5, 3, 0.8, 0.125,
                          0.1, 0.05, adam, weight_decay=wd)
    else:
        gp, lam = (0.1, 0.05) if method == "sonex" else (0.0, 0.0)
        cls = {"sonex": SONEX, "sonx": SONX, "sox": SOX}[method]
        kw = dict(gamma_prime=gp, smoothing=lam) if method == "sonex" else {}

        def make(p):
            return cls(p, M, make_outer(), lr=lr, update=update, weight_decay=wd, **kw)
        ref = twin.single_loop(X, y, offsets, spec, theta0, steps, M, lr, 0.1, 0.8, gp, lam,
                               adam, weight_decay=wd)
    got, _, _ = _run(make, steps, X, y, offsets)
    for t, ((th, s, u), (th_r, s_r, u_r)) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(th, th_r, rtol=0, atol=1e-10, err_msg=f"step {t}")
        np.testing.assert_allclose(u, u_r, rtol=0, atol=1e-10, err_msg=f"step {t}")
        if outer == "cvar":
            assert s == pytest.approx(s_r, abs=1e-10)
    assert np.abs(got[-1][0] - theta0).max() > 1e-3  # it moved


@pytest.mark.parametrize("r", [0.5, 0.1])
def test_ooa_matches_numpy_twin_step_by_step(r):
    """r = 0.1 with M groups has r M < 1: the cap 1/(r M) exceeds 1 and the weights range
    over the whole simplex (CVaR of M atoms below 1/M is the max); accepted, as by the
    NumPy solver."""
    X, y, g = _problem()
    steps = _steps(g, 20)
    torch.manual_seed(0)
    theta0 = _theta(torch.nn.Linear(D, 1).double())
    ref = twin.ooa(X, y, np.zeros(M), theta0, steps, M, r, 0.2, 0.3, weight_decay=0.01)
    torch.manual_seed(0)
    model = torch.nn.Linear(D, 1).double()
    opt = OOA(model.parameters(), M, tail_fraction=r, lr=0.2, dual_lr=0.3, weight_decay=0.01)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    for t, (st, (th_r, p_r)) in enumerate(zip(steps, ref)):
        L = torch.stack([F.binary_cross_entropy_with_logits(model(Xt[r])[:, 0], yt[r])
                         for r in st["rows"]])
        opt.zero_grad()
        opt.surrogate(st["I"], L).backward()
        opt.step()
        np.testing.assert_allclose(_theta(model), th_r, rtol=0, atol=1e-10, err_msg=f"{t}")
        np.testing.assert_allclose(opt.group_weights.numpy(), p_r, rtol=0, atol=1e-10)
    if r == 0.5:
        assert opt.group_weights.max() == pytest.approx(1 / 3)  # the cap is active


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("m,r", [(4, 0.5), (7, 0.3), (50, 0.1), (3, 1 / 3)])
def test_project_capped_simplex_exact(seed, m, r):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=m) * rng.choice([0.01, 1.0, 30.0])
    cap = 1.0 / (r * m)
    p = project_capped_simplex(torch.as_tensor(x), cap).numpy()
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert p.min() >= 0 and p.max() <= cap + 1e-15
    np.testing.assert_allclose(p, twin.project_capped_simplex(x, cap), atol=1e-12)
    # optimality: p = clip(x - tau) for one tau (free coordinates share the shift)
    free = (p > 1e-12) & (p < cap - 1e-12)
    if free.any():
        np.testing.assert_allclose(x[free] - p[free], (x[free] - p[free])[0], atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("m,r", [(1, 1.0), (4, 0.5), (7, 0.3), (50, 0.1), (3, 1 / 3),
                                 (5, 0.15)])
def test_capped_simplex_host_code_is_the_tensor_code(seed, m, r):
    """OOA's eager CPU step projects in NumPy; the tensor code (compile, GPUs) does the
    same operations: the same numbers, bit for bit, ties and a cap above 1 included."""
    from riskopt.torch.optim import _updates_fcco as _updates
    rng = np.random.default_rng(seed)
    x = rng.normal(size=m) * rng.choice([0.01, 1.0, 30.0])
    if seed % 2:
        x = np.round(x)                       # ties
    cap = 1.0 / (r * m)
    from riskopt._kernels.group_host import ooa_project, ooa_terms
    host = _updates._capped_simplex_host(x.copy(), cap)
    np.testing.assert_array_equal(host, _updates.capped_simplex(torch.as_tensor(x),
                                                                cap).numpy())
    assert host.sum() == pytest.approx(1.0, abs=1e-12)
    # the step's numba kernel: the same (projecting x itself: no ascent term)
    kernel = x.copy()
    ooa_project(kernel, np.zeros(0, dtype=np.int64), np.zeros(0), 0.0, cap)
    np.testing.assert_array_equal(kernel, host)
    # with the ascent step on some indices, against the NumPy statement of the step
    idx = rng.permutation(m)[:max(m // 2, 1)]
    L = rng.exponential(size=idx.size)
    want = x.copy()
    want[idx] += 0.3 * L
    kernel = x.copy()
    ooa_project(kernel, idx, L, 0.3, cap)
    np.testing.assert_array_equal(kernel, _updates._capped_simplex_host(want, cap))
    # the batch's CVaR terms and weights: the NumPy code's (summed by NumPy)
    w = np.empty(idx.size)
    terms = ooa_terms(L, min(cap, 1.0), host, idx, 2.5, w)
    top = np.sort(L)[::-1]
    j = np.arange(top.size, dtype=np.float64)
    c = min(cap, 1.0)
    assert float(terms.sum()) == float((np.clip(1.0 - j * c, 0.0, c) * top).sum())
    np.testing.assert_array_equal(w, host[idx] * 2.5)


# ------------------------------------------------------------------------ outer functions
def _numeric_moreau_grad(f, u, lam):
    res = minimize_scalar(lambda v: f(v) + (u - v) ** 2 / (2 * lam), method="bounded",
                          bounds=(u - 50.0, u + 50.0), options={"xatol": 1e-13})
    return (u - res.x) / lam


@pytest.mark.parametrize("make,f", [
    (lambda: Hinge(2.0, 0.3), lambda v: 2.0 * max(v - 0.3, 0.0)),
    (lambda: Hinge(0.5, -1.0), lambda v: 0.5 * max(v + 1.0, 0.0)),
    (lambda: AbsHinge(4.0, 0.2), lambda v: 4.0 * max(abs(v) - 0.2, 0.0)),
    (lambda: AbsHinge(1.0, 0.0), lambda v: max(abs(v), 0.0)),
])
def test_moreau_gradient_matches_numerical_minimisation(make, f):
    outer = make()
    rng = np.random.default_rng(0)
    for lam in (0.01, 0.1, 1.0):
        u = rng.normal(size=40) * rng.choice([0.05, 1.0, 5.0], size=40)
        got = outer.grad(torch.as_tensor(u), lam).numpy()
        want = [_numeric_moreau_grad(f, ui, lam) for ui in u]
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_group_cvar_gradient_and_value():
    outer = GroupCVaR(0.25)
    rng = np.random.default_rng(1)
    for lam in (0.01, 0.3):
        for s in (-0.5, 0.0, 1.2):
            u = s + rng.normal(size=30) * 0.2
            got = outer.grad(torch.as_tensor(u), lam, s=s).numpy()
            want = [_numeric_moreau_grad(lambda v: s + 4.0 * max(v - s, 0.0), ui, lam)
                    for ui in u]
            np.testing.assert_allclose(got, want, atol=1e-6)
    u = torch.tensor([0.1, 0.5, 2.0, 3.0])  # the mean over s's minimiser is the CVaR
    best = min(float(outer.value(u, s).mean()) for s in u)
    assert best == pytest.approx(3.0)  # r m = 1: the largest


@pytest.mark.parametrize("absolute", [False, True])
def test_squared_hinge_gradient_is_the_derivative(absolute):
    outer = SquaredHinge(5.0, 0.1, absolute=absolute)
    u = torch.as_tensor(np.random.default_rng(2).normal(size=50))
    h = 1e-6
    fd = (outer.value(u + h) - outer.value(u - h)) / (2 * h)
    np.testing.assert_allclose(outer.grad(u, 0.3).numpy(), fd.numpy(), atol=1e-6)
    np.testing.assert_allclose(outer.grad(u, 0.3).numpy(), outer.grad(u, 0.0).numpy())


def test_subgradients_at_lam_zero():
    u = torch.tensor([-0.5, 0.05, 0.5])
    assert Hinge(3.0, 0.1).grad(u, 0).tolist() == [0.0, 0.0, 3.0]
    assert AbsHinge(3.0, 0.1).grad(u, 0).tolist() == [-3.0, 0.0, 3.0]
    assert GroupCVaR(0.5).grad(u, 0, s=0.0).tolist() == [0.0, 2.0, 2.0]


# ------------------------------------------------------------------------ state, devices, errors
MAKERS = {
    "sonex-cvar-adam": lambda p: SONEX(p, M, GroupCVaR(0.5), lr=0.05, update="adam"),
    "sonx-hinge": lambda p: SONX(p, M, Hinge(2.0), lr=0.1, weight_decay=0.01),
    "alexr2-abshinge-adam": lambda p: ALEXR2(p, M, AbsHinge(3.0, 0.02), lr=0.05, inner_lr=0.1,
                                              nu=0.5, inner_steps=3, update="adam"),
    "alexr2-cvar": lambda p: ALEXR2(p, M, GroupCVaR(0.5), lr=0.3, inner_lr=0.1, nu=0.5,
                                    inner_steps=3),
}


@pytest.mark.parametrize("name", MAKERS)
def test_state_dict_round_trip_continues_identically(name):
    X, y, g = _problem()
    steps = _steps(g, 14, direct=True)
    offsets = 0.65 + 0.01 * np.arange(M)
    make = MAKERS[name]
    _, model, opt = _run(make, steps[:7], X, y, offsets)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf)
    model2 = torch.nn.Linear(D, 1).double()
    model2.load_state_dict(ck["model"])
    opt2 = make(model2.parameters())
    opt2.load_state_dict(ck["opt"])
    if isinstance(opt, ALEXR2):
        assert opt2.inner_position == opt.inner_position == 1
    a, _, _ = _run(make, steps[7:], X, y, offsets, model=model, opt=opt)
    b, _, _ = _run(make, steps[7:], X, y, offsets, model=model2, opt=opt2)
    for (th, s, u), (th2, s2, u2) in zip(a, b):
        np.testing.assert_array_equal(th, th2)
        np.testing.assert_array_equal(u, u2)
        assert s == s2


def test_ooa_state_dict_round_trip():
    model = torch.nn.Linear(D, 1).double()
    opt = OOA(model.parameters(), M, 0.5, lr=0.1, dual_lr=0.5)
    x = torch.randn(8, D, dtype=torch.float64)
    opt.surrogate([0, 3], torch.stack([model(x).mean() ** 2, model(x).sum().abs()])).backward()
    opt.step()
    other = OOA(torch.nn.Linear(D, 1).double().parameters(), M, 0.5, lr=0.1, dual_lr=0.5)
    other.load_state_dict(opt.state_dict())
    assert torch.equal(other.group_weights, opt.group_weights)
    with pytest.raises(ValueError, match="fcco"):
        SONEX(model.parameters(), M, Hinge(), lr=0.1).load_state_dict(opt.state_dict())


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_state_follows_params_device_and_dtype(device, dtype):
    model = torch.nn.Linear(D, 1).to(device=device, dtype=dtype)
    opt = ALEXR2(model.parameters(), M, GroupCVaR(0.5), lr=0.1, inner_lr=0.1, update="adam")
    x = torch.randn(16, D, device=device, dtype=dtype)

    def inner(f):
        return f(x)[:, 0].view(2, 8).pow(2).mean(1)
    for _ in range(4):
        g_now, g_prev = inner(model), opt.evaluate_previous(model, inner)
        assert not g_prev.requires_grad
        opt.zero_grad()
        opt.surrogate(torch.tensor([1, 4]), g_now, g_prev).backward()
        opt.step()
    u = opt.indexed_state("u")
    assert u.device.type == device and u.dtype == dtype
    assert opt.indexed_state("seen")[[1, 4]].all() and not opt.indexed_state("seen")[0]
    assert opt._s.device.type == device and opt._s.dtype == dtype
    for p in model.parameters():
        for v in opt.state[p].values():
            assert v.device.type == device and v.dtype == dtype
    sd = opt.state_dict()
    assert sd["indexed_state"]["u"].device.type == device and isinstance(opt.s, float)
    p = project_capped_simplex(torch.randn(5, device=device, dtype=dtype), 0.5)
    assert p.device.type == device and p.dtype == dtype


def _lin():
    return torch.nn.Linear(D, 1).parameters()


@pytest.mark.parametrize("make,match", [
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.0), "lr"),
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.1, beta=1.5), "beta"),
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.1, gamma=0.0), "gamma"),
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.1, gamma_prime=-0.1), "gamma_prime"),
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.1, smoothing=-1.0), "smoothing"),
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.1, update="sgd"), "update"),
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.1, weight_decay=-1.0), "weight_decay"),
    (lambda: SONEX(_lin(), M, Hinge(), lr=0.1, betas2=1.0), "betas2"),
    (lambda: SONEX(_lin(), 0, Hinge(), lr=0.1), "n_outer"),
    (lambda: SONEX(_lin(), M, "hinge", lr=0.1), "outer"),
    (lambda: SOX(_lin(), M, Hinge(), lr=0.1), "smooth"),
    (lambda: ALEXR2(_lin(), M, Hinge(), lr=0.1, inner_lr=0.0), "inner_lr"),
    (lambda: ALEXR2(_lin(), M, Hinge(), lr=0.1, inner_lr=0.1, nu=0.0), "nu"),
    (lambda: ALEXR2(_lin(), M, Hinge(), lr=0.1, inner_lr=0.1, inner_steps=0), "inner_steps"),
    (lambda: ALEXR2(_lin(), M, Hinge(), lr=0.1, inner_lr=0.1, theta=-1.0), "theta"),
    (lambda: OOA(_lin(), M, tail_fraction=0.0, lr=0.1, dual_lr=0.1), "tail_fraction"),
    (lambda: OOA(_lin(), M, tail_fraction=1.5, lr=0.1, dual_lr=0.1), "tail_fraction"),
    (lambda: OOA(_lin(), M, tail_fraction=0.5, lr=0.1, dual_lr=0.0), "dual_lr"),
    (lambda: Hinge(rho=0.0), "rho"),
    (lambda: Hinge(kappa=float("nan")), "kappa"),
    (lambda: AbsHinge(kappa=-0.1), "kappa"),
    (lambda: GroupCVaR(1.5), "r"),
    (lambda: Hinge().grad(torch.zeros(2), -1.0), "lam"),
    (lambda: project_capped_simplex(torch.zeros(4), 0.2), "empty"),
])
def test_bad_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_batches_raise():
    model = torch.nn.Linear(D, 1)
    opt = SONEX(model.parameters(), M, Hinge(), lr=0.1)
    g = model(torch.randn(3, D))[:, 0]
    with pytest.raises(RuntimeError, match="surrogate"):
        opt.step()
    with pytest.raises(ValueError, match="distinct"):
        opt.surrogate([1, 1, 2], g, g.detach())
    with pytest.raises(ValueError, match="range"):
        opt.surrogate([1, 2, M], g, g.detach())
    with pytest.raises(ValueError, match="one inner estimate"):
        opt.surrogate([1, 2], g, g.detach()[:2])
    with pytest.raises(ValueError, match="g_prev"):
        opt.surrogate([1, 2, 3], g)
    with pytest.raises(ValueError, match="non-finite"):
        opt.surrogate([1, 2, 3], g * float("nan"), g.detach())
    with pytest.raises(ValueError, match="direct"):
        opt.surrogate([1, 2, 3], g, g.detach(), direct=g)
    SONX(model.parameters(), M, Hinge(), lr=0.1).surrogate([1, 2, 3], g)  # no g_prev needed
    ooa = OOA(model.parameters(), M, 0.5, lr=0.1, dual_lr=0.1)
    with pytest.raises(ValueError, match="group_losses"):
        ooa.surrogate([0, 1], g)
    with pytest.raises(RuntimeError, match="surrogate"):
        ooa.step()


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")
def test_lr_schedulers_drive_the_outer_step():
    model = torch.nn.Linear(D, 1)
    opt = ALEXR2(model.parameters(), M, GroupCVaR(0.5), lr=0.1, inner_lr=0.2)
    assert len(opt.param_groups) == 2  # the model's and the CVaR threshold's
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
    sched.step()
    assert [grp["lr"] for grp in opt.param_groups] == pytest.approx([0.01, 0.01])
    assert [grp["inner_lr"] for grp in opt.param_groups] == [0.2, 0.2]


# ------------------------------------------------------------------------ convergence (cvxpy)
def _group_dro(seed=0, n=1600, m=8, d=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    g = np.arange(n) % m
    y = (X[:, 0] + 0.3 * g * rng.normal(size=n) > 0).astype(float)
    return X, y, g


def _cvar_objective(theta, X, y, g, m, r, mu):
    z = X @ theta[:-1] + theta[-1]
    losses = np.logaddexp(0.0, z) - y * z
    L = np.array([losses[g == k].mean() for k in range(m)])
    return min(s + np.maximum(L - s, 0).sum() / (m * r) for s in L) + mu / 2 * theta @ theta


def _cvxpy_optimum(X, y, g, m, r, mu):
    cp = pytest.importorskip("cvxpy")
    d = X.shape[1]
    w, b, s = cp.Variable(d), cp.Variable(), cp.Variable()
    z = X @ w + b
    L = [cp.sum(cp.logistic(z[g == k]) - cp.multiply(y[g == k], z[g == k])) / (g == k).sum()
         for k in range(m)]
    obj = (s + cp.sum(cp.hstack([cp.pos(Lk - s) for Lk in L])) / (m * r)
           + mu / 2 * (cp.sum_squares(w) + cp.square(b)))
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(solver="CLARABEL")
    theta = np.r_[w.value, b.value]
    assert _cvar_objective(theta, X, y, g, m, r, mu) == pytest.approx(prob.value, rel=1e-6)
    return prob.value


def _train(make, X, y, g, m, T, b1=4, b2=16, seed=0, dual=False):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = torch.nn.Linear(X.shape[1], 1).double()
    opt = make(model.parameters())
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [T // 2, 3 * T // 4], 0.1)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    rows_of = [np.flatnonzero(g == k) for k in range(m)]
    for _ in range(T):
        ids = rng.choice(m, b1, replace=False)
        rows = np.concatenate([rng.choice(rows_of[i], b2) for i in ids])

        def inner(f):
            return F.binary_cross_entropy_with_logits(
                f(Xt[rows])[:, 0], yt[rows], reduction="none").view(b1, b2).mean(1)
        opt.zero_grad()
        if dual:
            opt.surrogate(ids, inner(model)).backward()
        else:
            opt.surrogate(ids, inner(model), opt.evaluate_previous(model, inner)).backward()
        opt.step()
        sched.step()
    return np.r_[model.weight.detach().numpy().ravel(), model.bias.detach().numpy()]


M_DRO, R_DRO, MU = 8, 0.25, 0.01
SOLVERS = {
    "sonex": lambda p: SONEX(p, M_DRO, GroupCVaR(R_DRO), lr=0.1, gamma=0.1, gamma_prime=0.02,
                             smoothing=1e-3, weight_decay=MU),
    "alexr2": lambda p: ALEXR2(p, M_DRO, GroupCVaR(R_DRO), lr=0.5, inner_lr=0.1, nu=0.5,
                               gamma=0.1, theta=0.2, smoothing=1e-3, weight_decay=MU),
    "sonex-adam": lambda p: SONEX(p, M_DRO, GroupCVaR(R_DRO), lr=0.02, gamma=0.1,
                                  gamma_prime=0.02, smoothing=1e-3, update="adam",
                                  weight_decay=MU),
    "sonx": lambda p: SONX(p, M_DRO, GroupCVaR(R_DRO), lr=0.1, gamma=0.1, weight_decay=MU),
    "ooa": lambda p: OOA(p, M_DRO, R_DRO, lr=0.1, dual_lr=0.01, weight_decay=MU),
}


@pytest.mark.parametrize("name", ["sonex", "alexr2"])
def test_group_dro_reaches_the_cvxpy_optimum(name):
    X, y, g = _group_dro()
    f_star = _cvxpy_optimum(X, y, g, M_DRO, R_DRO, MU)
    theta = _train(SOLVERS[name], X, y, g, M_DRO, T=1000)
    assert (_cvar_objective(theta, X, y, g, M_DRO, R_DRO, MU) - f_star) / f_star < 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", list(SOLVERS))
def test_group_dro_reaches_the_cvxpy_optimum_seeds(name, seed):
    X, y, g = _group_dro(seed=seed)
    f_star = _cvxpy_optimum(X, y, g, M_DRO, R_DRO, MU)
    theta = _train(SOLVERS[name], X, y, g, M_DRO, T=3000, seed=seed, dual=name == "ooa")
    assert (_cvar_objective(theta, X, y, g, M_DRO, R_DRO, MU) - f_star) / f_star < 1e-2


@pytest.mark.parametrize("cls,outer", [(SONX, Hinge(2.0, 0.3)), (SOX, SquaredHinge(2.0))])
def test_sonx_and_sox_keep_the_previous_iterate_only_when_asked(cls, outer):
    """SONX / SOX do not use the previous iterate: it is copied at each step only once
    previous_params (or evaluate_previous) asked for it before the first step; then it is
    the parameters before the last step, the flag survives a checkpoint, and a first request
    after steps without it raises instead of returning a stale iterate."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, D, generator=g, dtype=torch.float64)

    def run(opt, model, steps):
        for _ in range(steps):
            before = [p.detach().clone() for p in model.parameters()]
            g_now = torch.stack([model(X[k::2]).mean() for k in range(2)])
            opt.zero_grad()
            opt.surrogate(torch.arange(2), g_now).backward()
            opt.step()
        return before

    model = torch.nn.Linear(D, 1).double()
    lazy = cls(model.parameters(), 2, outer, lr=0.1)
    run(lazy, model, 3)
    with pytest.raises(RuntimeError, match="previous iterate"):
        lazy.previous_params(model)
    model = torch.nn.Linear(D, 1).double()
    kept = cls(model.parameters(), 2, outer, lr=0.1)
    first = kept.previous_params(model)
    assert all(torch.equal(first[n], p) for n, p in model.named_parameters())
    before = run(kept, model, 3)
    prev = kept.previous_params(model)
    assert all(torch.equal(prev[n], b) for (n, _), b in zip(model.named_parameters(), before))
    other = cls(model.parameters(), 2, outer, lr=0.1)
    buf = io.BytesIO()
    torch.save(kept.state_dict(), buf)
    buf.seek(0)
    other.load_state_dict(torch.load(buf, weights_only=True))
    before = run(other, model, 1)
    prev = other.previous_params(model)
    assert all(torch.equal(prev[n], b) for (n, _), b in zip(model.named_parameters(), before))


@pytest.mark.parametrize("make", [
    lambda ps: SONX(ps, 5, Hinge(), lr=0.1),
    lambda ps: OOA(ps, 5, tail_fraction=0.5, lr=0.1, dual_lr=0.1)])
def test_group_indices_are_checked_on_every_path(make):
    """The group indices of a step: a few as an int64 CPU tensor take the one-pass check,
    anything else the general one; both accept the same batches and reject duplicates,
    out-of-range and empty ones with a clear error."""
    opt = make(torch.nn.Linear(D, 1).double().parameters())
    big = torch.arange(70) % 5         # (more than the one-pass check takes)
    for ok in (torch.tensor([4, 0, 2]), [4, 0, 2], np.array([4, 0, 2]),
               torch.tensor([4, 0, 2], dtype=torch.int32)):
        assert opt._distinct_indices(ok, "bad").tolist() == [4, 0, 2]
    for bad in (torch.tensor([1, 1]), torch.tensor([0, 5]), torch.tensor([-1, 2]),
                torch.tensor([], dtype=torch.int64), [3, 3], big):
        with pytest.raises(ValueError):
            opt._distinct_indices(bad, "bad")
