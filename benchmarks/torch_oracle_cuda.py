"""CUDA exactness check (``DEV=cuda python benchmarks/torch_oracle_cuda.py OUT.json``) (issue 28): the torch oracle on the GPU (float64 and float32) against
the numba reference oracle on the CPU, weights q = d risk / d losses, random and tied losses,
batched rows; run under set_sync_debug_mode("error") (no host sync in the forward/backward)."""
import json, sys, time
import numpy as np
import torch
import riskopt as ro
import riskopt.torch as rt

import os
dev = torch.device(os.environ.get("DEV", "cuda"))
sdm = torch.cuda.set_sync_debug_mode if dev.type == "cuda" else (lambda m: None)
risks = {
    "CVaR(0.1)": ro.CVaR(0.1), "ESRM(1)": ro.ESRM(1.0), "Extremile(2)": ro.Extremile(2.0),
    "CVaR(0.1, chi2 1)": ro.CVaR(0.1, shift_cost=1.0),
    "ESRM(1, chi2 1)": ro.ESRM(1.0, shift_cost=1.0),
    "Extremile(2, chi2 1)": ro.Extremile(2.0, shift_cost=1.0),
    "CVaR(0.1, KL 0.1)": ro.CVaR(0.1, shift_cost=0.1, divergence="kl"),
    "ESRM(1, KL 0.1)": ro.ESRM(1.0, shift_cost=0.1, divergence="kl"),
    "Extremile(2, KL 0.1)": ro.Extremile(2.0, shift_cost=0.1, divergence="kl"),
}
rng = np.random.default_rng(0)
rows, worst = [], {}
for name, risk in risks.items():
    for kind in ("continuous", "tied"):
        for b in (7, 256, 8192):
            for shape in ((b,), (3, b)):
                x = rng.normal(size=shape)
                if kind == "tied":
                    x = np.round(x, 1)
                ref_l = torch.tensor(x, dtype=torch.float64, requires_grad=True)
                ref = rt.SpectralRiskLoss(risk, oracle="numba", reduction="none")(ref_l)
                ref.sum().backward()
                for dt in (torch.float64, torch.float32):
                    l = torch.tensor(x, dtype=dt, device=dev, requires_grad=True)
                    sdm("error")
                    try:
                        val = rt.SpectralRiskLoss(risk, oracle="torch", reduction="none")(l)
                        val.sum().backward()
                        err = None
                    except RuntimeError as e:
                        err = str(e).splitlines()[0][:200]
                    finally:
                        sdm(0)
                    if err:
                        rows.append({"risk": name, "kind": kind, "shape": list(shape), "dtype": str(dt), "error": err})
                        continue
                    dq = float((l.grad.double().cpu() - ref_l.grad).abs().max())
                    dv = float((val.detach().double().cpu() - ref.detach()).abs().max())
                    key = (name, str(dt))
                    worst[key] = max(worst.get(key, 0.0), dq, dv)
                    rows.append({"risk": name, "kind": kind, "shape": list(shape), "dtype": str(dt),
                                 "max_abs_dq": dq, "max_abs_dvalue": dv})
out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
       "worst": {f"{k[0]} {k[1]}": v for k, v in worst.items()},
       "errors": [r for r in rows if "error" in r], "rows": rows}
print(json.dumps({k: out[k] for k in ("device", "torch", "worst", "errors")}, indent=1))
json.dump(out, open(sys.argv[1], "w"), indent=1)
