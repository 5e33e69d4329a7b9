"""The shared baseline: synchronous data-parallel SGD (DGD) against single-process SGD, the
reference every paper compares against (docs/runtime.md).  A paper package like the others:
``paper`` (its contract), ``train`` (the trainer), ``spec`` (its config checks), ``workflow``
(the rule file's spec builders), ``figures`` (its figure and table), ``cli`` (its verbs)."""
