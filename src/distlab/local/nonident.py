"""Readout information does not identify upstream credit: two demonstrations.

1. The toy case (the paper's): a scalar state ``h`` read out as ``o = a h^2``
   with loss ``(o - y)^2``.  ``h = 1`` and ``h = -1`` give the same output,
   the same loss and the same readout gradient ``dL/da``, yet opposite
   upstream corrections ``dL/dh``.

2. Inside a trained GPT (pre-LN): LayerNorm ignores the scale of its input,
   so multiplying the embeddings and every block's residual write
   (``attn.c_proj`` and the MLP's output projection, weights and biases) by
   ``s > 0`` multiplies every residual state by ``s`` and leaves every
   block's input to its sub-layers, the readout's input, the logits and the
   loss unchanged (up to LayerNorm's epsilon).  The two networks are the
   same function and every section sends the *same* readout-gradient report;
   but the correction the states need, ``dL/dh``, is divided by ``s``, and
   the upstream weights' gradients differ (the write projections' by ``1/s``).
   No function of the readout reports can tell the two apart, so none can
   give both the right upstream credit.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from ..results.runs import write_json
from .model import Split, TextData, build_gpt, flat, lm_loss, split_gpt


def toy(h_values=(1.0, -1.0), a: float = 1.0, y: float = 0.25) -> list[dict]:
    """Output, loss, readout gradient dL/da and upstream gradient dL/dh at each ``h``."""
    out = []
    for hv in h_values:
        h = torch.tensor(float(hv), dtype=torch.float64, requires_grad=True)
        aa = torch.tensor(float(a), dtype=torch.float64, requires_grad=True)
        o = aa * h**2
        loss = (o - y) ** 2
        g_a, g_h = torch.autograd.grad(loss, (aa, h))
        o, loss = o.detach(), loss.detach()
        out.append({"h": hv, "output": float(o), "loss": float(loss), "readout_grad": float(g_a),
                    "upstream_grad": float(g_h)})
    return out


def rescaled(split: Split, s: float) -> Split:
    """A deep copy of the model with the embeddings and every residual write scaled by ``s``."""
    if not s > 0:
        raise ValueError(f"scale s must be > 0 (LayerNorm is only positively scale invariant), got {s}")
    gpt = copy.deepcopy(split.gpt)
    with torch.no_grad():
        gpt.wte.weight.mul_(s)
        gpt.wpe.weight.mul_(s)
        for block in gpt.blocks:
            for lin in (block.attn.c_proj, block.mlp[2]):
                lin.weight.mul_(s)
                lin.bias.mul_(s)
    return split_gpt(gpt, len(split.sections))


def probe(split: Split, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Loss, logits, each section's readout report, dL/dh at each section boundary and the
    gradient of every section's parameters, for one batch (end-to-end backprop)."""
    states, h = [], x
    for sec in split.sections:
        h = sec(h)
        h.retain_grad()
        states.append(h)
    logits = split.readout(h)
    loss = lm_loss(logits, y)
    for p in split.gpt.parameters():
        p.grad = None
    loss.backward()
    # each section's RC report: the readout gradient of its local loss
    reports = []
    for k, hk in enumerate(states):
        hk_d = hk.detach().requires_grad_(False)
        ro_params = list(split.readout.parameters())
        g = torch.autograd.grad(lm_loss(split.readout(hk_d), y), ro_params)
        reports.append(flat(g))
    return {"loss": float(loss.detach()), "logits": logits.detach(), "reports": reports,
            "state_grads": [hk.grad.detach().clone() for hk in states],
            "section_grads": [flat([p.grad.detach().clone() for p in sec.parameters()])
                              for sec in split.sections]}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def in_model(split: Split, x: torch.Tensor, y: torch.Tensor, scales: list[float]) -> list[dict]:
    """For each ``s``: how far the outputs, loss and reports move (should be ~0) and how far
    the upstream corrections move, per section."""
    base = probe(split, x, y)
    rows = []
    for s in scales:
        other = probe(rescaled(split, s), x, y)
        for k in range(len(split.sections)):
            ga, gb = other["section_grads"][k], base["section_grads"][k]
            rows.append({
                "scale": s, "section": k,
                "logit_max_abs_diff": float((other["logits"] - base["logits"]).abs().max()),
                "loss_abs_diff": abs(other["loss"] - base["loss"]),
                "report_rel_diff": _rel(other["reports"][k], base["reports"][k]),
                "state_grad_ratio": float(other["state_grads"][k].norm() / base["state_grads"][k].norm()),
                "state_grad_rel_diff": _rel(other["state_grads"][k], base["state_grads"][k]),
                "section_grad_rel_diff": _rel(ga, gb),
                "section_grad_cosine": float(torch.nn.functional.cosine_similarity(ga, gb, dim=0)),
            })
    return rows


def run(model_path: Path, spec: dict, data_dir: Path, scales: list[float], out: Path) -> dict:
    """Both demonstrations; the model is a BP run's final weights (``model.pt``)."""
    torch.manual_seed(0)
    m = spec["model"]
    split = split_gpt(build_gpt(m, int(spec["seed"])), int(spec["sections"]))
    split.gpt.load_state_dict(torch.load(model_path, map_location="cpu", weights_only=True))
    data = TextData(data_dir, int(m["block_size"]), int(spec["batch_size"]), int(spec["seed"]),
                    splits=("val",))
    x, y = data.heldout_batches("val", 1, int(spec["batch_size"]))[0]
    result = {"toy": toy(), "model": in_model(split, x, y, scales),
              "source": {"model": str(model_path), "sections": len(split.sections),
                         "n_layer": int(m["n_layer"])}}
    write_json(result, out)
    return result


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())
