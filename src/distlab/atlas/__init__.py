"""The atlas: every data-parallel technique on one byte-level LM task and one cluster model.

A study package above the paper packages; its techniques are the shared package's
(``distlab.techniques``: every technique written once, behind one step interface), it
imports no paper package, and nothing imports it but the CLI and the GPU tier.  Modules:
``spec`` (torch-free schema and checks), ``clock`` (the cluster clock,
vectorised over cells), ``record`` (what a run writes), ``replay`` (time to
target under any network and straggler model), ``grid`` (the map),
``query`` (a user's own cluster), ``train`` (simulated and gloo drivers),
``workflow`` (spec builders), ``figures``, ``cli``.
"""
