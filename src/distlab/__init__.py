"""distlab: reproducible experiments on distributed training.

The library the Snakemake rules call.  Sub-packages are split by concern:
``data`` (preparation and loading), ``models`` (registry), ``runtime`` (the
simulated cluster and the torch.distributed backend behind one API), ``pgc``
(Pipelined Gradient Coding), and the analysis modules ``stats``, ``plots``,
``tables`` and ``scorecard``.
"""

__version__ = "0.1.0"
