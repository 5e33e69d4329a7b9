"""The floor benchmark (``scripts/bench_floor.py``): measured, never asserted; the test checks
what it classifies and writes, not how fast anything ran."""

from __future__ import annotations

import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from bench_floor import CLASSES, WIDTHS, markdown, op_class, op_shares, width_ms  # noqa: E402

@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the script runs (a second one only waits on a loaded machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


TINY = {"name": "gpt", "n_layer": 1, "d_model": 8, "n_head": 2, "block_size": 8}


def test_ops_fall_into_their_classes():
    assert op_class("aten::addmm") == op_class("aten::bmm") == "matmul"
    assert op_class("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert op_class("aten::_log_softmax_backward_data") == "softmax + cross-entropy"
    assert op_class("aten::gelu_backward") == "gelu"
    assert op_class("aten::native_layer_norm") == "layer norm"
    assert op_class("aten::_fused_adamw_") == "optimizer"
    assert op_class("aten::copy_") == "other"


def test_a_steps_shares_cover_its_ops_and_name_where_a_gpt_spends():
    from distlab.atlas.train import build_lm
    from distlab.models import lm_loss

    model = build_lm(TINY, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (4, 9))

    def step():
        opt.zero_grad(set_to_none=True)
        lm_loss(model(x[:, :-1]), x[:, 1:]).backward()
        opt.step()
    ms, shares = op_shares(step, steps=2)
    assert ms > 0
    assert set(shares) == {c for c, _ in CLASSES} | {"other"}
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    for cls in ("matmul", "attention", "softmax + cross-entropy", "gelu", "layer norm"):
        assert shares[cls] > 0, cls  # the GPT's every arithmetic class is seen


def test_the_stack_width_table_has_a_row_per_size_and_a_bound():
    rows = [{"size": "tiny", "width": w, "ms_per_pass": round(width_ms(TINY, 2, w, 1), 3)} for w in WIDTHS]
    assert all(r["ms_per_pass"] > 0 for r in rows)
    shares = [{"benchmark": "b", "step_ms": 1.0, **{c: 0.0 for c, _ in CLASSES}, "other": 1.0}]
    compiled = [{"size": "tiny", "width": 4, "eager_ms": 2.0, "compiled_ms": 1.5, "compile_s": 30.0}]
    text = markdown(shares, rows, "head", compiled)
    assert "| tiny | 4 | 2.00 | 1.50 | 0.75 | 30 |" in text  # compiled / eager beside the compile cost
    line = next(ln for ln in text.splitlines() if ln.startswith("| tiny |"))
    assert line.count("|") == len(WIDTHS) + 3  # a column per width, then floor / N = 1
    bound = float(line.rstrip(" |").rsplit("|", 1)[1])
    per = [r["ms_per_pass"] for r in rows]
    assert bound == round(min(per) / per[0], 2)  # the cheapest pass over the loop's (width 1)
