"""``distlab gpu-plan``: the GPU tier's job list with its estimated GPU- and core-seconds (a dry run).

Exit 0 within the budget, 1 over it (the plan is printed either way); a mistake (a missing
config file, an unreadable calibration) is one line and exit 2.
"""

from __future__ import annotations

from ..clihelp import command


def _plan(a) -> int:
    from ..config.specs import SpecError
    from ..config.yamlio import YamlLimitError, load_json_bounded
    from .plan import format_plan, load_config, plan, totals

    cfg = load_config(a.configfile, a.root)
    cal = None
    if a.calibration:
        try:
            cal = load_json_bounded(a.calibration, what="calibration file")
        except YamlLimitError as e:  # over a bound, not a regular file, not JSON: one line naming it
            raise SpecError(f"--calibration: {e}") from None
    jobs = plan(cfg, cal)
    print(format_plan(jobs, cfg, cal))
    if a.jobs:
        for j in jobs:
            print(f"  {j.resource} {j.name}: {j.est_s:.2f} s ({j.label}){' [slice]' if j.priority == 0 else ''}")
    return 0 if totals(jobs)["wall_s"] <= float(cfg["gpu_tier"]["budget_s"]) else 1


def register(sub) -> None:
    command(sub, "gpu-plan", _plan, "the GPU tier's jobs and their estimated GPU- and core-seconds (a dry run)",
            configfile={"nargs": "+", "default": ["config/gpu.yaml"], "help": "overlays over config/config.yaml"},
            root={"default": ".", "help": "the repository (its config/config.yaml)"},
            calibration={"default": None, "help": "a calibration.json measured on the device (run_tier.py)"},
            jobs={"action": "store_true", "help": "list every job"})
