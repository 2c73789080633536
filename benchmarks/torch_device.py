"""Per-step time of a training step with each riskopt.torch loss vs ``losses.mean()`` on a
ResNet-18-sized convolutional network, batch 256 of synthetic 32x32 images (issue 28).

On CUDA (when available) the loss steps run under ``torch.cuda.set_sync_debug_mode("error")``:
any device -> host synchronisation in the step (``.item()``, ``.cpu()``, a boolean mask's
shape) raises, which proves the oracles stay on the device. Without CUDA it runs on the CPU
(``--threads``, default 1; a smaller ``--width`` keeps it short on a small machine).

    python benchmarks/torch_device.py                   # CUDA if available, else CPU
    python benchmarks/torch_device.py --device cpu --steps 3 --width 16 --batch 64
    python benchmarks/torch_device.py --short --device cpu --out /tmp/td   # smoke run (test)

Results: ``benchmarks/results/torch_device/<device>.json`` / ``.md`` (per-step medians and
the ratio to the mean loss, measured in turn in one process).
"""
import argparse
import json
import os
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=64, help="channels of the first stage "
                   "(64 = ResNet-18)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=os.path.join(HERE, "results", "torch_device"))
    p.add_argument("--short", action="store_true", help="smoke run: width 4, batch 32, "
                   "1 warm-up and 2 timed steps (tests/test_bench_torch_device.py)")
    a = p.parse_args(argv)
    if a.short:
        a.width, a.batch, a.steps, a.warmup = 4, 32, 2, 1
    return a


def _resnet18(torch, width, n_classes=10):
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.sc = (nn.Sequential() if stride == 1 and cin == cout else
                       nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                     nn.BatchNorm2d(cout)))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.sc(x))

    w = width
    layers = [nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
    cin = w
    for i, cout in enumerate([w, 2 * w, 4 * w, 8 * w]):
        layers += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, n_classes)]
    return nn.Sequential(*layers)


def _losses(ro, rt, batch):
    table = rt.TableSpectralRiskLoss(ro.CVaR(0.1, shift_cost=0.5), 4 * batch, oracle="torch")
    table.init_table(_table_init(batch))
    return {
        "mean": None,
        "SpectralRiskLoss(CVaR(0.1))": rt.SpectralRiskLoss(ro.CVaR(0.1), oracle="torch"),
        "SpectralRiskLoss(ESRM(1, shift_cost=1))":
            rt.SpectralRiskLoss(ro.ESRM(1.0, shift_cost=1.0), oracle="torch"),
        "KLDROLoss(radius=0.5)": rt.KLDROLoss(radius=0.5, oracle="torch"),
        "GroupDROLoss(4)": rt.GroupDROLoss(4),
        "GroupDROLoss(4, cvar)": rt.GroupDROLoss(4, mode="cvar"),
        "KLDROLoss(shift_cost=1)": rt.KLDROLoss(shift_cost=1.0, oracle="torch"),
        "TableSpectralRiskLoss(CVaR(0.1, shift_cost=0.5), n=4b)": table,
        "PAUCLoss(cvar)": rt.PAUCLoss("cvar", tail_fraction=0.1),
    }


def _table_init(batch):
    """Initial table losses (cross-entropy of 10 classes at start: ~log 10)."""
    import torch
    return torch.log(torch.tensor(10.0)) + 0.1 * torch.rand(4 * batch,
                                                             generator=torch.Generator()
                                                             .manual_seed(1))


def main(argv=None):
    a = _args(argv)
    import torch
    import torch.nn.functional as F

    import riskopt as ro
    import riskopt.torch as rt
    from riskopt.bench._io import atomic_write_text
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cpu":
        torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(a.batch, 3, 32, 32, generator=g).to(dev)
    y = torch.randint(0, 10, (a.batch,), generator=g).to(dev)
    groups = (y % 4)
    model = _resnet18(torch, a.width).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    crits = _losses(ro, rt, a.batch)
    for crit in crits.values():  # buffers (online group weights) and the table on the device
        if isinstance(crit, rt.TableSpectralRiskLoss):
            crit.move_table(dev)
        elif crit is not None:
            crit.to(dev)
    idx = torch.arange(a.batch, device=dev)
    it = [0]

    def step(crit):
        out = model(X)
        if crit is None:
            loss = F.cross_entropy(out, y)
        elif isinstance(crit, rt.GroupDROLoss):
            loss = crit(F.cross_entropy(out, y, reduction="none"), groups)
        elif isinstance(crit, rt.TableSpectralRiskLoss):  # a quarter of the table per step
            it[0] += 1
            loss = crit(F.cross_entropy(out, y, reduction="none"),
                        idx + (it[0] % 4) * a.batch)
        elif isinstance(crit, rt.PAUCLoss):
            loss = crit(torch.sigmoid(out[:, 0]), (y < 5).long())
        else:
            loss = crit(F.cross_entropy(out, y, reduction="none"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for crit in crits.values():  # warm up (allocator, cudnn autotune, caches)
        for _ in range(a.warmup):
            step(crit)
    sync()
    times = {k: [] for k in crits}
    host_sync = {}  # loss -> the error set_sync_debug_mode("error") raised in its step
    for _ in range(a.steps):  # interleaved: each loss in turn
        for name, crit in crits.items():
            sync()
            t0 = time.perf_counter()
            if dev.type == "cuda" and crit is not None and name not in host_sync:
                torch.cuda.set_sync_debug_mode("error")
                try:
                    step(crit)
                except RuntimeError as e:  # a host sync in the step: say where, time it anyway
                    host_sync[name] = str(e).splitlines()[0][:300]
                    print(f"{name}: host synchronisation in the step: {host_sync[name]}",
                          flush=True)
                finally:
                    torch.cuda.set_sync_debug_mode(0)
                if name in host_sync:
                    sync()
                    t0 = time.perf_counter()
                    step(crit)
            else:
                step(crit)
            sync()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    res = {"device": str(dev), "name": (torch.cuda.get_device_name(dev) if dev.type == "cuda"
                                        else "cpu"),
           "batch": a.batch, "width": a.width, "steps": a.steps,
           "threads": a.threads if dev.type == "cpu" else None,
           "short": a.short, "sync_debug_mode_error": dev.type == "cuda",
           "host_sync": host_sync, "torch": torch.__version__,
           "ms_per_step": {k: round(v, 3) for k, v in med.items()},
           "ratio_to_mean": {k: round(v / med["mean"], 3) for k, v in med.items()}}
    print(json.dumps(res, indent=1))
    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, dev.type)
    atomic_write_text(base + ".json", json.dumps(res, indent=1) + "\n")
    lines = [f"# Training step with each loss, ResNet-18-sized (width {a.width}), batch "
             f"{a.batch}, {res['name']}", "",
             "Medians over interleaved steps in one process"
             + ("; loss steps under set_sync_debug_mode('error') (no host sync)."
                if dev.type == "cuda" else "; CPU, shared loaded machine."), "",
             "| loss | ms / step | ratio to mean |", "|---|---|---|"]
    for k in med:
        flag = " (host sync)" if k in host_sync else ""
        lines.append(f"| {k}{flag} | {med[k]:.2f} | {med[k] / med['mean']:.2f} |")
    atomic_write_text(base + ".md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
