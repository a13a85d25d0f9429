"""The pretrained cost models shipped with Ember, one per machine class.

    path = pretrained_model_file(task.hardware_params, task.target)   # or CostModelError
    model = XGBModel(); model.set_base(path)                           # warm start

A fresh XGBModel ranks candidates at random until it has measured enough of them
(`num_warmup_samples`); a short tuning run spends most of its trials there. A
pretrained model, trained by `ember records train` on the records of many networks
tuned on one class of machine, ranks them from the first round (TenSet's point), and
the run's own trees learn its corrections on top (`XGBModel.set_base`).

Timings only transfer between machines that run the same code the same way, so a
model is kept per machine class: the architecture and its vector width, the two things
that change which schedules win (`machine_class`). Ember ships a model for the x86
machines it was tuned on (`SHIPPED`, with the records and machine each was trained on
in `ember/autoschedule/pretrained/README.md`). None is shipped for AArch64: its records
come from emulated boards, whose timings mean nothing. For another class, train one
from your own records (`ember records train ... -o my.npz`) and pass it to
`ember tune --warm-start my.npz`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ember.autoschedule.hardware import HardwareParams
from ember.autoschedule.xgb_model import CostModelError
from ember.target import Target

# machine class -> shipped model file (in ember/autoschedule/pretrained/).
SHIPPED = {"x86_64-avx512": "x86_64-avx512.npz"}


def machine_class(hardware: HardwareParams, target: Target) -> str:
    """`<arch>-<vector ISA>` for x86 (avx512, avx2, sse), `<arch>-<bits>bit` otherwise."""
    arch = target.target_arch
    if arch == "x86_64":
        isa = {64: "avx512", 32: "avx2"}.get(hardware.vector_bytes, "sse")
        return f"{arch}-{isa}"
    return f"{arch}-{hardware.vector_bytes * 8}bit"


def pretrained_model_file(hardware: HardwareParams, target: Target) -> Path:
    """The shipped model for `target`'s machine class; CostModelError if none is."""
    wanted = machine_class(hardware, target)
    name = SHIPPED.get(wanted)
    if name is None:
        shipped = ", ".join(sorted(SHIPPED))
        raise CostModelError(
            f"no pretrained cost model is shipped for {wanted} machines (only for "
            f"{shipped}); tune with --cost-model xgb, or train one from your records "
            "(ember records train LOG --model M -o cm.npz) and pass --warm-start cm.npz"
        )
    path = Path(str(resources.files("ember.autoschedule") / "pretrained" / name))
    if not path.is_file():
        raise CostModelError(
            f"the pretrained cost model {path} is missing from this installation; "
            "reinstall Ember (pip install -e .) or tune with --cost-model xgb"
        )
    return path
