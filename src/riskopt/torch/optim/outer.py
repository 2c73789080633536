r"""The non-smooth outer functions ``f_i`` of the FCCO problem solved by the optimizers of
:mod:`riskopt.torch.optim.fcco` (SONEX, SONX, SOX, ALEXR2; re-exported there and by
:mod:`riskopt.torch.optim`).

Each is a small object with ``value(u)`` and ``grad(u, lam)``, the gradient of its Moreau
envelope :math:`f_\lambda(u) = \min_v f(v) + (u - v)^2 / (2\lambda)` (``lam = 0``: a
subgradient): :class:`Hinge`, :class:`AbsHinge`, :class:`SquaredHinge` (smooth: the outer
function of SOX) and :class:`GroupCVaR` (whose threshold ``s`` the optimizer keeps). The table
of their formulas is in :mod:`riskopt.torch.optim.fcco`.

Each also has ``grad_value_numpy(u, lam, s=None)``: the same gradient and value on a NumPy
array, the same elementwise IEEE operations in the same order (the same numbers as the torch
code, ``torch.sign``'s 0 at NaN included). The optimizers use it eagerly on the CPU, where a
NumPy call on a few groups costs less than a tensor op's dispatch; the built-in classes
themselves (their exact classes, see ``kernel_code``) run there as one numba call with the
table update (:mod:`riskopt._kernels.group_host`, the same operations). An outer function
without it (``grad_value_numpy = None``, the default of any object with ``grad`` / ``value``)
runs its torch code there too.

Paper: "Non-smooth finite-sum coupled compositional optimization"
(``../shared/papers/sonex_alexr2_nonsmooth_fcco.txt``, Sections 4-6).
"""
import math
import numbers

import numpy
import torch

from ..._validation import check_positive

__all__ = ["Hinge", "AbsHinge", "SquaredHinge", "GroupCVaR"]


