"""The papers' names for the methods, techniques and schemes, from the internal ids.

One mapping for every legend, tick and title: :func:`display`.  DeMo's methods and the atlas's
techniques carry their name in the techniques registry (``label`` in
:mod:`distlab.techniques.catalogue`); P1's schemes are their ids in capitals; P2's placers and
P3's methods have no registry entry, so their names are kept here.
"""

from __future__ import annotations

import re

from ..techniques.catalogue import METHODS, TECHNIQUES as ATLAS
from ..techniques.gradient_codes import SCHEMES as CODES

# P1 (PGC): the paper's scheme names are the schemes' ids in capitals (GC-FR, IS-SGD)
SCHEMES = {s: s.upper() for s in CODES}
# P2 (HSDAG): the placers; "corrected" is our fix of the released code, HSDAG as the paper runs it
PLACERS = {"cpu_only": "CPU only", "gpu_only": "GPU only", "random": "Random", "heft": "HEFT", "rnn": "RNN placer",
           "placeto": "Placeto", "hsdag": "HSDAG (as released)", "hsdag_corrected": "HSDAG",
           "hsdag_fine": "HSDAG (fine-tuned)", "optimum": "Optimum"}
# P2's device pairs and models
PAIRS = {"cpu_igpu": "CPU + integrated GPU", "cpu_igpu_concurrent": "CPU + integrated GPU (concurrent)",
         "cpu_dcgpu": "CPU + datacenter GPU", "cpu_h200": "CPU + H200"}
MODELS = {"inception_v3": "Inception-v3", "resnet50": "ResNet-50", "bert": "BERT"}
# P3 (local credit assignment)
LOCAL = {"bp": "BP", "bp-1thread": "BP (one thread)", "rc-seq": "RC (sequential)", "rc-heads": "RC, a head per section (ablation)",
         "rc-par": "RC (parallel, lock-step)", "rc-async": "RC (asynchronous)", "rc-thread": "RC (threads, lock-step)",
         "pc-fixed": "PC (fixed prediction)", "pc-fixed-trunc": "PC (fixed prediction, truncated T)",
         "pc-strict": "PC (strict)"}
# the atlas's techniques and DeMo's methods: their labels in the techniques registry
TECHNIQUES = {n: s.label for n, s in ATLAS.items()}
DISPLAY = {**SCHEMES, **PLACERS, **PAIRS, **MODELS, **LOCAL, **TECHNIQUES,
           **{n: s.label.replace("AdamW-DDP", "AdamW (DDP)") for n, s in METHODS.items()}}
CONTROL = "_const"


def display(name: str) -> str:
    """The paper's name for an internal id; a placer's constant-reward control says so; an id
    with no name is returned as it is."""
    name = str(name)
    if name.endswith(CONTROL):
        return f"{display(name[: -len(CONTROL)])}, constant reward"
    if name.startswith("rc-pc-T"):
        return f"RC + PC feedback, T = {name[len('rc-pc-T'):]}"
    return DISPLAY.get(name, name)


# ids that are also plain English words ("the serial optimum", "random search"): not counted as ids in prose
WORDS = {"random", "optimum"}


def internal_ids_in(text: str) -> list[str]:
    """The internal ids written in ``text`` as words: those whose name differs from the id
    (English words aside), then words shaped like an id of a known family that no name covers."""
    known = [k for k, v in DISPLAY.items()
             if k != v and k not in WORDS and re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", text)]
    # an id no mapping holds yet, shaped like one of a known family (bp-..., rc-..., hsdag_...)
    families = {re.split(r"[-_]", k)[0] for k in DISPLAY} - WORDS
    shaped = [w for w in re.findall(r"(?<![\w-])[a-z][a-z0-9]*(?:[-_][a-z0-9]+)+(?![\w-])", text)
              if re.split(r"[-_]", w)[0] in families and w not in DISPLAY]
    return known + sorted(set(shaped))
