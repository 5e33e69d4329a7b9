"""DeMo on a model whose parameters FSDP2 shards (``torch.distributed.fsdp.fully_shard``).

DeMo's state is per worker and covers the whole parameter: worker ``q``'s momentum of a tile is
built from ``q``'s own gradient of that tile, and every worker sends the top-k of every tile of its
momentum.  Under FSDP2 a rank holds only its shard of each parameter (dim 0, ``Shard(0)``), and
FSDP reduce-scatters the gradients after the backward, so the optimizer would see the mean
gradient of its shard, not its own gradient of the whole parameter.

:class:`ShardedDeMo` takes each rank's own, whole gradient before that reduce-scatter: while FSDP
has a module's parameters unsharded (a forward pre-hook sees them), a post-accumulate-grad hook
on each unsharded parameter takes its ``.grad`` and sets it to None.  FSDP then finds no gradient
to reduce and skips the reduce-scatter (no dense gradient traffic; the sharded ``.grad`` stays
None).  From there the step is :class:`~distlab.techniques.demo.optim.DeMo`'s: the momentum, the
DCT and the top-k on the full tiles of the whole parameter, one all-gather of every rank's payload,
the decode of the full tiles; only the last act differs: each rank applies the weight decay and
the sign step to the rows of its own shard (a view of the update where the shard's rows lie
contiguously, a copy of the tile rows it covers otherwise).  Every operation on a coefficient is
the unsharded run's, so the trained parameters are bit-equal to it (tested, 2 gloo ranks).

What it costs, per rank, against unsharded DeMo: parameters ``1/W`` (FSDP's saving, plus FSDP's
transient unsharded copies); DeMo's state is *not* sharded: the momentum (its DCT coefficients),
the transform scratch and the held gradient are full size on every rank, as in unsharded DeMo,
because worker ``q``'s momentum is a function of ``q``'s gradient alone.  Sharding that state by
tile would need every rank's dense gradient of a tile at the tile's owner: the reduce-scatter's
traffic that DeMo exists to avoid.  Communication a step: FSDP's all-gathers of the parameters
(forward, and backward when it reshards after the forward), no reduce-scatter, and DeMo's
payload all-gather (the same bytes as unsharded).  Each rank decodes every tile, as unsharded.

Tile-aligned shards, each rank running DeMo on its own tiles only, are not this algorithm: from its
own gradient a rank would build one momentum a tile where DeMo has ``W`` (one per worker), and a
tile's update would be one sender's top-k, not the mean over ``W`` senders.  They are DeMo again
only if the owner of a tile receives every rank's dense gradient of it (an all-to-all as large as
the reduce-scatter) and keeps ``W`` momenta for it: the same state per rank as here (``W`` shards'
worth), dense gradient traffic in place of the compressed all-gather.

A checkpoint: ``state_dict()`` on every rank (each rank's momentum is its own, full size, a plain
tensor); torch.distributed.checkpoint would take it for a replicated tensor and keep one rank's.
"""

from __future__ import annotations

import functools
import math
import weakref

import torch
from torch import nn

from .optim import DeMo
from .optim_tiles import _Member, _TileGroup


def _dtensor_types():
    from torch.distributed.tensor import DTensor, Shard
    return DTensor, Shard


