"""Local credit assignment for CPU transformers (P3).

Backprop (BP), readout-gradient consensus (RC: sections that learn through a
shared readout whose update is the average of their readout gradients, run
sequentially or in parallel processes) and predictive coding (PC) on the
library's GPT.  See docs/local_learning.md for the design and its reasons.

Modules: :mod:`.model` (sections, readout, data, evaluation), :mod:`.rc`
(BP and RC engines), :mod:`.pc` (PC on a chain of layers), :mod:`.train`
(the trainer ``distlab train --experiment local``), :mod:`.bench`
(throughput, memory, PC cost), :mod:`.nonident`, :mod:`.summary`,
:mod:`.figures`, :mod:`.checks` (config cross-field rules), :mod:`.cli`.
"""
