"""The data-parallel techniques and their communication layer, each written once.

This package is the one home of what the papers and the atlas share about training one
model on several workers.  Paper packages and the atlas import from here; a paper package
never imports another paper's package for them.

* :mod:`.comm` — the communication layer: one :class:`~distlab.techniques.comm.SimComm`
  contract (the collectives in memory over the local workers of a simulated run) and one
  :class:`~distlab.techniques.comm.DistComm` over torch.distributed, one worker a rank;
* :mod:`.method` — the synchronous methods' contract (:mod:`.methods` builds any by name):
  :mod:`.ddp` (AdamW-DDP), :mod:`.demo.method` (DeMo), :mod:`.powersgd`, :mod:`.diloco`;
* :mod:`.demo` — DeMo's optimizer (:class:`DeMo`, its tiles, payload, transforms, FSDP);
* :mod:`.gradient_codes` — the gradient codes and the ignore-straggler schemes (GC-FR,
  GC-CR, PGC-FR, PGC-CR, IS-SGD, IS-GC; pure numpy) and :mod:`.coded_worker`, a coded
  worker's gradient state and message;
* :mod:`.combinations` — DiLoCo-DeMo and IS-DeMo;
* :mod:`.step` — every technique behind one step interface for a simulated or gloo driver
  (:func:`~.registry.make_technique`);
* :mod:`.catalogue` (torch-free) — every technique declared once, a :mod:`.spec` each (name,
  kind, option sections, builder, label, order, payload model, sweep key), from which the
  schemas, the rules, the tables and the figures read;
* :mod:`.options` (torch-free) — the option sections: each option's default and bounds.

:data:`EVAL_SEED` is the seed of the validation windows a run is evaluated on: one fixed
set of windows for every run of every technique, so that two techniques' validation losses
are measured on the same tokens.

Torch-free at import: :mod:`distlab.techniques.comm` and the techniques import torch, this
module does not.
"""

EVAL_SEED = 12345

__all__ = ["DeMo", "EVAL_SEED"]


def __getattr__(name: str):
    # ``from distlab.techniques import DeMo``: the optimizer imports torch, so it is loaded on
    # first use and this package stays torch-free at import
    if name == "DeMo":
        from .demo.optim import DeMo

        return DeMo
    raise AttributeError(f"module 'distlab.techniques' has no attribute {name!r}")
