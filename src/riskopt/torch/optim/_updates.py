r"""The tensor updates of the optimizers of :mod:`riskopt.torch.optim`: pure functions of
tensors (and of the hyperparameters as Python numbers), with tensor-only control flow and no
host read, so that ``torch.compile(fullgraph=True)`` traces each of them whole
(:meth:`~riskopt.torch.optim.IndexedStateOptimizer.compile`; the optimizers call them
eagerly otherwise: one code path, the same numbers).

They live in two modules by optimizer family: :mod:`riskopt.torch.optim._updates_kl`
(SCDRO, ASCDRO / STORM, PG-SMD2 and its KL-ball projection) and
:mod:`riskopt.torch.optim._updates_fcco` (SONEX / SONX / SOX's tracked inner values,
ALEXR2, OOA). This module holds what both use: the switch :data:`HOST` and the test
:func:`_host` of the eager CPU paths (a test sets ``_updates.HOST = False`` here to force
the tensor code everywhere), and the fused momentum.

What stays outside (in the optimizers' ``surrogate`` / ``step``): the index checks, the step
counters and schedules (Python numbers passed in), the finiteness check of the input, the
data-parallel gathers and the divergence guard at its cadence
(:mod:`riskopt.torch.optim._guard`). A branch that used to read a tensor on the host is a
``torch.where`` (ASCDRO's restart) or a ``while_loop`` (the KL-ball projection of
PG-SMD2, the same iterations as the former host loop). SCDRO's and ASCDRO's batch
statistics and scalar steps have NumPy / Python-float twins (``*_host``) for the eager CPU
path (the optimizers choose them by device). Two updates on tables of a few
entries take a host path when eager on the CPU (where each small tensor op costs more in
dispatch than in arithmetic): PG-SMD2's KL-ball Newton steps with Python scalars, and OOA's
group step and capped-simplex projection in NumPy (the same operations: bit for bit the
tensor code's numbers; ``HOST = False`` switches the latter off). Not part of the public
API.
"""
import torch

__all__ = []


def _foreach_momentum(vs, grads, beta):
    """``v <- (1 - beta) v + beta g`` for lists (one fused call per op)."""
    torch._foreach_mul_(vs, 1.0 - beta)
    torch._foreach_add_(vs, grads, alpha=beta)


#: False: the tensor code everywhere (as under compile and on GPUs; for tests and the
#: side-by-side timing of ``benchmarks/torch_ddp_comm.py --tensor-code``)
HOST = True


def _host(*tensors):
    """Whether the update may run in NumPy on these tensors' memory: all on the CPU, not
    under ``torch.compile`` (which traces the tensor code); a handful of NumPy calls on a
    table of a few groups cost less than the dispatch of as many tensor ops."""
    return HOST and not torch.compiler.is_compiling() and all(t.device.type == "cpu"
                                                               for t in tensors)

