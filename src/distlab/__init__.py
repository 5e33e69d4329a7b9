"""distlab: reproducible experiments on distributed training.

The library the Snakemake rules call, through one entry point, ``python -m distlab <verb>``
(:mod:`distlab.cli`).  Shared packages: ``config`` (the configuration and run spec, checked),
``data`` (preparation and loading), ``models``, ``runtime`` (the simulated cluster and the
torch.distributed backend behind one API, the fork server), ``techniques`` (the
data-parallel techniques and their communication layer), ``results`` (run directories and
tables), ``scoring`` (claims, statistics, the scorecard and the write-up), ``plotting``,
``bench`` and ``pipeline`` (what the Snakemake workflow uses).  Paper packages: ``pgc``,
``placement``, ``local``, ``demo``; a study across them: ``atlas``.
"""

__version__ = "0.1.0"
