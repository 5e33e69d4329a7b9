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


# torch.compile leaves the process unable to fork ranks that run autograd ("Unable to handle
# autograd's threading in combination with fork-based multiprocessing"): the compile tests run in a
# child interpreter, so the test worker's later fork-based tests are not poisoned.
_COMPILE_CHECK = """
import json, sys
import torch, torch._dynamo as dynamo
from distlab.demo.bench import compiled_step
from distlab.demo.train import build_lm
from distlab.techniques import DeMo

torch.set_num_threads(1)


def params():
    model = build_lm({"name": "gpt", "n_layer": 2, "d_model": 128, "n_head": 2, "block_size": 64},
                     256, torch.float32, 0)
    return list(model.parameters())


from torch._dynamo.testing import CompileCounterWithBackend

runs = []
counter = CompileCounterWithBackend("aot_eager")  # counts the compilations over the five steps
for compiled in (False, True):
    dynamo.reset()
    ps = params()
    opt = DeMo(ps, lr=1e-3, compression_topk=8, compression_chunk=32)
    step = compiled_step(opt, backend=counter) if compiled else opt.step
    for i in range(5):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel() + i))
        step()
    runs.append([p.detach().clone() for p in ps])
ex = dynamo.explain(opt.step)()
print(json.dumps({"equal": all(torch.equal(a, b) for a, b in zip(*runs)), "graphs": ex.graph_count,
                  "compiles": counter.frame_count,
                  "breaks": ex.graph_break_count, "reasons": [str(r)[:200] for r in ex.break_reasons]}))
"""

_COMPILE_BENCH = """
import json, sys
from pathlib import Path
from distlab.demo import bench

out = Path(sys.argv[1])
model = {"name": "gpt", "n_layer": 1, "d_model": 64, "n_head": 2, "block_size": 64}
df = bench.main_bench({"model": model, "lr": 1e-3, "repeats": 2, "steps": 1, "parts": ["compile"]},
                      out, out / "bench.csv", threads=1)
rows = df[df["benchmark"] == "torch.compile (inductor) of one step"]
print(json.dumps({"n": len(rows), "ms": rows["median_ms"].tolist(), "what": rows["what"].tolist(),
                  "ratio": rows["ratio_vs_eager"].tolist()}))
"""


def _child(code: str, *args) -> dict:
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_step_compiles_as_one_graph_and_equals_the_eager_step():
    """``torch.compile(opt.step, fullgraph=True)`` (a graph break would raise): one graph, compiled
    once over five steps (a cache the first call filled would make the second compile again), and five
    compiled steps leave the parameters bit-equal to five eager ones from the same gradients.
    The aot_eager backend traces what inductor would compile without its code generation; the
    inductor cost (first call, steady step against eager) is ``demo-bench`` part "compile"."""
    got = _child(_COMPILE_CHECK)
    assert got["equal"] and got["graphs"] == 1 and got["breaks"] == 0 and got["compiles"] == 1, got


def test_demo_bench_reports_the_compile_cost(tmp_path):
    """Part "compile": the first compiled call and the steady compiled step against eager, bit-equal."""
    got = _child(_COMPILE_BENCH, tmp_path)
    assert got["n"] == 2 and all(ms > 0 for ms in got["ms"])
    assert "bit-equal" in got["what"][1] and "NOT" not in got["what"][1]
    assert got["ratio"][1] > 0
