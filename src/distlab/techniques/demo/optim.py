"""DeMo, decoupled momentum optimization (Peng, Quesnelle, Kingma, arXiv 2411.19870).

Per parameter ``p`` with gradient ``g``, on every worker, each step:

    p     <- p * (1 - lr * wd)                  (decoupled weight decay)
    delta <- decay * delta + lr * g             (local momentum)
    C     <- DCT of delta over tiles            (see transforms)
    keep the top-k coefficients of |C| in each tile
    delta <- delta - IDCT(kept)                 (what is sent leaves the momentum)
    all-gather the kept (index, value) pairs of every worker
    u     <- IDCT(at each index, the mean over the workers that sent it)
    p     <- p - lr * sign(u)

The step is split in two phases that both backends share:

* :meth:`DeMo.encode` does the local part and returns this worker's payload
  (one byte buffer for all parameters, see :mod:`distlab.techniques.demo.payload`);
* :meth:`DeMo.apply` takes every worker's payload, stacked ``(N, nbytes)``,
  and updates the parameters.

:meth:`DeMo.step` runs ``encode``, one all-gather over torch.distributed
(or none at world size 1), then ``apply``.  The simulated cluster calls the
two phases itself and gathers in memory.

The momentum is kept in DCT coefficients.  The tiled DCT is linear and
orthonormal, so ``DCT(decay * delta + lr * g) = decay * DCT(delta) + lr *
DCT(g)``, and removing what was sent is subtracting the sent coefficients at
their indices.  Holding ``delta`` transformed, a step needs two transforms
(the gradient's DCT and the inverse DCT of the mean) where the equations as
written need three (the momentum's DCT, the inverse DCT of what leaves it,
the inverse DCT of the mean); the parameters it produces are the same up to
rounding (tested against a loop statement of the equations to 1e-9 in
float64).  :meth:`DeMo.momentum` returns ``delta`` in the parameter's shape.

Beyond the reference: ``state_dict()`` holds the momentum (``delta_dct``, its
DCT coefficients; a checkpoint resumes bit for bit); a parameter whose ``grad`` is None is skipped on that worker
(the others' contributions still update it, so ranks stay identical); the
caller's ``.grad`` is left untouched; 0-D and >= 3-D parameters work (see
:mod:`distlab.techniques.demo.transforms`); all parameters travel in one all-gather; a
compact encoding (12-bit indices, bf16/fp16 values); a non-finite gradient never enters the
momentum: the step raises (``nonfinite="raise"``, the default, as a ``GradScaler`` user expects
to hear of it) or this worker sits the step out (``nonfinite="skip"``: it sends nothing, its
momentum is kept, the others' contributions still update the parameters, on the device with no
host synchronisation); non-finite rates and complex parameters are refused at construction, and
zero-size parameters are left alone (nothing to update).

Where the work goes.  The coefficients are kept in each parameter's own
``(rows, cols)`` layout (tile ``(a, b)`` at rows ``a*n1..``, columns
``b*n2..``), parameters of one tile shape in one buffer, those of one column
count consecutive in it (a *column class*).  A step dispatches a fixed
sequence of ops, whatever the number of parameters or tiles (tested): one
``_foreach_copy_`` stages every gradient; per tile group the row side of the
transform is one matmul over every ``n2``-long row of the group, the column
side one batched matmul a column class over its blocks of ``n1`` rows, fused
with the momentum update (``baddbmm_`` with ``beta = decay``); ``|c|`` goes
into a tile-by-tile scratch in one copy a column class (the top-k needs each
tile contiguous); one top-k, one gather of the kept values, one scatter that
removes them.  Kept positions are mapped back to offsets in the coefficient
buffer (``_TileGroup.flat_index``).  :meth:`apply` receives ``E = N k``
coefficients a tile; while that is small against the tile's sides (``E <= n1
+ n2``: up to four workers at k = 32 on 64 x 64 tiles) the inverse DCT is
summed entry by entry, ``share * outer(D1[row], D2[col])``, as one batched
matmul ``(n1, E) @ (E, n2)`` a tile over gathered basis rows, in
``min(tiles, 8)`` chunks of tiles with the sign taken on each; otherwise the
shares are summed per index into a scratch buffer that is transformed
densely.  Weight decay and the sign step are foreach ops over views of the
parameters made once per layout (a parameter whose storage is replaced needs
a fresh optimizer or ``load_state_dict``).  Top-level aten ops of one step
(torch profiler, CPU, world size 1): 227 on a 12 x 768 GPT (85 M parameters,
148 tensors), 127 on a 16 x 1024 OLMo (269 M); the step has no graph break
under ``torch.compile``.

The top-k runs in two stages (:func:`_top_k`, 0.69x one ``torch.topk`` a
tile on 64 x 64 tiles at k = 32): the same coefficients, and where they are
distinct the same positions in the same order; ``selection="topk"`` keeps one
``torch.topk`` a tile for the reference's choice among equal ``|c|``.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.distributed as dist
from torch.optim import Optimizer

from ...config.specs import SpecError
from . import payload as pl
from .optim_tiles import (_ORDER_AS, _as_matrix_layout, _Class, _column_classes,  # noqa: F401
                          _forward, _gather_into, _inverse, _inverse_dense, _inverse_sparse, _Member, _segment_length,
                          _sparse_pays, _TileGroup, _tiles_of, _top_k, sparse_scratch)
from .transforms import clamp_topk, dct_matrix, matrix_shape, tile_shape

def _check_rates(lr, weight_decay, who: str) -> None:
    """A learning rate finite and > 0, a weight decay finite and >= 0 (NaN fails both)."""
    for key, v, least in (("lr", lr, "> 0"), ("weight_decay", weight_decay, ">= 0")):
        try:
            x = float(v)
        except (TypeError, ValueError, RuntimeError):
            x = math.nan
        if not (math.isfinite(x) and (x > 0 if key == "lr" else x >= 0)):
            raise ValueError(f"{who}: {key} must be a finite number {least}, got {v!r}")


# the tile layout and the kernels on tiles live in optim_tiles
MEANS = ("senders", "all")
SELECTIONS = ("grouped", "topk")
NONFINITE = ("raise", "skip")


class NonFiniteGradient(FloatingPointError, SpecError):
    """A gradient holding a NaN or an infinity under ``nonfinite="raise"``: a FloatingPointError
    (what a GradScaler user catches) and, for distlab's commands, a user error of one line."""


