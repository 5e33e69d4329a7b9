"""What a run writes and how the workflow reads it back.

* :mod:`~distlab.results.runs`: a run directory (``metrics.csv``, ``manifest.json`` last,
  checkpoints while it runs) and how it survives being killed.
* :mod:`~distlab.results.summarize`: run directories to a per-step table and a run-level
  table, the only input of figures, tables and the scorecard.
* :mod:`~distlab.results.tables`: CSV and Markdown tables, every writer atomic.
"""
