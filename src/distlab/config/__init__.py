"""The configuration and the run spec, checked before any job starts (torch-free).

* :mod:`~distlab.config.checks` checks the whole configuration in one pass when the
  Snakefile is parsed (duplicate keys, the JSON-Schema with strict types, count limits, the
  claims file, each paper's own ``spec.check``) and lists every problem, one line each.
* :mod:`~distlab.config.specs` is the run spec a training job receives (everything that
  changes its results, validated against the trainer's schema) and the run-time settings
  that change no number.
* :mod:`~distlab.config.bounds` checks memory against the machine or the SLURM nodes, and
  data-set paths, with the configuration.
* :mod:`~distlab.config.yamlio` reads YAML refusing a duplicated key.
"""
