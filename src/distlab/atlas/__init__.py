"""The atlas: every data-parallel technique on one byte-level LM task and one cluster model.

A study package above the paper packages (it imports ``distlab.demo.methods``,
``distlab.techniques.demo.optim`` and ``distlab.pgc.coding``; nothing imports it but the
CLI).  Modules: ``spec`` (torch-free schema and checks), ``techniques`` (one
interface, every technique written once), ``clock`` (the cluster clock,
vectorised over cells), ``record`` (what a run writes), ``replay`` (time to
target under any network and straggler model), ``grid`` (the map),
``query`` (a user's own cluster), ``train`` (simulated and gloo drivers),
``workflow`` (spec builders), ``figures``, ``cli``.
"""
