"""DeMo optimizer: the reference's trajectory, its phases, and what it adds.

The reference semantics are restated here as a plain loop over parameters,
tiles and workers (``loop_reference``), with scipy's DCT, so the batched,
bucketed implementation is checked against an independent statement of the
equations rather than against itself.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.fft
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from distlab.demo import DeMo
from distlab.techniques.demo import payload as pl
from distlab.techniques.demo.transforms import chunk_for, dct2, dct_matrix, idct2, matrix_shape

STEPS = 25
LR, DECAY, TOPK, CHUNK = 1e-3, 0.999, 32, 64


# --------------------------------------------------------------- the equations

def _chunk(n: int, target: int) -> int:
    return max(d for d in range(1, min(n, target) + 1) if n % d == 0)


def _as_matrix(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0:
        return a.reshape(1, 1)
    if a.ndim == 1:
        return a.reshape(1, -1)
    return a.reshape(a.shape[0], -1)


def loop_reference(params0: dict, grads_of, world: int, steps: int, lr=LR, decay=DECAY, topk=TOPK,
                   chunk=CHUNK, wd=0.0, mean="senders") -> dict:
    """The DeMo equations, one parameter, one tile, one worker at a time.

    ``grads_of(params, rank, step)`` returns {name: gradient array}; ``lr`` is
    one rate or {name: rate} (param groups).  ``mean``: "senders" divides each
    index's sum by the workers that sent it (the reference), "all" by ``world``
    (Algorithm 1's "synchronize" read literally).
    """
    params = {k: v.copy() for k, v in params0.items()}
    delta = [{k: np.zeros_like(v) for k, v in params.items()} for _ in range(world)]
    for step in range(steps):
        grads = [grads_of(params, r, step) for r in range(world)]
        for name, p in params.items():
            P = _as_matrix(p)                       # a view: updates write into params[name]
            n1, n2 = _chunk(P.shape[0], chunk), _chunk(P.shape[1], chunk)
            k = max(1, min(topk, n1 * n2))
            plr = lr[name] if isinstance(lr, dict) else lr
            sent = []                               # per worker: {(i, j): (idx, val)}
            for r in range(world):
                D = _as_matrix(delta[r][name])
                D *= decay
                D += plr * _as_matrix(grads[r][name])
                mine = {}
                for i in range(P.shape[0] // n1):
                    for j in range(P.shape[1] // n2):
                        tile = D[i * n1:(i + 1) * n1, j * n2:(j + 1) * n2]
                        c = scipy.fft.dctn(tile, type=2, norm="ortho").ravel()
                        idx = np.argsort(-np.abs(c), kind="stable")[:k]
                        kept = np.zeros_like(c)
                        kept[idx] = c[idx]
                        tile -= scipy.fft.idctn(kept.reshape(n1, n2), type=2, norm="ortho")
                        mine[(i, j)] = (idx, c[idx])
                sent.append(mine)
            P *= 1.0 - plr * wd
            for i in range(P.shape[0] // n1):
                for j in range(P.shape[1] // n2):
                    total = np.zeros(n1 * n2)
                    hits = np.zeros(n1 * n2)
                    for r in range(world):
                        idx, val = sent[r][(i, j)]
                        for a, v in zip(idx, val):
                            total[a] += v
                            hits[a] += 1
                    avg = (np.where(hits > 0, total / np.maximum(hits, 1), 0.0) if mean == "senders"
                           else total / world)
                    u = scipy.fft.idctn(avg.reshape(n1, n2), type=2, norm="ortho")
                    P[i * n1:(i + 1) * n1, j * n2:(j + 1) * n2] -= plr * np.sign(u)
    return params


# ------------------------------------------------------------------ the models

class Net(nn.Module):
    """2-D weights (one with a prime dimension, 67: chunk 1), biases, a LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(128, 67)
        self.ln = nn.LayerNorm(67)
        self.fc2 = nn.Linear(67, 96)
        self.fc3 = nn.Linear(96, 64)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(self.ln(torch.tanh(self.fc1(x))))))