class ShardedDeMo(DeMo):
    """DeMo for a model wrapped by ``fully_shard`` (FSDP2), each rank holding its shards::

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        opt = ShardedDeMo(model, lr=1e-3)          # DeMo's arguments
        for x, y in loader:                        # each rank its own data
            opt.zero_grad()
            loss_fn(model(x), y).backward()         # FSDP reduce-scatters nothing
            opt.step()

    ``params``: the parameters to optimize (tensors or param groups; default every parameter of
    ``model`` that requires a gradient).  Sharded parameters must be FSDP2's ``Shard(0)`` DTensors
    on a 1-D mesh; ``process_group`` defaults to that mesh's group.  Parameters FSDP does not
    manage (plain tensors) are updated whole, from their ``.grad``.  Create the optimizer after
    ``fully_shard`` and before the first forward.
    """

    def __init__(self, model: nn.Module, lr: float = 1e-3, *, params=None, process_group=None, **kw) -> None:
        DTensor, Shard = _dtensor_types()
        if params is None:
            params = [p for p in model.parameters() if p.requires_grad]
        super().__init__(params, lr=lr, process_group=process_group, **kw)
        mine = {id(p) for g in self.param_groups for p in g["params"]}
        self._held: dict[int, torch.Tensor] = {}    # id(sharded param) -> this rank's whole gradient
        self._hooked: dict[int, weakref.ref] = {}    # unsharded parameters already hooked, by id
        self._rows: dict[int, tuple[int, int]] = {}  # id(param) -> rows [lo, hi) of dim 0 on this rank
        mesh = None
        for g in self.param_groups:
            for p in g["params"]:
                if not isinstance(p, DTensor):
                    self._rows[id(p)] = (0, p.shape[0] if p.dim() else 1)
                    continue
                if p.device_mesh.ndim != 1 or tuple(p.placements) != (Shard(0),):
                    raise ValueError(f"ShardedDeMo: needs FSDP2's Shard(0) on a 1-D mesh, got "
                                     f"{tuple(p.placements)} on a {p.device_mesh.ndim}-D mesh")
                if p.dim() == 0:
                    raise ValueError("ShardedDeMo: a 0-D parameter cannot be sharded on dim 0")
                mesh = mesh or p.device_mesh
                if p.device_mesh != mesh:
                    raise ValueError("ShardedDeMo: every sharded parameter must be on one device mesh")
                world, rank, d0 = mesh.size(), mesh.get_local_rank(), p.shape[0]
                chunk = math.ceil(d0 / world)  # FSDP2's torch.chunk of dim 0, empty shards last
                lo = min(rank * chunk, d0)
                self._rows[id(p)] = (lo, min(lo + chunk, d0))
                if p.to_local().shape[0] != self._rows[id(p)][1] - lo:
                    raise ValueError(f"ShardedDeMo: a shard of {tuple(p.shape)} has "
                                     f"{p.to_local().shape[0]} rows on rank {rank}, expected "
                                     f"{self._rows[id(p)][1] - lo}")
        if self.process_group is None and mesh is not None:
            self.process_group = mesh.get_group()
        self._handles = []
        for mod in model.modules():
            names = {n: p for n, p in mod.named_parameters(recurse=False)
                     if id(p) in mine and isinstance(p, DTensor)}
            if names:
                self._handles.append(mod.register_forward_pre_hook(functools.partial(self._catch, names)))

    # ------------------------------------------------------------- gradients
    def _catch(self, names: dict, module: nn.Module, args) -> None:
        """While FSDP has ``module``'s parameters unsharded: hook each unsharded parameter once."""
        for n, sharded in names.items():
            u = module._parameters.get(n)
            if u is None or u is sharded or not u.requires_grad:
                continue  # still sharded (FSDP did not unshard it)
            seen = self._hooked.get(id(u))
            if seen is not None and seen() is u:
                continue  # hooked already (FSDP keeps one unsharded parameter across steps)
            self._hooked[id(u)] = weakref.ref(u)
            u.register_post_accumulate_grad_hook(functools.partial(self._take, id(sharded)))

    def _take(self, key: int, u: torch.Tensor) -> None:
        """This rank's whole gradient of an unsharded parameter: held for the step, and taken away
        from FSDP (a parameter without a gradient is left out of its reduce-scatter)."""
        g = u.grad
        if g is None:
            return
        held = self._held.get(key)
        if held is None:
            self._held[key] = g.detach()
        else:  # a second backward before the step accumulates, as .grad does
            held.add_(g)
        u.grad = None

    def _grad(self, p: torch.Tensor) -> torch.Tensor | None:
        held = self._held.get(id(p))
        if held is not None:
            return held
        DTensor, _ = _dtensor_types()
        if p.grad is not None and isinstance(p, DTensor):
            raise RuntimeError("ShardedDeMo: FSDP reduced a gradient the optimizer did not take "
                               "(was the optimizer created before the first forward?)")
        return p.grad

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drops the held gradients (and plain parameters' ``.grad``)."""
        self._held.clear()
        super().zero_grad(set_to_none=set_to_none)

    # ----------------------------------------------------------- the update
    def _update_views(self, m: _Member, tg: _TileGroup) -> dict:
        return {}  # the shard's views are taken at each step (FSDP may re-seat the local tensors)

    def _local(self, p: torch.Tensor) -> torch.Tensor:
        DTensor, _ = _dtensor_types()
        return p.to_local() if isinstance(p, DTensor) else p.detach()

    def _shard_update(self, m: _Member, tg: _TileGroup, tiled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(this rank's shard of ``m``'s parameter, flat; the signs of its elements, flat)."""
        lo, hi = self._rows[id(m.param)]
        local = self._local(m.param)
        rest = m.rows * m.cols // (m.param.shape[0] if m.param.dim() else 1)
        flo, fhi = lo * rest, hi * rest
        flat = tg.tiled.view(-1)
        if not tiled or tg.n1 == 1:  # the parameter's own element order (one-row tiles: tile order is it)
            at = m.offset if not tiled else m.start * tg.numel
            return local.view(-1), flat[at + flo:at + fhi]
        # tile by tile: the tile rows covering rows [lo, hi), rearranged into rows, the shard's cut
        per = m.cols // tg.n2
        a, b = lo // tg.n1, -(-hi // tg.n1)
        blk = tg.tiled[m.start + a * per:m.start + b * per].view(b - a, per, tg.n1, tg.n2)
        rows = blk.permute(0, 2, 1, 3).reshape((b - a) * tg.n1, m.cols)
        return local.view(-1), rows[lo - a * tg.n1:hi - a * tg.n1].reshape(-1)

    def _step_params(self, tg: _TileGroup, tiled: bool, any_present: torch.Tensor) -> None:
        decayed, factors = self._decay_factors(tg, any_present)
        if decayed:
            torch._foreach_mul_([self._local(m.param) for m in decayed], factors)
        steps: dict[float, tuple[list, list]] = {}
        for m in tg.members:
            pv, uv = self._shard_update(m, tg, tiled)
            if pv.numel():
                ps, us = steps.setdefault(m.group["lr"], ([], []))
                ps.append(pv)
                us.append(uv)
        for lr, (ps, us) in steps.items():
            torch._foreach_add_(ps, us, alpha=-lr)

    def memory_nbytes(self) -> dict[str, int]:
        """What this rank holds, in bytes: its parameter shards (``params_local``) against the
        whole parameters (``params_full``), DeMo's buffers (``optimizer``: the momentum's
        coefficients and the transform and decode scratch, each full size) and the gradients held
        for the next step (``held_gradients``)."""
        local = [self._local(p) for g in self.param_groups for p in g["params"]]
        bufs = [getattr(tg, name) for tg in self.layout
                for name in ("coeff", "work", "tiled", "total", "hits", "basis1", "basis2")]
        return {"params_local": sum(t.numel() * t.element_size() for t in local),
                "params_full": sum(p.numel() * p.element_size() for g in self.param_groups for p in g["params"]),
                "optimizer": sum(t.numel() * t.element_size() for t in bufs if t is not None),
                "held_gradients": sum(t.numel() * t.element_size() for t in self._held.values())}
