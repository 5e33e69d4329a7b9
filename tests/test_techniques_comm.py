"""The one communication contract of distlab.techniques.comm: SimComm in memory, DistComm over
torch.distributed, the same record (a list of (kind, nbytes)) and the same totals."""

from __future__ import annotations

import json

import pytest
import torch

from distlab.runtime.ledger import ByteLedger
from distlab.runtime.network import NetworkModel, all_gather_bytes, ring_all_reduce_bytes
from distlab.techniques.comm import Collective, DistComm, SimComm, StragglerTimeout


def _xs(n: int, shape=(3, 5), dtype=torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g, dtype=dtype) for _ in range(n)]


def test_simcomm_computes_records_books_and_totals_each_collective():
    n, net, ledger = 4, NetworkModel(latency_s=2e-4, bandwidth_Bps=1e9), ByteLedger()
    comm = SimComm(n, ledger, net)
    xs = _xs(n)
    assert torch.equal(comm.all_reduce_mean(xs), torch.stack(xs).mean(0))
    assert torch.equal(comm.all_gather(xs), torch.stack(xs))
    assert torch.equal(comm.gather(xs), torch.stack(xs))  # the master's view: not recorded
    small = _xs(n, (7,), torch.float64)
    comm.all_reduce_mean(small)
    colls = comm.pop()
    assert colls == [("all_reduce", 60), ("all_gather", 60), ("all_reduce", 56)]
    assert all(isinstance(c, Collective) for c in colls) and colls[0].kind == "all_reduce"
    assert comm.pop() == []  # pop empties the record
    rounds, seconds, payload = comm.totals(colls)
    assert rounds == 2 * (n - 1) + (n - 1) + 2 * (n - 1)
    assert payload == 60 + 60 + 56
    want = 0.0
    for kind, nb in colls:  # the same sum in the same order: bit-identical
        want += getattr(net, kind)(nb, n)
    assert seconds == want and seconds > 0
    assert ledger.total_bytes == pytest.approx(ring_all_reduce_bytes(60, n) + all_gather_bytes(60, n)
                                               + ring_all_reduce_bytes(56, n))
    assert ledger.by_op["all_reduce"] == ring_all_reduce_bytes(60, n) + ring_all_reduce_bytes(56, n)


def test_without_a_network_or_ledger_a_comm_only_records():
    comm = SimComm(3)
    comm.all_gather(_xs(3))
    colls = comm.pop()
    assert comm.totals(colls) == (2, 0.0, 60)
    assert json.loads(json.dumps(colls)) == [["all_gather", 60]]  # as the atlas's step records hold it


def test_distcomm_keeps_the_contract_over_torch_distributed(tmp_path):
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        ledger = ByteLedger()
        comm, ref = DistComm(1, ledger), SimComm(1, ByteLedger(), None)
        (x,) = _xs(1)
        assert torch.equal(comm.all_reduce_mean([x]), ref.all_reduce_mean([x]))
        assert torch.equal(comm.all_gather([x]), ref.all_gather([x]))
        assert torch.equal(comm.gather([x]), ref.gather([x]))
        got, want = comm.pop(), ref.pop()
        assert got == want == [("all_reduce", 60), ("all_gather", 60)]
        assert comm.totals(got) == (0, 0.0, 120)  # one rank: no ring rounds; no seconds over a real network
        assert ledger.by_op == ref.ledger.by_op
    finally:
        dist.destroy_process_group()


def test_one_straggler_timeout_for_both_backends():
    from distlab.runtime import dist as rdist, sim, stragglers

    assert sim.StragglerTimeout is rdist.StragglerTimeout is stragglers.StragglerTimeout is StragglerTimeout
    assert issubclass(StragglerTimeout, RuntimeError)