class DeMo(Optimizer):
    """DeMo as a ``torch.optim.Optimizer``: ``loss.backward(); opt.step()`` on every rank.

    Arguments named as in the reference: ``lr``, ``compression_decay`` (the
    momentum decay), ``compression_topk`` (coefficients kept per tile),
    ``compression_chunk`` (target tile side), ``weight_decay`` (decoupled, per
    param group), ``process_group`` (None: the default group; world size 1
    when torch.distributed is not initialized).  Ours:

    * ``encoding``: ``"reference"`` (int64 indices, values in the parameter's
      dtype) or ``"compact"`` (12-bit indices, ``value_dtype`` values);
    * ``value_dtype``: ``"bfloat16"`` or ``"float16"`` for the compact encoding;
    * ``bucket_cap_bytes``: split the payload into all-gathers of at most this
      many bytes (None: one all-gather a step);
    * ``ledger``: a :class:`distlab.runtime.ledger.ByteLedger` charged with
      every all-gather of :meth:`step`;
    * ``mean``: ``"senders"`` (the reference: at each index, the mean over the
      workers that sent it) or ``"all"`` (a plain mean over all N workers,
      Algorithm 1's "synchronize" read literally; the ablation);
    * ``selection``: ``"grouped"`` (the top-k in two stages, see :func:`_top_k`:
      the same coefficients, 0.69x the time on 64 x 64 tiles) or ``"topk"``
      (one ``torch.topk`` a tile: among equal ``|c|`` at the k-th place, the
      reference's choice on the CPU, e.g. which zeros an all-zero tile sends,
      which the per-index mean counts as senders);
    * ``nonfinite``: a gradient with a NaN or an infinity ``"raise"``s
      ``FloatingPointError`` naming the parameters (the default; the momentum and
      parameters untouched) or makes this worker ``"skip"`` the step (it sends
      nothing and keeps its momentum; decided on the device, no host read).

    Use in a data-parallel script.  ``step()`` communicates (one all-gather of
    every rank's compressed momentum); the gradients must stay each rank's
    own, so nothing may all-reduce them during the backward::

        model = build().to(device)          # same initial weights on every rank
        opt = DeMo(model.parameters(), lr=1e-3)
        for x, y in loader:                 # each rank its own shard
            opt.zero_grad()
            loss_fn(model(x), y).backward() # no DDP wrapper: gradients stay local
            opt.step()

    With a ``DistributedDataParallel``-wrapped model, run the forward and
    backward inside ``ddp_model.no_sync()``; otherwise DDP all-reduces every
    gradient on top of DeMo's all-gathers (the full dense traffic DeMo
    exists to avoid).  ``examples/demo_ddp.py`` runs both on torchrun.
    """

    def __init__(self, params, lr: float = 1e-3, compression_decay: float = 0.999,
                 compression_topk: int = 32, compression_chunk: int = 64, weight_decay: float = 0.0,
                 process_group: dist.ProcessGroup | None = None, *, encoding: str = "reference",
                 value_dtype: str = "bfloat16", bucket_cap_bytes: int | None = None,
                 ledger=None, mean: str = "senders", selection: str = "grouped",
                 nonfinite: str = "raise") -> None:
        _check_rates(lr, weight_decay, "DeMo")
        if compression_topk <= 0:
            raise ValueError(f"DeMo: compression_topk must be positive, got {compression_topk}")
        if compression_chunk <= 0:
            raise ValueError(f"DeMo: compression_chunk must be positive, got {compression_chunk}")
        if not 0 <= compression_decay < 1:
            raise ValueError(f"DeMo: compression_decay must be in [0, 1), got {compression_decay}")
        pl.encoding_of(encoding)  # an encoding no entry declares is refused by name
        if value_dtype not in pl.VALUE_DTYPES:
            raise ValueError(f"DeMo: value_dtype must be one of {sorted(pl.VALUE_DTYPES)}, got {value_dtype!r}")
        if mean not in MEANS:
            raise ValueError(f"DeMo: mean must be one of {MEANS}, got {mean!r}")
        if selection not in SELECTIONS:
            raise ValueError(f"DeMo: selection must be one of {SELECTIONS}, got {selection!r}")
        if nonfinite not in NONFINITE:
            raise ValueError(f"DeMo: nonfinite must be one of {NONFINITE}, got {nonfinite!r}")
        if bucket_cap_bytes is not None and bucket_cap_bytes < 1:
            raise ValueError(f"DeMo: bucket_cap_bytes must be >= 1 or None, got {bucket_cap_bytes}")
        self.nonfinite = nonfinite
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))
        self.compression_decay = float(compression_decay)
        self.compression_topk = int(compression_topk)
        self.compression_chunk = int(compression_chunk)
        self.process_group = process_group
        self.encoding = encoding
        self.value_dtype = pl.VALUE_DTYPES[value_dtype]
        self.bucket_cap_bytes = bucket_cap_bytes
        self.ledger = ledger
        self.mean = mean
        self.selection = selection
        self._masks: dict[tuple[bool, ...], torch.Tensor] = {}
        self._layout: list[_TileGroup] | None = None
        self._members: list[_Member] = []
        self.last_payload_nbytes = 0

    # ------------------------------------------------------------------ layout
    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        _check_rates(group["lr"], group["weight_decay"], f"DeMo param group {len(self.param_groups) - 1}")
        for i, p in enumerate(group["params"]):
            if p.is_complex():
                raise ValueError(f"DeMo: parameter {i} of param group {len(self.param_groups) - 1} is {p.dtype}; "
                                 "the DCT and the sign step are real: optimize torch.view_as_real(p) "
                                 "or leave it to another optimizer")
        self._layout = None  # rebuilt at the next step

    @torch.compiler.disable  # built eagerly once (also under torch.compile): its buffers and views are
    def _build_layout(self) -> list[_TileGroup]:  # then a compiled step's inputs
        groups: dict[tuple, _TileGroup] = {}
        found: list[tuple] = []
        for g in self.param_groups:
            for p in g["params"]:
                if not p.requires_grad or p.numel() == 0:  # zero-size: nothing to update, nothing sent
                    continue
                n1, n2 = tile_shape(p.shape, self.compression_chunk)
                rows, cols = matrix_shape(p.shape)
                key = (n1, n2, p.dtype, p.device)
                if key not in groups:
                    groups[key] = _TileGroup(n1, n2, p.dtype, p.device,
                                             clamp_topk(self.compression_topk, n1 * n2))
                found.append((key, p, g, rows, cols))
        members: list[_Member] = []
        for key, p, g, rows, cols in found:  # the payload's mask bit: the order of the param groups
            members.append(_Member(len(members), p, g, rows, cols, 0, 0, 0))
        for key, tg in groups.items():
            # in the group's buffers, members of one column count are consecutive (a stable sort):
            # each such class is one batch of (n1, cols) blocks for the column side of the transform
            mine = [m for (k, *_), m in zip(found, members) if k == key]
            if tg.n1 > 1:
                mine.sort(key=lambda m: m.cols)
            for m in mine:
                m.tiles = m.rows * m.cols // (tg.n1 * tg.n2)
                m.start, m.offset = tg.tiles, tg.elements
                tg.members.append(m)
                tg.tiles += m.tiles
                tg.elements += m.rows * m.cols
        off = pl.mask_nbytes(len(members))
        for tg in groups.values():
            count = tg.tiles * tg.k
            tg.idx_off, tg.idx_len = off, pl.index_nbytes(count, self.encoding, tg.numel)
            off += tg.idx_len
            tg.val_off = off
            tg.val_len = pl.value_nbytes(count, self.encoding, tg.dtype, self.value_dtype)
            off += tg.val_len
        for tg in groups.values():
            # one coefficient buffer per tile group; each member's state holds a (rows, cols) view of
            # it.  A momentum already in the state (a loaded checkpoint, or a layout rebuilt after
            # add_param_group) is carried over.
            tg.coeff = torch.zeros(tg.elements, dtype=tg.dtype, device=tg.device)
            tg.work = torch.empty_like(tg.coeff) if tg.n1 > 1 else None
            # zeros, not empty: a parameter without a gradient leaves its span as staged, and the
            # non-finite check reads the whole buffer
            tg.tiled = torch.zeros((tg.tiles, tg.numel), dtype=tg.dtype, device=tg.device)
            tg.d2t = dct_matrix(tg.n2, tg.dtype, tg.device).T.contiguous()
            tg.segment = _segment_length(tg.numel, tg.k) if self.selection == "grouped" else 0
            flat_tiled = tg.tiled.view(-1)
            tg.grads = [flat_tiled[m.span].view(m.param.shape) for m in tg.members]
            tg.updates = {"tiled": [], "matrix": []}
            base, stride, owner = [], [], []
            for m in tg.members:
                st = self.state[m.param]
                view = tg.coeff[m.span].view(m.rows, m.cols)
                if "delta_dct" in st:
                    view.copy_(_as_matrix_layout(st["delta_dct"], m, tg))
                st["delta_dct"] = view
                st.setdefault("step", 0)
                for path, pair in self._update_views(m, tg).items():
                    tg.updates[path].append(pair)
                a = torch.arange(m.rows // tg.n1, dtype=torch.int64)[:, None] * (tg.n1 * m.cols)
                b = torch.arange(m.cols // tg.n2, dtype=torch.int64)[None, :] * tg.n2
                base.append((m.offset + a + b).reshape(-1))
                stride.append(torch.full((m.tiles,), m.cols, dtype=torch.int64))
                owner.append(torch.full((m.tiles,), m.index, dtype=torch.int64))
            tg.classes = _column_classes(tg, flat_tiled) if tg.n1 > 1 else []
            tg.owner = torch.cat(owner).to(tg.device)
            tg.base = torch.cat(base).to(tg.device)[:, None]
            tg.stride = torch.cat(stride).to(tg.device)[:, None]
        self._members = members
        self._masks = {}
        self._by_param = {id(m.param): (tg, m) for tg in groups.values() for m in tg.members}
        self._nbytes = off
        self._layout = list(groups.values())
        self._grads_to = [v for tg in self._layout for v in tg.grads]
        self._grads_of = [m.param for tg in self._layout for m in tg.members]
        return self._layout

    def _update_views(self, m: _Member, tg: _TileGroup) -> dict:
        """Per apply path, the (parameter view, update view) pair of member ``m`` that the sign
        step adds (``"tiled"``: tile by tile; ``"matrix"``: the parameter's (rows, cols) layout).
        :class:`distlab.techniques.demo.fsdp.ShardedDeMo` replaces it (a rank holds a shard)."""
        pm = m.param.detach().view(m.rows, m.cols)
        return {"tiled": (_tiles_of(pm, m, tg),
                          tg.tiled[m.start:m.start + m.tiles].view(m.rows // tg.n1, m.cols // tg.n2, tg.n1, tg.n2)),
                "matrix": (pm, tg.tiled.view(-1)[m.span].view(m.rows, m.cols))}

    def _grad(self, p: torch.Tensor) -> torch.Tensor | None:
        """This worker's own gradient of ``p`` (``p.grad``; a sharded model keeps it elsewhere)."""
        return p.grad

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._layout = None  # the next step copies the loaded momentum into fresh buffers

    def momentum(self, p: torch.Tensor) -> torch.Tensor:
        """``delta`` of parameter ``p`` in the parameter's shape (the inverse DCT of its state)."""
        self.layout
        if id(p) not in self._by_param:
            raise KeyError("DeMo.momentum: not a parameter of this optimizer")
        tg, m = self._by_param[id(p)]
        out = torch.empty(m.rows * m.cols, dtype=tg.dtype, device=tg.device)
        _inverse(tg.coeff[m.span], out, torch.empty_like(out), m, tg)
        return out.view(p.shape)

    @property
    def layout(self) -> list[_TileGroup]:
        return self._layout if self._layout is not None else self._build_layout()

    @torch.compiler.disable
    def prepare(self, workers: int = 1) -> None:
        """Make now, eagerly, what a step would make on first use: the layout, the mask of a
        step where every parameter has a gradient, the DCT bases, and apply's scratch for
        ``workers`` payloads.  A compiled step (``torch.compile(opt.step)``) that made them in its
        first call would find them changed on its second and compile again."""
        layout = self.layout
        if layout:
            self._mask_bytes([True] * len(self._members), layout[0].device)
        for tg in layout:
            dct_matrix(tg.n1, tg.dtype, tg.device), dct_matrix(tg.n2, tg.dtype, tg.device)
            e = workers * tg.k
            if _sparse_pays(tg, e):
                sparse_scratch(tg, e, tg.tiled)
            if workers > 1 and self.mean != "all" and tg.hits is None:
                tg.hits = torch.zeros((tg.tiles, tg.numel), dtype=torch.int32, device=tg.device)

    def payload_nbytes(self) -> int:
        """Bytes of one worker's payload (the all-gather's per-worker buffer)."""
        self.layout
        return self._nbytes

    def coefficients_per_step(self) -> int:
        """Kept coefficients a worker sends per step (all parameters)."""
        return sum(tg.tiles * tg.k for tg in self.layout)

    def reference_payload_nbytes(self) -> int:
        """What the reference implementation sends per worker per step for these
        parameters: int64 indices and values in the parameter's dtype, no mask."""
        return sum(tg.tiles * tg.k * (8 + torch.empty((), dtype=tg.dtype).element_size())
                   for tg in self.layout)

    def world_size(self) -> int:
        if not dist.is_available() or not dist.is_initialized():
            return 1
        return dist.get_world_size(self.process_group)

    # ------------------------------------------------------------------ phases
    @torch.no_grad()
    def encode(self) -> torch.Tensor:
        """Local phase: decay the momentum and add the transformed gradient, keep
        the top-k coefficients per tile, remove what is sent from the momentum;
        return the payload.

        The ops it dispatches do not grow with the parameters: one copy stages every gradient
        (``_foreach_copy_``), then per tile group a fixed sequence (the transform's products, one
        ``|c|`` copy a column class, the top-k, one gather and one scatter, the packing)."""
        layout = self.layout
        grads = [self._grad(m.param) for m in self._members]
        present = [g is not None for g in grads]
        for m, g in zip(self._members, grads):
            if g is not None and g.is_sparse:
                raise RuntimeError("DeMo does not support sparse gradients")
        own = [self._grad(p) for p in self._grads_of]
        if all(present):
            if self._grads_to:
                torch._foreach_copy_(self._grads_to, own)
        else:
            pairs = [(v, g) for v, g in zip(self._grads_to, own) if g is not None]
            if pairs:
                torch._foreach_copy_([v for v, _ in pairs], [g for _, g in pairs])
        ok = self._finite_staged(layout, grads)
        for m, g in zip(self._members, grads):
            if g is not None:
                self.state[m.param]["step"] += 1
        mask = self._mask_bytes(present, layout[0].device if layout else torch.device("cpu"))
        parts = [mask if ok is None else mask * ok.to(mask.device, torch.uint8)]  # skipped: nothing sent
        for tg in layout:
            idx, val = self._encode_group(tg, present, ok)
            parts.append(pl.pack_indices(idx, self.encoding, tg.numel))
            parts.append(pl.pack_values(val, self.encoding, self.value_dtype))
        out = torch.cat([p.to(parts[-1].device) for p in parts]) if len(parts) > 1 else parts[0]
        if out.numel() != self._nbytes:  # the layout's arithmetic is the ledger's: keep them equal
            raise AssertionError(f"DeMo payload has {out.numel()} bytes, layout says {self._nbytes}")
        self.last_payload_nbytes = out.numel()
        return out

    def _finite_staged(self, layout: list[_TileGroup], grads: list) -> torch.Tensor | None:
        """Whether this worker's staged gradients are all finite: raises FloatingPointError naming
        the parameters (``nonfinite="raise"``, one host read a step, before the momentum is
        touched; in a torch.compile graph, ``torch._assert_async``'s error instead), or returns the verdict as a 0-D device tensor (``"skip"``; None: no parameters).
        The staging buffers outside this step's gradients hold the last step's finite scratch."""
        if not layout:
            return None
        ok = torch.stack([torch.isfinite(tg.tiled).all().to(layout[0].device) for tg in layout]).all()
        if self.nonfinite == "skip":
            for tg in layout:  # a skipped step stages zeros: its payload values are finite zeros
                tg.tiled.masked_fill_(~ok.to(tg.device), 0)
            return ok
        if torch.compiler.is_compiling():  # no host read inside a graph: the device asserts (one graph kept)
            torch._assert_async(ok, "DeMo: non-finite gradient (NaN or inf); the step is refused")
            return None
        if bool(ok):
            return None
        for tg in layout:
            tg.tiled.zero_()  # the next step's check sees only its own gradients
        names = [str(m.index) for m, g in zip(self._members, grads)
                 if g is not None and not bool(torch.isfinite(g).all())]
        raise NonFiniteGradient(f"DeMo: non-finite gradient (NaN or inf) in parameter(s) {', '.join(names)} "
                                 "(in the optimizer's order); the step is refused, the momentum and parameters "
                                 "are unchanged; lower the learning rate, or pass nonfinite='skip' to skip such steps")

    def _mask_bytes(self, present: list[bool], device: torch.device) -> torch.Tensor:
        """The payload's presence mask, on the payload's device; built once per pattern (a host
        list, known without looking at any device tensor), so a step copies nothing to the device."""
        key = tuple(present)
        if key not in self._masks:
            self._masks[key] = pl.pack_mask(present).to(device)
        return self._masks[key]

    def _encode_group(self, tg: _TileGroup, present: list[bool],
                      ok: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        c = tg.coeff
        kept = None if ok is None else c.clone()  # a skipped step (ok False) keeps the momentum as it was
        absent = [m for m in tg.members if not present[m.index]]
        # a member without a gradient keeps its momentum (not decayed): held aside over the transform
        held = [c[m.span].clone() for m in absent]
        rates = [m.group["lr"] for m in tg.members]
        lr = rates[0]
        if any(r != lr for r in rates):  # param groups of their own rates in one tile group: each
            torch._foreach_mul_(tg.grads, rates)  # staged gradient scaled by its rate, the product by 1
            lr = 1.0
        _forward(tg, self.compression_decay, lr)
        if absent:
            torch._foreach_copy_([c[m.span] for m in absent], held)
        if tg.n1 > 1:  # |c| tile by tile, one copy a column class
            for cl in tg.classes:
                torch.abs(cl.tiles_of, out=cl.tiled)
        else:  # the (1, L) layout is the tile layout
            torch.abs(c.view(tg.tiles, tg.numel), out=tg.tiled)
        # |c| has its sign bit clear, so its bits read as a signed integer order like its values
        # (NaN above inf, as topk orders floats); integer top-k is the faster kernel
        keys = tg.tiled.view(_ORDER_AS[tg.dtype]) if tg.dtype in _ORDER_AS else tg.tiled
        idx = _top_k(keys, tg.k, tg.segment)
        flat = tg.flat_index(idx)
        val = c.take(flat)
        if absent:  # absent members send zeros (the mask tells receivers)
            keep = torch.ones(tg.tiles, 1, dtype=tg.dtype, device=tg.device)
            for m in absent:
                keep[m.start:m.start + m.tiles] = 0
            val.mul_(keep)
        val = pl.quantize(val, self.encoding, self.value_dtype)
        c.scatter_add_(0, flat.view(-1), val.view(-1).neg())  # what is sent leaves the momentum
        if kept is not None:
            torch.where(ok.to(tg.device), c, kept, out=c)
        return idx, val

    @torch.no_grad()
    def apply(self, gathered: torch.Tensor) -> None:
        """Global phase: ``gathered`` is every worker's payload, ``(N, nbytes)`` uint8.

        At each index, the mean over the workers that sent it (``mean="senders"``,
        the reference's choice) or over all N workers (``mean="all"``, Algorithm 1's
        "synchronize" read literally); inverse DCT; decoupled weight decay and the
        sign step on every parameter that at least one worker sent.

        No host synchronisation: which parameters were sent is read from the
        payloads on the device and enters the arithmetic as weights (a parameter
        no worker sent gets a zero update and no decay), never as a Python branch."""
        layout = self.layout
        if gathered.dim() != 2 or gathered.shape[1] != self._nbytes or gathered.dtype != torch.uint8:
            raise ValueError(f"DeMo.apply expects (N, {self._nbytes}) uint8 payloads, "
                             f"got {tuple(gathered.shape)} {gathered.dtype}")
        n = gathered.shape[0]
        present = pl.unpack_mask(gathered[:, :pl.mask_nbytes(len(self._members))], len(self._members))
        any_present = present.any(0)                                   # (members,) bool, on the device
        for tg in layout:
            count = tg.tiles * tg.k
            idx = pl.unpack_indices(gathered[:, tg.idx_off:tg.idx_off + tg.idx_len], count,
                                    self.encoding, tg.numel).to(tg.device).view(n, tg.tiles, tg.k)
            val = pl.unpack_values(gathered[:, tg.val_off:tg.val_off + tg.val_len], count,
                                   self.encoding, tg.dtype, self.value_dtype).to(tg.device).view(n, tg.tiles, tg.k)
            # per tile, each worker's entries, worker after worker (the reference's concatenation)
            e = n * tg.k
            idx = idx.permute(1, 0, 2).reshape(tg.tiles, e)
            val = val.permute(1, 0, 2).reshape(tg.tiles, e)
            # w: 1 where the entry's worker sent the entry's parameter (its mask bit), else 0
            w = present.to(tg.device)[:, tg.owner].T.to(tg.dtype)              # (tiles, N)
            w = w.unsqueeze(-1).expand(tg.tiles, n, tg.k).reshape(tg.tiles, e)
            share = val * w  # each entry's share of the mean at its index
            if self.mean == "all":
                share /= n
            elif n > 1:  # divided by how many workers sent that index (one worker: by itself or 1)
                if tg.hits is None:  # scratch kept zero between steps: only the touched positions
                    tg.hits = torch.zeros((tg.tiles, tg.numel), dtype=torch.int32, device=tg.device)
                tg.hits.scatter_add_(-1, idx, w.to(torch.int32))
                share /= tg.hits.gather(-1, idx).clamp_min_(1)
                tg.hits.scatter_(-1, idx, 0)
            upd = tg.tiled  # encode's scratch is free here: it takes the update
            tiled = _sparse_pays(tg, e)
            # its sign; nothing sent: every coefficient is 0, its sign 0, the parameter unchanged
            if tiled:  # tile by tile
                _inverse_sparse(tg, idx, share, upd)
            else:  # in each parameter's layout
                _inverse_dense(tg, idx, share, upd)
                upd.sign_()
            self._step_params(tg, tiled, any_present)

    def _step_params(self, tg: _TileGroup, tiled: bool, any_present: torch.Tensor) -> None:
        """Decoupled weight decay and the sign step of a tile group's parameters, the signs in
        ``tg.tiled`` (tile by tile when ``tiled``, else in each parameter's layout)."""
        decayed, factors = self._decay_factors(tg, any_present)
        if decayed:
            torch._foreach_mul_([m.param for m in decayed], factors)
        views = tg.updates["tiled" if tiled else "matrix"]
        steps: dict[float, tuple[list, list]] = {}  # per learning rate: the parameters, their signs
        for m, (pv, uv) in zip(tg.members, views):
            ps, us = steps.setdefault(m.group["lr"], ([], []))
            ps.append(pv)
            us.append(uv)
        for lr, (ps, us) in steps.items():
            torch._foreach_add_(ps, us, alpha=-lr)

    def _decay_factors(self, tg: _TileGroup, any_present: torch.Tensor) -> tuple[list, list]:
        """The members with weight decay and their factors (0-D tensors on the device): 1 - lr*wd
        where some worker sent the parameter, else 1."""
        decayed = [m for m in tg.members if m.group["weight_decay"] != 0]
        if not decayed:
            return [], []
        key = tuple((m.index, m.group["lr"] * m.group["weight_decay"]) for m in decayed)
        if tg.lrwd != key:  # the device copy of the rates, remade when they change
            tg.lrwd = key
            tg.lrwd_t = torch.tensor([lw for _, lw in key], dtype=tg.dtype).to(tg.device)
            tg.decayed_at = torch.tensor([i for i, _ in key], dtype=torch.int64).to(tg.device)
        factor = 1.0 - tg.lrwd_t * any_present[tg.decayed_at].to(tg.dtype)
        return decayed, list(factor.unbind(0))

    # -------------------------------------------------------------- collective
    def all_gather(self, payload: torch.Tensor) -> torch.Tensor:
        """Every rank's payload, ``(world, nbytes)``, through torch.distributed
        (one all-gather, or one per ``bucket_cap_bytes`` slice)."""
        world = self.world_size()
        if world == 1:
            return payload.unsqueeze(0)
        cap = self.bucket_cap_bytes or payload.numel()
        if cap >= payload.numel():  # one collective straight into the (world, nbytes) result: no stack
            out = torch.empty((world, payload.numel()), dtype=payload.dtype, device=payload.device)
            _gather_into(out, payload.contiguous(), self.process_group)
            if self.ledger is not None:
                self.ledger.all_gather(payload.numel(), world)
            return out
        pieces = []
        for lo in range(0, payload.numel(), cap):
            part = payload[lo:lo + cap].contiguous()
            out = torch.empty((world, part.numel()), dtype=part.dtype, device=part.device)
            _gather_into(out, part, self.process_group)
            if self.ledger is not None:
                self.ledger.all_gather(part.numel(), world)
            pieces.append(out)
        return torch.cat(pieces, dim=1)

    def step(self, closure: Callable[[], float] | None = None):
        """``encode``, all-gather, ``apply``.  As in the reference, a closure
        runs after the communication (with grad enabled); its value is returned."""
        gathered = self.all_gather(self.encode())
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.apply(gathered)
        return loss
