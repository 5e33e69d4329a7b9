"""DeMo's step dispatches a bounded number of ops: the top-level aten ops of one ``step()``
(torch profiler, CPU) do not grow with the number of tensors or of tiles at a fixed set of tile
shapes, and stay under the bound the GPU's launch overhead asks for (400; the benchmark rows
``demo-bench`` part "ops" give the count at 85 M and 269 M parameters)."""

from __future__ import annotations

import pytest
import torch

from distlab.demo.bench import count_step_ops
from distlab.demo.train import build_lm

BOUND = 400


def _params(n_layer: int, d_model: int) -> list[torch.Tensor]:
    model = build_lm({"name": "gpt", "n_layer": n_layer, "d_model": d_model, "n_head": 2, "block_size": 64},
                     256, torch.float32, 0)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()))
    return params


@pytest.mark.parametrize("encoding", ["reference", "compact"])
def test_a_step_dispatches_as_many_ops_at_two_sizes_with_the_same_tile_shapes(encoding):
    """4 x 256 and 6 x 512 (64 x 64 tiles for the matrices, 1 x 64 for the vectors): 52 against 76
    tensors, 3.2 M against 19 M parameters, 788 against 4,648 tiles of 64 x 64; the same count."""
    torch.set_num_threads(1)
    small, large = _params(4, 256), _params(6, 512)
    assert len(large) > len(small) and sum(p.numel() for p in large) > 5 * sum(p.numel() for p in small)
    a = count_step_ops(small, lr=1e-3, encoding=encoding)
    b = count_step_ops(large, lr=1e-3, encoding=encoding)
    assert sum(a.values()) == sum(b.values()) <= BOUND, (a, b)
    assert a == b  # op by op
    assert a["aten::_foreach_copy_"] == 1  # every gradient staged by one op


def test_the_count_holds_with_param_groups_and_weight_decay():
    """Two rates and weight decay in one tile group take a few more ops, still not per tensor."""
    counts = []
    for n_layer in (2, 4):
        params = _params(n_layer, 256)
        groups = [{"params": params[::2], "weight_decay": 0.1}, {"params": params[1::2], "lr": 2e-3}]
        counts.append(sum(count_step_ops(groups, lr=1e-3).values()))
    assert counts[0] == counts[1] <= BOUND


def test_demo_bench_reports_the_count_as_a_row(tmp_path):
    from distlab.demo import bench

    model = {"name": "gpt", "n_layer": 2, "d_model": 128, "n_head": 2, "block_size": 64}
    df = bench.main_bench({"model": model, "lr": 1e-3, "repeats": 1, "steps": 1, "parts": ["ops"]},
                          tmp_path, tmp_path / "bench.csv", threads=1)
    row = df[df["benchmark"] == "top-level aten ops of one step"].iloc[0]
    assert row["tensors"] == 28 and 0 < row["ops"] <= BOUND
    assert (tmp_path / "bench.md").is_file()


def test_the_step_compiles_as_one_graph_and_equals_the_eager_step():
    """``torch.compile(opt.step, fullgraph=True)`` (a graph break would raise): one graph, and five
    compiled steps leave the parameters bit-equal to five eager ones from the same gradients.
    The aot_eager backend traces what inductor would compile without its code generation; the
    inductor cost (first call, steady step against eager) is ``demo-bench`` part "compile"."""
    import torch._dynamo as dynamo

    from distlab.demo.bench import compiled_step
    from distlab.techniques import DeMo

    torch.set_num_threads(1)
    runs = []
    for compiled in (False, True):
        dynamo.reset()
        params = _params(2, 128)
        opt = DeMo(params, lr=1e-3, compression_topk=8, compression_chunk=32)
        step = compiled_step(opt, backend="aot_eager") if compiled else opt.step
        for i in range(5):
            for p in params:
                p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel() + i))
            step()
        runs.append([p.detach().clone() for p in params])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    explained = dynamo.explain(opt.step)()
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


def test_demo_bench_reports_the_compile_cost(tmp_path):
    """Part "compile": the first compiled call and the steady compiled step against eager, bit-equal."""
    from distlab.demo import bench

    model = {"name": "gpt", "n_layer": 1, "d_model": 64, "n_head": 2, "block_size": 64}
    df = bench.main_bench({"model": model, "lr": 1e-3, "repeats": 2, "steps": 1, "parts": ["compile"]},
                          tmp_path, tmp_path / "bench.csv", threads=1)
    rows = df[df["benchmark"] == "torch.compile (inductor) of one step"]
    assert len(rows) == 2 and (rows["median_ms"] > 0).all()
    assert "bit-equal" in rows.iloc[1]["what"] and "NOT" not in rows.iloc[1]["what"]
    assert rows.iloc[1]["ratio_vs_eager"] > 0
