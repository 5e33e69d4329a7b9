"""DeMo on a model wrapped by FSDP2 (``fully_shard``): the same parameters as unsharded DeMo.

Two gloo processes run the same five steps twice: DeMo on a whole replica of the model on each
rank, then :class:`ShardedDeMo` on the model ``fully_shard`` split over the two ranks.  The
parameters must be bit-equal.  The model's shapes put shards across tiles (a 40-row weight cut at
row 20 with 8-row tiles; a 7-row one cut at row 4; a one-row weight whose second shard is empty;
1-D biases) and on tile boundaries (a conv kernel); two settings of the top-k take both inverse
transforms (entry by entry, ``E = N k <= n1 + n2``, and dense), one of them with weight decay and
two backward passes a step."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

STEPS = 5
SETTINGS = [dict(compression_topk=4, weight_decay=0.0, backwards=1),    # 2 x 4 entries <= 16: sparse inverse
            dict(compression_topk=12, weight_decay=0.1, backwards=2)]   # 2 x 12 > 16: dense inverse


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 16, 3)        # (16, 2, 3) as (16, 6): 8-row tiles, cut at row 8
        self.fc1 = nn.Linear(16 * 10, 40)      # (40, 160): 8-row tiles, cut at row 20
        self.fc2 = nn.Linear(40, 7)            # (7, 40): one 7-row tile, cut at row 4
        self.fc3 = nn.Linear(7, 1)             # (1, 7): the second shard empty

    def forward(self, x):
        h = torch.tanh(self.conv(x.view(-1, 2, 12))).flatten(1)
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(h)))))


def _batch(rank: int, step: int, half: int):
    g = torch.Generator().manual_seed(1000 * rank + 10 * step + half)
    x = torch.randn(8, 24, generator=g)
    return x, x[:, :1] - 0.5 * x[:, 1:2]


def _train(rank: int, setting: dict, sharded: bool):
    from torch.distributed.fsdp import fully_shard

    from distlab.techniques.demo import DeMo
    from distlab.techniques.demo.fsdp import ShardedDeMo

    torch.manual_seed(0)
    model = Net()
    kw = dict(lr=1e-2, compression_decay=0.9, compression_chunk=8,
              compression_topk=setting["compression_topk"], weight_decay=setting["weight_decay"])
    if sharded:
        for layer in (model.conv, model.fc1, model.fc2, model.fc3):
            fully_shard(layer)
        fully_shard(model)
        opt = ShardedDeMo(model, **kw)
    else:
        opt = DeMo(model.parameters(), **kw)
    for step in range(STEPS):
        opt.zero_grad()
        for half in range(setting["backwards"]):
            x, y = _batch(rank, step, half)
            ((model(x) - y) ** 2).mean().backward()
        opt.step()
    params = {n: (p.full_tensor() if sharded else p).detach().clone() for n, p in model.named_parameters()}
    rows = {n: (p.to_local().shape[0] if sharded else p.shape[0]) for n, p in model.named_parameters()}
    info = {"grads_none": [p.grad is None for p in model.parameters()], "payload": opt.payload_nbytes(),
            "memory": opt.memory_nbytes() if sharded else None}
    return params, rows, info


def _worker(rank: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        calls = {"reduce_scatter": 0}
        real = dist.reduce_scatter_single

        def counting(*a, **k):
            calls["reduce_scatter"] += 1
            return real(*a, **k)

        dist.reduce_scatter_single = counting
        found = []
        for setting in SETTINGS:
            whole, _, plain = _train(rank, setting, sharded=False)
            shard, rows, info = _train(rank, setting, sharded=True)
            found.append({"whole": whole, "shard": shard, "rows": rows, "grads_none": info["grads_none"],
                          "payloads": (plain["payload"], info["payload"]), "memory": info["memory"]})
        seen = calls["reduce_scatter"]
        # the counter's control: FSDP2 alone reduce-scatters the gradients of a backward
        from torch.distributed.fsdp import fully_shard
        model = Net()
        fully_shard(model)
        x, y = _batch(rank, 0, 0)
        ((model(x) - y) ** 2).mean().backward()
        calls["plain_fsdp"] = calls["reduce_scatter"] - seen
        calls["reduce_scatter"] = seen
        # misuse: the optimizer made after FSDP reduced the gradients; shards not on dim 0
        from torch.distributed.tensor import Shard

        from distlab.techniques.demo.fsdp import ShardedDeMo
        errors = []
        try:
            ShardedDeMo(model, lr=1e-2, compression_chunk=8).step()
        except RuntimeError as e:
            errors.append(str(e))
        other = Net()
        fully_shard(other, shard_placement_fn=lambda p: Shard(1) if p.dim() == 2 and p.shape[1] % 2 == 0
                    else Shard(0))
        try:
            ShardedDeMo(other, lr=1e-2)
        except ValueError as e:
            errors.append(str(e))
        calls["errors"] = errors
        torch.save({"found": found, "calls": calls}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    mp.spawn(_worker, args=(f"file://{tmp}/store", str(tmp / "out")), nprocs=2, join=True)
    return [torch.load(tmp / f"out.{r}", weights_only=False) for r in range(2)]


@pytest.mark.slow
def test_fsdp2_sharded_demo_equals_unsharded_demo_bit_for_bit_after_five_steps(runs):
    for r, run in enumerate(runs):
        for setting, f in zip(SETTINGS, run["found"]):
            assert f["whole"].keys() == f["shard"].keys()
            for name, w in f["whole"].items():
                s = f["shard"][name]
                assert torch.equal(w, s), (r, setting, name, float((w - s).abs().max()))
    # the unsharded run moved the parameters (the equality is not that of two untrained models)
    torch.manual_seed(0)
    init = dict(Net().named_parameters())
    assert all(not torch.equal(runs[0]["found"][0]["whole"][n], init[n].detach()) for n in init)
    # and both ranks ended with the same parameters
    for a, b in zip(runs[0]["found"], runs[1]["found"]):
        assert all(torch.equal(a["shard"][n], b["shard"][n]) for n in a["shard"])


@pytest.mark.slow
def test_each_rank_holds_its_shard_and_fsdp_reduce_scatters_nothing(runs):
    rows = [run["found"][0]["rows"] for run in runs]
    assert (rows[0]["fc1.weight"], rows[1]["fc1.weight"]) == (20, 20)
    assert (rows[0]["fc2.weight"], rows[1]["fc2.weight"]) == (4, 3)
    assert (rows[0]["fc3.weight"], rows[1]["fc3.weight"]) == (1, 0)
    assert (rows[0]["conv.weight"], rows[1]["conv.weight"]) == (8, 8)
    for run in runs:
        # the gradients went to DeMo, not to FSDP's reduce-scatter; the sharded .grad stays None
        assert run["calls"]["reduce_scatter"] == 0 and run["calls"]["plain_fsdp"] >= 1
        assert all(all(f["grads_none"]) for f in run["found"])
        for f in run["found"]:
            mem = f["memory"]
            assert f["payloads"][0] == f["payloads"][1]   # DeMo's all-gather carries the unsharded bytes
            # the parameters shard, DeMo's state does not: its buffers and the held gradients are full size
            assert mem["params_local"] < 0.6 * mem["params_full"]
            assert mem["optimizer"] >= 2 * mem["params_full"] and mem["held_gradients"] == mem["params_full"]
        late, dim1 = run["calls"]["errors"]
        assert "FSDP reduced a gradient" in late and "Shard(0)" in dim1


@pytest.mark.slow
def test_the_example_trains_under_torchrun_and_matches_unsharded_demo(tmp_path):
    import json
    import subprocess
    import sys

    from conftest import ROOT, example_env, run_example_torchrun

    env = example_env()
    out = tmp_path / "ex.json"
    r = run_example_torchrun("demo_fsdp2.py", ["--steps", "30", "--check", "--out", str(out)], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["world"] == 2 and res["check_equal"] and res["check_max_diff"] == 0.0
    assert res["end"] < 0.5 * res["start"]                      # it learned the teacher
    assert res["params_on_rank0"] < 0.6 * res["params"]         # rank 0 holds about half
    # run outside torchrun: one line, exit 2
    r = subprocess.run([sys.executable, str(ROOT / "examples/demo_fsdp2.py")], env={
        k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE")}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "torchrun" in r.stderr
