"""The machine kind a run ran on, and the kernel set it ran with.

Two machines of one kind (the same CPU vendor, family and model, the same instruction-set
extensions, the same torch, MKL and oneDNN) run the same kernels, so a run repeats to the
printed digit; on another kind the kernels round differently and training carries the
difference on (docs/replication.md: what is reproducible where).  Each run's
manifest records both (:func:`distlab.results.runs.hardware`), the snapshot's record the kind,
and ``python -m distlab compare-snapshot`` compares a run with the snapshot of its kind.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

# the instruction-set extensions that choose the kernels torch, MKL and oneDNN dispatch to
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
             "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni")
# the environment that chooses among them (the replicate sets the first two)
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "DISTLAB_CPU_ISA")
# what makes two machines the same kind (compare_snapshot compares these)
KIND_KEYS = ("vendor", "cpu_family", "cpu_model_number", "isa", "torch", "mkl", "onednn")


def cpuinfo(text: str | None = None) -> dict:
    """Vendor, family, model number, model name and the kernel-relevant ISA flags of the first CPU
    in ``/proc/cpuinfo`` (``text``: its contents); None for what it does not say."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""

    def field(name: str) -> str | None:
        m = re.search(rf"^{name}\s*:\s*(.*)$", text, re.M)
        return m.group(1).strip() if m else None

    flags = set((field("flags") or "").split())
    return {"vendor": field("vendor_id"), "cpu_family": field("cpu family"), "cpu_model_number": field("model"),
            "cpu_model": field("model name"), "isa": [f for f in ISA_FLAGS if f in flags] if flags else None}


def _versions(config: str) -> dict:
    """MKL's and oneDNN's versions from ``torch.__config__.show()``."""
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    dnn = re.search(r"(?:MKL-DNN|oneDNN) v([\w.\-]+)", config)
    return {"mkl": mkl.group(1) if mkl else None, "onednn": dnn.group(1) if dnn else None}


def libraries() -> dict:
    """torch's version and the MKL and oneDNN it was built with (None where absent)."""
    import torch

    info = {"torch": torch.__version__, **_versions(torch.__config__.show())}
    if not torch.backends.mkl.is_available():
        info["mkl"] = None
    if not torch.backends.mkldnn.is_available():
        info["onednn"] = None
    return info


def machine_kind() -> dict:
    """The machine kind: :func:`cpuinfo` and :func:`libraries`."""
    return {**cpuinfo(), **libraries()}


def kernel_set(environ: Mapping[str, str] | None = None) -> dict:
    """The kernel set this process runs with: the environment that chooses it (None: unset) and
    the CPU capability torch reports it dispatches to."""
    import torch

    env = os.environ if environ is None else environ
    return {**{k: env.get(k) for k in KERNEL_ENV}, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def same_kind(a: Mapping, b: Mapping) -> list[str]:
    """The keys of :data:`KIND_KEYS` on which two machine records differ (empty: the same kind)."""
    return [k for k in KIND_KEYS if a.get(k) != b.get(k)]