def _real(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    return float(value)


def _lam(lam):
    if torch.compiler.is_compiling():   # (checked eagerly: the optimizers' smoothing)
        return lam
    return check_positive("lam", lam, allow_zero=True)


def _clip_grad(t, lam, rho):
    """Gradient of the Moreau envelope of ``rho [t]_+``: ``clip(t / lam, 0, rho)``
    (``lam = 0``: the subgradient ``rho 1[t > 0]``)."""
    if lam > 0:
        return torch.clamp(t / lam, min=0.0, max=rho)
    return torch.where(t > 0, torch.full_like(t, rho), torch.zeros_like(t))


def _lam_host(lam):
    """:func:`_lam` for the NumPy code (never traced): a finite float >= 0 passes at once."""
    if type(lam) is float and 0.0 <= lam < math.inf:
        return lam
    return check_positive("lam", lam, allow_zero=True)


def _np_sign(x):
    """``torch.sign`` in NumPy: 0 at NaN (``numpy.sign`` gives NaN), in ``x``'s dtype."""
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _np_clip_grad(t, lam, rho):
    """:func:`_clip_grad` in NumPy (in ``t``'s dtype)."""
    dt = t.dtype.type
    if lam > 0:
        return numpy.minimum(numpy.maximum(t / lam, dt(0.0)), dt(rho))
    return numpy.where(t > 0, dt(rho), dt(0.0))


def kernel_code(outer):
    """``(kind, rho, kappa, half_rho, r)`` of a built-in outer function (its exact class) for
    :func:`riskopt._kernels.group_host.track_outer` (as Python floats; the caller rounds them
    to the table's dtype, as ``grad_value_numpy`` does); None for any other object (a
    subclass included: its own code runs)."""
    cls = type(outer)
    if cls is Hinge or cls is AbsHinge:
        return int(cls is AbsHinge), outer.rho, outer.kappa, 0.0, 1.0
    if cls is SquaredHinge:
        return 2 + outer.absolute, outer.rho, outer.kappa, 0.5 * outer.rho, 1.0
    if cls is GroupCVaR:
        return 4, 1.0 / outer.r, 0.0, 0.0, outer.r
    return None


class _Outer:
    smooth = False
    has_threshold = False
    #: ``grad_value_numpy(u, lam, s=None) -> (grad, value)`` on a float array ``u`` (``s``:
    #: a 0-d array or None); None: the torch code runs (see the module docstring)
    grad_value_numpy = None

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Hinge(_Outer):
    r"""The hinge :math:`f(u) = \rho[u - \kappa]_+` (a penalty of :math:`u \le \kappa`).

    ``grad(u, lam)`` is the gradient of its Moreau envelope,
    :math:`\mathrm{clip}((u - \kappa)/\lambda, 0, \rho)` (paper Eq. (2), the "smoothed hinge"),
    and for ``lam = 0`` the subgradient :math:`\rho\,1[u > \kappa]` (SONX).

    >>> import torch
    >>> Hinge(rho=2.0).grad(torch.tensor([-1.0, 0.005, 1.0]), 0.01)
    tensor([0.0000, 0.5000, 2.0000])
    """

    def __init__(self, rho=1.0, kappa=0.0):
        self.rho = check_positive("rho", rho)
        self.kappa = _real("kappa", kappa)

    def value(self, u):
        return self.rho * torch.clamp(torch.as_tensor(u) - self.kappa, min=0.0)

    def grad(self, u, lam):
        return _clip_grad(torch.as_tensor(u) - self.kappa, _lam(lam), self.rho)

    def grad_value_numpy(self, u, lam, s=None):
        """``(grad(u, lam), value(u))`` on a float array ``u``, in NumPy: the same IEEE
        operations as the torch code (the same numbers; the optimizers' CPU path)."""
        lam = _lam_host(lam)
        with numpy.errstate(all="ignore"):
            t = u - self.kappa
            return _np_clip_grad(t, lam, self.rho), self.rho * numpy.maximum(t, t.dtype.type(0))


class AbsHinge(_Outer):
    r"""The two-sided hinge :math:`f(u) = \rho[|u| - \kappa]_+`, ``kappa >= 0`` (a penalty of
    :math:`|u| \le \kappa`: the ROC-fairness constraints of the paper's App. F.2).

    Moreau-envelope gradient
    :math:`\mathrm{sign}(u)\,\mathrm{clip}((|u| - \kappa)/\lambda, 0, \rho)`; ``lam = 0``: the
    subgradient :math:`\rho\,\mathrm{sign}(u)\,1[|u| > \kappa]`.

    >>> import torch
    >>> AbsHinge(rho=4.0, kappa=0.1).grad(torch.tensor([-0.3, 0.05, 0.12]), 0.01)
    tensor([-4.0000,  0.0000,  2.0000])
    """

    def __init__(self, rho=1.0, kappa=0.0):
        self.rho = check_positive("rho", rho)
        self.kappa = check_positive("kappa", kappa, allow_zero=True)

    def value(self, u):
        return self.rho * torch.clamp(torch.as_tensor(u).abs() - self.kappa, min=0.0)

    def grad(self, u, lam):
        u = torch.as_tensor(u)
        return torch.sign(u) * _clip_grad(u.abs() - self.kappa, _lam(lam), self.rho)

    def grad_value_numpy(self, u, lam, s=None):
        """``(grad(u, lam), value(u))`` on a float array ``u``, in NumPy: the same IEEE
        operations as the torch code (the same numbers; the optimizers' CPU path)."""
        lam = _lam_host(lam)
        with numpy.errstate(all="ignore"):
            t = numpy.abs(u) - self.kappa
            return (_np_sign(u) * _np_clip_grad(t, lam, self.rho),
                    self.rho * numpy.maximum(t, t.dtype.type(0)))


class SquaredHinge(_Outer):
    r"""The squared hinge :math:`f(u) = \frac\rho2[u - \kappa]_+^2` (``absolute=True``:
    :math:`\frac\rho2[|u| - \kappa]_+^2`), a smooth penalty: ``grad(u, lam)`` is its gradient
    :math:`\rho[u - \kappa]_+` (times :math:`\mathrm{sign}(u)`), ``lam`` is ignored.

    >>> import torch
    >>> SquaredHinge(rho=10.0).grad(torch.tensor([-1.0, 0.5]), 0.01)
    tensor([0., 5.])
    """

    smooth = True

    def __init__(self, rho=1.0, kappa=0.0, absolute=False):
        self.rho = check_positive("rho", rho)
        self.kappa = _real("kappa", kappa)
        if absolute and self.kappa < 0:
            raise ValueError(f"kappa must be >= 0 with absolute=True, got {kappa}")
        self.absolute = bool(absolute)

    def value(self, u):
        u = torch.as_tensor(u)
        a = u.abs() if self.absolute else u
        return 0.5 * self.rho * torch.clamp(a - self.kappa, min=0.0) ** 2

    def grad(self, u, lam=0.0):
        u = torch.as_tensor(u)
        _lam(lam)
        if self.absolute:
            return self.rho * torch.sign(u) * torch.clamp(u.abs() - self.kappa, min=0.0)
        return self.rho * torch.clamp(u - self.kappa, min=0.0)

    def grad_value_numpy(self, u, lam=0.0, s=None):
        """``(grad(u, lam), value(u))`` on a float array ``u``, in NumPy: the same IEEE
        operations as the torch code (the same numbers; the optimizers' CPU path)."""
        _lam_host(lam)
        with numpy.errstate(all="ignore"):
            t = numpy.maximum((numpy.abs(u) if self.absolute else u) - self.kappa,
                              u.dtype.type(0))
            g = self.rho * _np_sign(u) * t if self.absolute else self.rho * t
            return g, 0.5 * self.rho * t ** 2


class GroupCVaR(_Outer):
    r"""The CVaR form :math:`f(u, s) = s + \frac1r[u - s]_+`, ``0 < r <= 1``: the mean over the
    ``m`` groups, minimised over the threshold ``s``, is the CVaR at level ``r`` of the group
    losses (the mean of the ``r m`` largest; paper Eq. (10)).

    ``grad(u, lam, s)`` is the ``u``-derivative :math:`h_\lambda'(u - s)` of the smoothed form,
    :math:`h = \frac1r[\cdot]_+` with Moreau parameter ``lam``:
    :math:`\mathrm{clip}((u - s)/\lambda, 0, 1/r)`; the optimizers keep ``s`` and update it with
    :math:`1 - \mathrm{mean}_{g} h_\lambda'(u_g - s)`.

    >>> import torch
    >>> GroupCVaR(0.25).grad(torch.tensor([0.0, 0.75, 2.0]), 0.25, s=0.5)
    tensor([0., 1., 4.])
    """

    has_threshold = True

    def __init__(self, r):
        self.r = check_positive("r", r)
        if self.r > 1:
            raise ValueError(f"r (the tail fraction) must be in (0, 1], got {r}")

    def value(self, u, s=0.0):
        return s + torch.clamp(torch.as_tensor(u) - s, min=0.0) / self.r

    def grad(self, u, lam, s=0.0):
        return _clip_grad(torch.as_tensor(u) - s, _lam(lam), 1.0 / self.r)

    def grad_value_numpy(self, u, lam, s=None):
        """``(grad(u, lam, s), value(u, s))`` on a float array ``u`` (``s`` a 0-d array;
        None: 0), in NumPy: the same IEEE operations as the torch code (the same numbers;
        the optimizers' CPU path)."""
        lam = _lam_host(lam)
        s = u.dtype.type(0.0) if s is None else s
        with numpy.errstate(all="ignore"):
            t = u - s
            return _np_clip_grad(t, lam, 1.0 / self.r), s + numpy.maximum(
                t, u.dtype.type(0)) / self.r