class ConvNet(nn.Module):
    """A conv kernel (4-D), a 0-D scale and a 1-D bias: the documented reshape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.scale = nn.Parameter(torch.tensor(0.7))
        self.head = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.head(torch.tanh(self.conv(x)).flatten(1)) * self.scale


def _batch(make, rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if make is ConvNet:
        return torch.randn(4, 3, 6, 6, generator=g, dtype=torch.float64), torch.randn(4, 5, generator=g, dtype=torch.float64)
    return torch.randn(8, 128, generator=g, dtype=torch.float64), torch.randn(8, 64, generator=g, dtype=torch.float64)


def _loss(model, x, y):
    return (model(x) - y).pow(2).mean()


def _model(make=Net, seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return make().double()


def _grads_fn(make):
    def grads_of(params: dict, rank: int, step: int) -> dict:
        m = _model(make)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(torch.from_numpy(params[n]))
        _loss(m, *_batch(make, rank, step)).backward()
        return {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    return grads_of


def _np_params(model) -> dict:
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def run_replicas(make, world: int, steps: int, params_of=None, **opt_kw) -> tuple[list[nn.Module], list[DeMo]]:
    """``world`` workers in this process: encode on each, stack, apply on each.
    ``params_of(model)`` gives the optimizer's params or param groups (default: all)."""
    models = [_model(make) for _ in range(world)]
    params_of = params_of or (lambda m: m.parameters())
    opts = [DeMo(params_of(m), lr=LR, compression_decay=DECAY, compression_topk=TOPK,
                 compression_chunk=CHUNK, **opt_kw) for m in models]
    for step in range(steps):
        for r, (m, o) in enumerate(zip(models, opts)):
            o.zero_grad()
            _loss(m, *_batch(make, r, step)).backward()
        gathered = torch.stack([o.encode() for o in opts])
        for o in opts:
            o.apply(gathered)
    return models, opts


def _train(model, opt, steps: range) -> None:
    """One worker's steps (rank 0's batches) through ``opt.step()``."""
    for step in steps:
        opt.zero_grad()
        _loss(model, *_batch(Net, 0, step)).backward()
        opt.step()


_REFS: dict = {}


def reference_for(make, world: int, steps: int, wd: float = 0.0, mean: str = "senders") -> dict:
    """``loop_reference`` from the model's initial weights, computed once per setting."""
    key = (make, world, steps, wd, mean)
    if key not in _REFS:
        _REFS[key] = loop_reference(_np_params(_model(make)), _grads_fn(make), world, steps, wd=wd, mean=mean)
    return _REFS[key]


def _max_diff(model, ref: dict) -> float:
    return max(float(np.abs(p.detach().numpy() - ref[n]).max()) for n, p in model.named_parameters())


# ----------------------------------------------------------------- trajectory

@pytest.mark.parametrize("world, selection", [(1, "grouped"), (2, "grouped"), (2, "topk")])
def test_follows_the_reference_trajectory_in_process(world, selection):
    ref = reference_for(Net, world, STEPS)
    models, _ = run_replicas(Net, world, STEPS, selection=selection)
    start = _np_params(_model())
    moved = max(float(np.abs(ref[n] - start[n]).max()) for n in ref)
    assert moved > 10 * LR  # the parameters did move, by many sign steps
    for m in models:
        assert _max_diff(m, ref) < 1e-9


def test_plain_mean_over_all_workers_follows_its_loop_statement():
    """``mean="all"`` (Algorithm 1 read literally) against the loop with a division by N; at N = 3
    it differs from the reference's per-index mean, so the ablation compares two real variants."""
    ref_all = reference_for(Net, 3, 6, mean="all")
    models, _ = run_replicas(Net, 3, 6, mean="all")
    for m in models:
        assert _max_diff(m, ref_all) < 1e-9
    ref_senders = reference_for(Net, 3, 6)
    assert max(float(np.abs(ref_all[n] - ref_senders[n]).max()) for n in ref_all) > LR
    with pytest.raises(ValueError, match="mean"):
        DeMo(_model().parameters(), mean="median")


