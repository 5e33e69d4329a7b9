#!/usr/bin/env python
"""DeMo's optimizer step on one device: ours against torch's AdamW and, optionally, another DeMo.

Self-contained (torch and this repository's ``src``; no Snakemake, no data set): for each model
size, random gradients are set once (seeded), and each optimizer's ``step()`` is timed with the
gradients restored before every step (outside the timed region), interleaved (each round times
every optimizer once, in turn), 2 warm-up rounds, then the median of 8.  On CUDA every step is
bracketed by ``torch.cuda.synchronize()``.

Rows: ``ours`` (the default choice of inverse transform), ``ours, dense inverse`` (the inverse
DCT as two dense products on every tile group), ``ours, compact`` (12-bit indices, bf16 values),
``adamw fused`` (torch's fused AdamW) and, when ``DISTLAB_REFERENCE_DEMO`` names a ``demo.py``
defining a ``DeMo`` optimizer with the reference's arguments (``compression_decay``,
``compression_topk``, ``compression_chunk``, ``lr``), ``reference``.  With the reference, one step
from the same parameters and gradients is also compared: the elements where the two optimizers'
parameters differ are counted, and each is explained, from a float64 recomputation of its tile,
as a top-k tie (the k-th and (k+1)-th largest |c| of its tile within 1e-6 of each other, relative:
which of them is kept depends on rounding) or a sign of a near-zero update (|u| below 1e-6 of the
tile's largest), else counted as unexplained.

Run from the repository root (a world-size-1 process group is made when one is needed):

    python scripts/gpu/demo_bench.py                      # 0.12 M, 85 M, 1.07 B on CUDA
    python scripts/gpu/demo_bench.py --sizes 0.12M --device cpu
    DISTLAB_REFERENCE_DEMO=/path/to/demo.py python scripts/gpu/demo_bench.py

Writes ``demo_bench_gpu.json`` and ``demo_bench_gpu.csv`` into ``$OUT`` (or ``--out``).  Every
number in them is measured on the machine it ran on (its name is in the JSON).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from distlab.demo.olmo import OLMo  # noqa: E402
from distlab.models import build_model  # noqa: E402
from distlab.techniques.demo import DeMo  # noqa: E402
from distlab.techniques.demo import optim as optim_mod  # noqa: E402
from distlab.techniques.demo.transforms import clamp_topk, dct2, dct_matrix, idct2, matrix_shape, tile_shape  # noqa: E402

SIZES = {
    "0.12M": ("gpt, 2 x 64", lambda: build_model("gpt", vocab_size=256, n_layer=2, d_model=64, n_head=2, block_size=64)),
    "85M": ("gpt, 12 x 768", lambda: build_model("gpt", vocab_size=256, n_layer=12, d_model=768, n_head=12,
                                                 block_size=64)),
    "269M": ("olmo, 16 x 1024, mlp 8", lambda: OLMo(vocab_size=256, n_layer=16, d_model=1024, n_head=16,
                                                    mlp_ratio=8, block_size=64)),
    "1.07B": ("olmo, 16 x 2048, mlp 8", lambda: OLMo(vocab_size=256, n_layer=16, d_model=2048, n_head=16,
                                                     mlp_ratio=8, block_size=64)),
}
LR, TOPK, CHUNK, DECAY = 1e-3, 32, 64, 0.999


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reference_class():
    path = os.environ.get("DISTLAB_REFERENCE_DEMO")
    if not path:
        return None
    if not Path(path).is_file():
        raise SystemExit(f"demo_bench: DISTLAB_REFERENCE_DEMO={path} is not a file")
    spec = importlib.util.spec_from_file_location("reference_demo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.DeMo


def _process_group(device: torch.device) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)


def _model(size: str, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.device(device):
        return SIZES[size][1]().float()


def _set_grads(params: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    g = torch.Generator(device=params[0].device).manual_seed(seed)
    grads = [torch.randn(p.shape, generator=g, device=p.device, dtype=p.dtype) for p in params]
    for p, x in zip(params, grads):
        p.grad = x.clone()
    return grads


def _dense(tg, entries) -> bool:
    return False


def _time(size: str, device: torch.device, ref_cls, steps: int, warmup: int) -> list[dict]:
    model = _model(size, device)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = _set_grads(params, 1)
    opts = {"ours": DeMo(params, lr=LR, compression_decay=DECAY, compression_topk=TOPK, compression_chunk=CHUNK),
            "ours, dense inverse": DeMo(params, lr=LR, compression_decay=DECAY, compression_topk=TOPK,
                                        compression_chunk=CHUNK),
            "ours, compact": DeMo(params, lr=LR, compression_decay=DECAY, compression_topk=TOPK,
                                  compression_chunk=CHUNK, encoding="compact"),
            "adamw fused": torch.optim.AdamW(params, lr=LR, fused=True)}
    if ref_cls is not None:
        opts["reference"] = ref_cls(params, lr=LR, compression_decay=DECAY, compression_topk=TOPK,
                                    compression_chunk=CHUNK)
    times: dict[str, list[float]] = {k: [] for k in opts}
    sparse = optim_mod._sparse_pays
    for r in range(warmup + steps):
        for name, opt in opts.items():
            for p, x in zip(params, grads):
                p.grad.copy_(x)  # the reference overwrites .grad with its update
            optim_mod._sparse_pays = _dense if name == "ours, dense inverse" else sparse
            _sync(device)
            t0 = time.perf_counter()
            opt.step()
            _sync(device)
            if r >= warmup:
                times[name].append(time.perf_counter() - t0)
    optim_mod._sparse_pays = sparse
    n = sum(p.numel() for p in params)
    return [{"size": size, "model": SIZES[size][0], "params": n, "tensors": len(params), "optimizer": k,
             "median_ms": 1e3 * statistics.median(v), "steps": len(v), "warmup": warmup}
            for k, v in times.items()]


def _tile_of(shape, flat: int, n1: int, n2: int) -> tuple[int, int]:
    rows, cols = matrix_shape(shape)
    r, c = divmod(flat, cols)
    return r // n1, c // n2


def _compare(size: str, device: torch.device, ref_cls) -> dict:
    """One step of ours and of the reference from the same parameters and gradients; the elements
    that differ, each classified from a float64 recomputation of its tile."""
    a, b = _model(size, device), _model(size, device)
    pa = [p for p in a.parameters() if p.requires_grad]
    pb = [p for p in b.parameters() if p.requires_grad]
    grads = _set_grads(pa, 2)
    for p, g in zip(pb, grads):
        p.grad = g.clone()
    start = [p.detach().clone() for p in pa]
    DeMo(pa, lr=LR, compression_decay=DECAY, compression_topk=TOPK, compression_chunk=CHUNK).step()
    ref_cls(pb, lr=LR, compression_decay=DECAY, compression_topk=TOPK, compression_chunk=CHUNK).step()
    out = {"size": size, "elements": 0, "differing": 0, "tie": 0, "near_zero_update": 0, "unexplained": 0,
           "differing_by_2lr": 0, "examples": []}
    for x, y, g, s in zip([p.detach() for p in pa], [p.detach() for p in pb], grads, start):
        out["elements"] += x.numel()
        diff = (x != y).reshape(-1)
        if not bool(diff.any()):
            continue
        where = diff.nonzero().flatten().tolist()
        out["differing"] += len(where)
        out["differing_by_2lr"] += int((((x - y).abs().reshape(-1)[diff] - 2 * LR).abs() < 1e-6).sum())
        n1, n2 = tile_shape(x.shape, CHUNK)
        k = clamp_topk(TOPK, n1 * n2)
        rows, cols = matrix_shape(x.shape)
        gm = (LR * g.double()).reshape(rows, cols)
        d1 = None if n1 == 1 else dct_matrix(n1, torch.float64, device)
        d2 = dct_matrix(n2, torch.float64, device)
        seen: dict[tuple[int, int], tuple[bool, torch.Tensor, float]] = {}
        for e in where:
            ta, tb = _tile_of(x.shape, e, n1, n2)
            if (ta, tb) not in seen:
                tile = gm[ta * n1:(ta + 1) * n1, tb * n2:(tb + 1) * n2]
                c = dct2(tile, d1, d2).reshape(-1)
                mag = c.abs().sort(descending=True).values
                tie = k < mag.numel() and bool((mag[k - 1] - mag[k]).abs() <= 1e-6 * mag[k - 1])
                kept = torch.zeros_like(c)
                top = c.abs().topk(k).indices
                kept[top] = c[top]
                u = idct2(kept.view(n1, n2), d1, d2)
                seen[(ta, tb)] = (tie, u, float(u.abs().max()))
            tie, u, umax = seen[(ta, tb)]
            r, col = divmod(e, cols)
            small = abs(float(u[r - ta * n1, col - tb * n2])) <= 1e-6 * umax
            kind = "tie" if tie else ("near_zero_update" if small else "unexplained")
            out[kind] += 1
            if len(out["examples"]) < 10:
                out["examples"].append({"shape": list(x.shape), "element": e, "tile": [ta, tb], "kind": kind,
                                        "ours": float(x.reshape(-1)[e] - s.reshape(-1)[e]),
                                        "reference": float(y.reshape(-1)[e] - s.reshape(-1)[e])})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.12M,85M,1.07B", help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in SIZES]
    if bad:
        print(f"demo_bench: unknown size {bad[0]!r}; known: {', '.join(SIZES)}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("demo_bench: --device cuda, and this machine has no GPU", file=sys.stderr)
        return 2
    ref_cls = _reference_class()
    if ref_cls is not None:
        _process_group(device)
    rows, compare = [], []
    t0 = time.time()
    for size in sizes:
        rows += _time(size, device, ref_cls, args.steps, args.warmup)
        if ref_cls is not None:
            compare.append(_compare(size, device, ref_cls))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"demo_bench: {size} done at {time.time() - t0:.0f} s", flush=True)
    base = {(r["size"]): r["median_ms"] for r in rows if r["optimizer"] == "reference"}
    for r in rows:
        r["ratio_vs_reference"] = r["median_ms"] / base[r["size"]] if r["size"] in base else None
    machine = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
               or platform.machine(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo_bench_gpu.json").write_text(json.dumps({"machine": machine, "kind": "measured", "rows": rows,
                                                        "compare": compare, "wall_s": time.time() - t0},
                                                       indent=1))
    with open(out / "demo_bench_gpu.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        ratio = "" if r["ratio_vs_reference"] is None else f"  {r['ratio_vs_reference']:.2f}x reference"
        print(f"{r['size']:>6} {r['optimizer']:<22} {r['median_ms']:9.2f} ms{ratio}")
    for c in compare:
        print(f"{c['size']:>6} differing {c['differing']} of {c['elements']} (tie {c['tie']}, near-zero update "
              f"{c['near_zero_update']}, unexplained {c['unexplained']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