@pytest.mark.parametrize("path", ["sparse", "dense"])
def test_either_inverse_transform_follows_the_loop_statement(path, monkeypatch):
    """``apply`` takes the inverse DCT of the received coefficients either summed entry by entry
    (outer products of basis rows) or densely (sum per index, two products), by a cost rule on
    N k; which one the suite meets depends on the tile shapes.  Each, forced on every tile group:
    the per-index mean at N = 2 and 3 (indices sent by several workers), the plain mean at N = 3,
    a parameter one worker did not send, no host read (non-finite gradients decided on the device,
    ``nonfinite="skip"``).  The sparse sum runs in chunks of tiles (a
    cache's worth); here one tile a chunk, so chunk boundaries fall everywhere."""
    from distlab.techniques.demo import optim, optim_tiles

    monkeypatch.setattr(optim, "_sparse_pays", lambda tg, entries: path == "sparse")
    monkeypatch.setattr(optim_tiles, "_SPARSE_CHUNK_BYTES", 1)
    for world, steps, mean in ((2, STEPS, "senders"), (3, 6, "senders"), (3, 6, "all")):
        ref = reference_for(Net, world, steps, mean=mean)
        models, _ = run_replicas(Net, world, steps, mean=mean)
        assert max(_max_diff(m, ref) for m in models) < 1e-9
    models, opts = run_replicas(Net, 2, 1, nonfinite="skip")
    for r, (m, o) in enumerate(zip(models, opts)):
        o.zero_grad()
        _loss(m, *_batch(Net, r, 1)).backward()
    models[0].fc3.bias.grad = None
    with _NoHostSync():
        gathered = torch.stack([o.encode() for o in opts])
        for o in opts:
            o.apply(gathered)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)


class _NoHostSync(torch.overrides.TorchFunctionMode):
    """Raises on every call that reads a tensor's value on the host (a device sync on a GPU)."""

    BANNED = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
              torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.numpy, torch.Tensor.nonzero,
              torch.nonzero}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.BANNED:
            raise AssertionError(f"host sync in the step: {getattr(func, '__name__', func)}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mean", ["senders", "all"])
def test_a_step_reads_no_device_value_on_the_host(mean):
    """On a GPU, ``.item()``, ``.tolist()``, ``bool(t)`` and ``nonzero`` wait for the device; the step
    must use none of them (CPU check by interception; with a parameter no worker sent as well).
    The non-finite check decides on the device under ``nonfinite="skip"``; ``"raise"`` (the
    default) reads one bool a step, as GradScaler does."""
    models, opts = run_replicas(Net, 2, 1, mean=mean, nonfinite="skip")  # layout built, scratch allocated
    for m, o in zip(models, opts):
        o.zero_grad()
        _loss(m, *_batch(Net, 0, 1)).backward()
        m.fc3.bias.grad = None                              # nobody sends it: its weight is 0 on the device
    before = models[0].fc3.bias.detach().clone()
    with _NoHostSync():
        gathered = torch.stack([o.encode() for o in opts])
        for o in opts:
            o.apply(gathered)
    assert torch.equal(models[0].fc3.bias, before)
    with pytest.raises(AssertionError, match="host sync"), _NoHostSync():
        bool(torch.ones(()) > 0)                            # the interception does fire
    if torch.cuda.is_available():                           # where a GPU exists, CUDA's own check too
        m = _model().cuda()
        o = DeMo(m.parameters(), lr=LR, nonfinite="skip")
        for i in range(2):                                  # the first step builds the layout
            o.zero_grad()
            _loss(m, *(t.cuda() for t in _batch(Net, 0, 0))).backward()
            torch.cuda.set_sync_debug_mode("error" if i else "default")
            try:
                o.step()
            finally:
                torch.cuda.set_sync_debug_mode("default")


def test_world_size_one_step_needs_no_process_group():
    m = _model()
    ref = reference_for(Net, 1, STEPS)
    opt = DeMo(m.parameters(), lr=LR, compression_decay=DECAY, compression_topk=TOPK, compression_chunk=CHUNK)
    for step in range(STEPS):
        opt.zero_grad()
        _loss(m, *_batch(Net, 0, step)).backward()
        opt.step()
    assert _max_diff(m, ref) < 1e-9


def test_conv_kernels_and_scalars_use_the_documented_reshape():
    ref = reference_for(ConvNet, 2, 10)
    models, _ = run_replicas(ConvNet, 2, 10)
    assert matrix_shape((8, 3, 3, 3)) == (8, 27) and matrix_shape(()) == (1, 1)
    for m in models:
        assert _max_diff(m, ref) < 1e-9


def test_weight_decay_is_decoupled_and_applied_before_the_sign_step():
    ref = reference_for(Net, 2, 5, wd=0.1)
    models, _ = run_replicas(Net, 2, 5, weight_decay=0.1)
    assert _max_diff(models[0], ref) < 1e-9


def _gloo_worker(rank: int, world: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        calls = {"n": 0}
        real = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

        def counting(*a, **k):
            calls["n"] += 1
            return real(*a, **k)

        # one all-gather straight into a tensor, never the list form (which needs a stacking copy)
        dist.all_gather_single = dist.all_gather_into_tensor = counting
        dist.all_gather = None
        m = _model()
        opt = DeMo(m.parameters(), lr=LR, compression_decay=DECAY, compression_topk=TOPK, compression_chunk=CHUNK)
        for step in range(STEPS):
            opt.zero_grad()
            _loss(m, *_batch(Net, rank, step)).backward()
            opt.step()
        torch.save({"params": _np_params(m), "calls": calls["n"]}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_follows_the_reference_trajectory_on_two_gloo_processes(tmp_path):
    init = f"file://{tmp_path}/store"
    mp.spawn(_gloo_worker, args=(2, init, str(tmp_path / "out")), nprocs=2, join=True)
    ref = reference_for(Net, 2, STEPS)
    finals = [torch.load(tmp_path / f"out.{r}", weights_only=False) for r in range(2)]
    for f in finals:
        assert f["calls"] == STEPS  # one all-gather a step carries every parameter
        assert max(float(np.abs(f["params"][n] - ref[n]).max()) for n in ref) < 1e-9
    a, b = (f["params"] for f in finals)
    assert all(np.array_equal(a[n], b[n]) for n in a)


# ------------------------------------------------------------- beyond the reference

def test_state_dict_holds_delta_and_resumes_bit_for_bit(tmp_path):
    full, _ = run_replicas(Net, 1, 12)
    m = _model()
    opt = DeMo(m.parameters(), lr=LR)
    _train(m, opt, range(6))
    sd = opt.state_dict()
    deltas = [s["delta_dct"] for s in sd["state"].values()]
    assert len(deltas) == len(list(m.parameters()))
    # tiles with fewer positions than top-k send everything (delta 0); the others keep a residual
    assert opt.state_dict()["state"][6]["delta_dct"].abs().sum() > 0  # fc3.weight: 64 x 48 tiles
    assert opt.momentum(m.fc3.weight).abs().sum() > 0
    torch.save({"model": m.state_dict(), "opt": sd}, tmp_path / "ckpt.pt")
    ck = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    m2 = _model(seed=123)
    m2.load_state_dict(ck["model"])
    opt2 = DeMo(m2.parameters(), lr=LR)
    opt2.load_state_dict(ck["opt"])
    _train(m2, opt2, range(6, 12))
    for a, b in zip(full[0].parameters(), m2.parameters()):
        assert torch.equal(a, b)


def test_grad_none_is_skipped_and_ranks_stay_identical():
    models = [_model() for _ in range(2)]
    opts = [DeMo(m.parameters(), lr=LR) for m in models]
    before = copy.deepcopy(models[0])
    for r, (m, o) in enumerate(zip(models, opts)):
        o.zero_grad(set_to_none=True)
        _loss(m, *_batch(Net, r, 0)).backward()
    models[0].fc3.bias.grad = None           # rank 0 has no gradient for it
    for m in models:
        m.ln.weight.grad = None              # nobody has one for this one
    gathered = torch.stack([o.encode() for o in opts])
    mask = pl.unpack_mask(gathered[:, :pl.mask_nbytes(8)], 8)
    assert mask.sum().item() == 2 * 8 - 3
    for o in opts:
        o.apply(gathered)
    assert torch.equal(models[0].ln.weight, before.ln.weight)       # skipped everywhere
    assert not torch.equal(models[0].fc3.bias, before.fc3.bias)     # moved by rank 1's part
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)
    assert opts[0].momentum(models[0].fc3.bias).abs().sum() == 0  # rank 0 accumulated nothing
    assert opts[1].momentum(models[1].fc3.bias).abs().sum() > 0


def test_grad_is_left_as_the_callers_gradient():
    m = _model()
    opt = DeMo(m.parameters(), lr=LR)
    _loss(m, *_batch(Net, 0, 0)).backward()
    before = [p.grad.clone() for p in m.parameters()]
    opt.step()
    assert all(torch.equal(a, p.grad) for a, p in zip(before, m.parameters()))


def test_closure_runs_after_the_communication_and_its_value_is_returned():
    m = _model()
    opt = DeMo(m.parameters(), lr=LR)
    _loss(m, *_batch(Net, 0, 0)).backward()
    seen = []
    out = opt.step(lambda: seen.append(opt.last_payload_nbytes) or 1.5)
    assert out == 1.5 and seen == [opt.payload_nbytes()]


# ------------------------------------------------------------------- payloads

def test_twelve_bit_indices_round_trip_every_position():
    idx = torch.arange(4096).flip(0)
    for n in (4096, 4095):
        packed = pl.pack_indices(idx[:n], "compact", 4096)
        assert packed.numel() == 3 * ((n + 1) // 2)
        assert torch.equal(pl.unpack_indices(packed, n, "compact", 4096), idx[:n])
    wide = torch.tensor([0, 5000, 65535])
    assert torch.equal(pl.unpack_indices(pl.pack_indices(wide, "compact", 65536), 3, "compact", 65536), wide)
    assert torch.equal(pl.unpack_indices(pl.pack_indices(wide, "reference", 65536), 3, "reference", 65536), wide)


def test_mask_round_trip():
    present = [True, False, True, True, False, False, False, True, True]
    buf = pl.pack_mask(present)
    assert buf.numel() == 2
    assert pl.unpack_mask(buf[None], 9)[0].tolist() == present


def test_compact_payload_is_at_most_half_the_reference_bytes():
    from distlab.models import build_model

    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(0)
        gpt = build_model("gpt", n_layer=2, d_model=128, n_head=4, block_size=64).to(dtype)
        ref = DeMo(gpt.parameters(), lr=LR)
        compact = DeMo(gpt.parameters(), lr=LR, encoding="compact")
        assert ref.payload_nbytes() - ref.reference_payload_nbytes() == pl.mask_nbytes(len(list(gpt.parameters())))
        assert compact.payload_nbytes() <= 0.5 * ref.reference_payload_nbytes()
        # and the buffer encode() returns is exactly that long
        x = torch.randint(0, 256, (2, 64))
        gpt(x).sum().backward()
        assert compact.encode().numel() == compact.payload_nbytes()


@pytest.mark.parametrize("value_dtype", ["bfloat16", "float16"])
def test_compact_encoding_keeps_rounding_error_in_the_momentum(value_dtype):
    """What leaves the momentum is exactly what the receivers decode."""
    m = _model()
    opt = DeMo(m.parameters(), lr=LR, encoding="compact", value_dtype=value_dtype)
    _loss(m, *_batch(Net, 0, 0)).backward()
    grads = {p: p.grad.clone() for p in m.parameters()}
    buf = opt.encode()
    for tg in opt.layout:
        count = tg.tiles * tg.k
        idx = pl.unpack_indices(buf[None, tg.idx_off:tg.idx_off + tg.idx_len], count, "compact", tg.numel)[0]
        val = pl.unpack_values(buf[None, tg.val_off:tg.val_off + tg.val_len], count, "compact", tg.dtype,
                               opt.value_dtype)[0]
        sent = torch.zeros(tg.tiles, tg.numel, dtype=tg.dtype).scatter_(-1, idx.view(tg.tiles, -1),
                                                                       val.view(tg.tiles, -1))
        d1 = None if tg.n1 == 1 else dct_matrix(tg.n1, tg.dtype)
        dec = idct2(sent.view(-1, tg.n1, tg.n2), d1, dct_matrix(tg.n2, tg.dtype))
        for mb in tg.members:
            from distlab.techniques.demo.transforms import to_tiles
            d = opt.momentum(mb.param)
            rebuilt = to_tiles(d, tg.n1, tg.n2) + dec[mb.start:mb.start + mb.tiles].view(
                -1, to_tiles(d, tg.n1, tg.n2).shape[1], tg.n1, tg.n2)
            assert torch.allclose(rebuilt, to_tiles(LR * grads[mb.param], tg.n1, tg.n2), atol=1e-15)


# ------------------------------------------------------------------ transforms

def test_chunk_is_the_largest_divisor_not_above_the_target():
    assert [chunk_for(n, 64) for n in (64, 128, 96, 67, 1, 50, 200, 1024)] == [64, 64, 48, 1, 1, 50, 50, 64]
    assert all(chunk_for(n, 64) == _chunk(n, 64) for n in range(1, 400))


@pytest.mark.parametrize("n2", [64, 48, 50, 1, 2])
def test_within_tile_positions_split_into_row_and_column_for_any_tile_width(n2):
    """The shift-and-mask split (power-of-two widths) and the division (others) agree with divmod."""
    from distlab.techniques.demo.optim import _TileGroup
    tg = _TileGroup(3, n2, torch.float32, torch.device("cpu"), 1)
    idx = torch.arange(3 * n2, dtype=torch.int64).flip(0).view(3, n2)
    row, col = tg.row_col(idx)
    assert torch.equal(row, idx // n2) and torch.equal(col, idx % n2)


@pytest.mark.parametrize("numel, k", [(4096, 32), (3072, 32), (4096, 1), (1024, 8), (64, 32), (2048, 64),
                                     (4096, 24)])
def test_two_stage_top_k_is_torch_topk_where_values_are_distinct(numel, k):
    """The segmented selection keeps torch.topk's positions in its order (largest first) on rows of
    distinct |c| read as integers, as the step does; tiles too small for it fall back to topk."""
    from distlab.techniques.demo.optim import _segment_length, _top_k
    length = _segment_length(numel, k)
    assert length == (8 if numel >= 64 * k else 0)
    g = torch.Generator().manual_seed(numel + k)
    vals = torch.randn(37, numel, generator=g).abs()
    keys = vals.view(torch.int32)
    want = keys.topk(k, dim=-1, sorted=False).indices
    assert torch.equal(_top_k(keys, k, length), want)


@pytest.mark.parametrize("selection", ["grouped", "topk"])
def test_an_all_zero_tile_sends_k_distinct_positions_and_topk_sends_torchs(selection):
    """A 64 x 64 parameter whose gradient and momentum are zero: every |c| ties.  Either selection
    sends k distinct positions (all zeros); ``selection="topk"`` sends exactly those torch.topk picks
    on the CPU (the reference's choice, which the per-index mean counts as senders)."""
    w = nn.Parameter(torch.zeros(64, 64))
    w.grad = torch.zeros(64, 64)
    opt = DeMo([w], compression_topk=TOPK, selection=selection)
    tg = opt.layout[0]
    sent = opt.encode().unsqueeze(0)
    idx = pl.unpack_indices(sent[:, tg.idx_off:tg.idx_off + tg.idx_len], TOPK, opt.encoding, 4096).view(-1)
    assert idx.unique().numel() == TOPK
    if selection == "topk":
        assert torch.equal(idx, torch.zeros(1, 4096).view(torch.int32).topk(TOPK, dim=-1, sorted=False).indices[0])
    opt.apply(sent)
    assert torch.equal(w.detach(), torch.zeros(64, 64))  # zeros sent: no update


def test_two_stage_top_k_keeps_the_k_largest_values_among_ties():
    """Rows with equal values at the k-th place (an all-zero tile, a few distinct levels, a single
    large value among zeros): k distinct positions whose values are the row's k largest."""
    from distlab.techniques.demo.optim import _segment_length, _top_k
    numel, k = 4096, 32
    length = _segment_length(numel, k)
    assert length == 8
    rows = [torch.zeros(numel), torch.randint(0, 3, (numel,)).float(),
            torch.zeros(numel).index_fill_(0, torch.tensor([4095]), 5.0),
            torch.randn(numel).abs().round(decimals=1)]
    keys = torch.stack(rows).view(torch.int32)
    got = _top_k(keys, k, length)
    want = keys.topk(k, dim=-1).values
    for r in range(len(rows)):
        assert got[r].unique().numel() == k
        assert torch.equal(keys[r][got[r]].sort(descending=True).values, want[r].sort(descending=True).values)


def test_batched_dct_matches_scipy_and_inverts():
    x = torch.randn(5, 8, 6, dtype=torch.float64)
    d1, d2 = dct_matrix(8, torch.float64), dct_matrix(6, torch.float64)
    c = dct2(x, d1, d2)
    want = scipy.fft.dctn(x.numpy(), type=2, norm="ortho", axes=(1, 2))
    assert np.abs(c.numpy() - want).max() < 1e-12
    assert torch.allclose(idct2(c, d1, d2), x, atol=1e-12)


@pytest.mark.parametrize("kw, key", [({"lr": 0.0}, "lr"), ({"compression_topk": 0}, "compression_topk"),
                                      ({"compression_decay": 1.0}, "compression_decay"),
                                      ({"encoding": "zip"}, "encoding"), ({"value_dtype": "int8"}, "value_dtype"),
                                      ({"compression_chunk": -1}, "compression_chunk"),
                                      ({"selection": "heap"}, "selection"),
                                      ({"lr": float("inf")}, "lr"), ({"lr": float("nan")}, "lr"),
                                      ({"weight_decay": float("nan")}, "weight_decay"),
                                      ({"weight_decay": float("inf")}, "weight_decay"),
                                      ({"nonfinite": "ignore"}, "nonfinite")])
def test_bad_arguments_are_refused_by_name(kw, key):
    with pytest.raises(ValueError, match=key):
        DeMo(_model().parameters(), **{"lr": LR, **kw})


def test_apply_refuses_a_payload_of_another_layout():
    opt = DeMo(_model().parameters(), lr=LR)
    with pytest.raises(ValueError, match="payloads"):
        opt.apply(torch.zeros(2, opt.payload_nbytes() + 1, dtype=torch.uint8))


def test_a_parameter_without_a_gradient_keeps_its_momentum_unchanged():
    """Skipping is not decaying: the momentum of a parameter with ``grad=None``
    is neither decayed nor sent at that step (it is held as DCT coefficients)."""
    m = _model()
    opt = DeMo(m.parameters(), lr=LR)
    _loss(m, *_batch(Net, 0, 0)).backward()
    opt.step()
    held = opt.momentum(m.fc3.weight).clone()
    assert held.abs().sum() > 0
    opt.zero_grad(set_to_none=True)
    _loss(m, *_batch(Net, 0, 1)).backward()
    m.fc3.weight.grad = None
    before = m.fc3.weight.detach().clone()
    opt.step()
    assert torch.equal(opt.momentum(m.fc3.weight), held)
    assert torch.equal(m.fc3.weight, before)   # nobody sent it
    assert opt.state[m.fc3.weight]["step"] == 1


def test_param_groups_with_their_own_rates_follow_the_equations():
    """Two param groups with different learning rates, mixed within the optimizer's buffers
    (fc1.bias shares 1 x 1 tiles with the LayerNorm, fc3.bias 1 x 64 tiles with fc1.weight):
    each tensor moves at its own group's rate."""
    fast = {"fc1.bias", "fc3.bias", "fc3.weight"}
    rates = {n: (3 * LR if n in fast else LR) for n, _ in _model().named_parameters()}
    ref = loop_reference(_np_params(_model()), _grads_fn(Net), 2, 8, lr=rates)

    def groups(m):
        named = dict(m.named_parameters())
        return [{"params": [p for n, p in named.items() if n not in fast]},
                {"params": [named[n] for n in sorted(fast)], "lr": 3 * LR}]

    models, _ = run_replicas(Net, 2, 8, params_of=groups)
    assert _max_diff(models[0], ref) < 1e-9
    assert _max_diff(models[1], ref) < 1e-9


def test_a_checkpoint_with_the_momentum_tile_by_tile_still_loads():
    """Checkpoints written before the coefficients were kept in each parameter's layout hold
    ``delta_dct`` as ``(tiles, n1, n2)``; loading one rebuilds the same momentum."""
    m = _model()
    opt = DeMo(m.parameters(), lr=LR)
    _train(m, opt, range(3))
    sd = copy.deepcopy(opt.state_dict())
    w = m.fc3.weight                                   # 64 x 96: 2 tiles of 64 x 48
    i = [id(p) for p in m.parameters()].index(id(w))
    coeff = sd["state"][i]["delta_dct"]
    assert coeff.shape == (64, 96)
    sd["state"][i]["delta_dct"] = coeff.view(1, 64, 2, 48).permute(0, 2, 1, 3).reshape(2, 64, 48).clone()
    m2 = copy.deepcopy(m)
    opt2 = DeMo(m2.parameters(), lr=LR)
    opt2.load_state_dict(sd)
    assert torch.equal(opt2.momentum(m2.fc3.weight), opt.momentum(w))
    _train(m, opt, range(3, 4))
    _train(m2, opt2, range(3, 4))
    for a, b in zip(m.parameters(), m2.parameters()):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ non-finite state

def _poisoned_step(world: int, bad_rank: int, **kw):
    """Two clean steps, then one where rank ``bad_rank``'s first gradient holds a NaN and an inf."""
    models, opts = run_replicas(Net, world, 2, **kw)
    for r, (m, o) in enumerate(zip(models, opts)):
        o.zero_grad()
        _loss(m, *_batch(Net, r, 2)).backward()
        if r == bad_rank:
            g = next(m.parameters()).grad
            g.view(-1)[0], g.view(-1)[1] = float("nan"), float("inf")
    return models, opts


def _snapshot(models, opts):
    return ([p.detach().clone() for m in models for p in m.parameters()],
            [o.state[p]["delta_dct"].clone() for m, o in zip(models, opts) for p in m.parameters()])


def test_a_non_finite_gradient_raises_by_default_and_leaves_everything_as_it_was():
    models, opts = _poisoned_step(1, 0)
    params, momenta = _snapshot(models, opts)
    with pytest.raises(FloatingPointError, match=r"non-finite gradient .* parameter\(s\) 0 .*nonfinite='skip'"):
        opts[0].step()
    after_p, after_m = _snapshot(models, opts)
    assert all(torch.equal(a, b) for a, b in zip(params, after_p))
    assert all(torch.equal(a, b) for a, b in zip(momenta, after_m))
    # the next clean step trains on: finite momentum, moved parameters
    opts[0].zero_grad()
    _loss(models[0], *_batch(Net, 0, 3)).backward()
    opts[0].step()
    _, momenta = _snapshot(models, opts)
    assert all(torch.isfinite(d).all() for d in momenta)
    assert not all(torch.equal(a, b) for a, b in zip(after_p, [p for p in models[0].parameters()]))


def test_skip_sits_the_worker_out_the_others_still_update_and_nothing_is_poisoned():
    models, opts = _poisoned_step(2, 1, nonfinite="skip")
    params, momenta = _snapshot(models, opts)
    half = len(momenta) // 2
    gathered = torch.stack([o.encode() for o in opts])
    for o in opts:
        o.apply(gathered)
    after_p, after_m = _snapshot(models, opts)
    assert all(torch.equal(a, b) for a, b in zip(momenta[half:], after_m[half:]))  # rank 1 kept its momentum
    assert not all(torch.equal(a, b) for a, b in zip(momenta[:half], after_m[:half]))  # rank 0 stepped
    assert all(torch.isfinite(t).all() for t in after_p + after_m)
    assert not all(torch.equal(a, b) for a, b in zip(params, after_p))  # rank 0's payload moved the weights
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)  # the ranks stay identical


def test_skip_at_world_size_one_changes_nothing():
    models, opts = _poisoned_step(1, 0, nonfinite="skip")
    params, momenta = _snapshot(models, opts)
    opts[0].step()
    after_p, after_m = _snapshot(models, opts)
    assert all(torch.equal(a, b) for a, b in zip(params + momenta, after_p + after_m))


def test_complex_parameters_are_refused_and_zero_size_ones_left_alone():
    with pytest.raises(ValueError, match="complex128.*view_as_real"):
        DeMo([nn.Parameter(torch.zeros(4, 4, dtype=torch.complex128))], lr=LR)
    empty, w = nn.Parameter(torch.zeros(0, 8)), nn.Parameter(torch.ones(8, 8))
    opt = DeMo([empty, w], lr=LR, compression_chunk=4, compression_topk=2)
    (w.sum() + empty.sum()).backward()
    opt.step()
    assert empty.shape == (0, 8) and not torch.equal(w, torch.ones(8, 8))
    with pytest.raises(ValueError, match="param group 1: lr"):
        opt.add_param_group({"params": [nn.Parameter(torch.ones(2))], "lr": float("inf")})
