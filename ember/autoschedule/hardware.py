"""`HardwareParams`: what the search knows about the machine a task is tuned for, as
recorded with every measurement.

    params = HardwareParams.for_target(Target("llvm"))            # this host
    params = HardwareParams.for_target(target, num_cores=4)        # an override

The values are the device model's (`ember.device.device_model`: this machine where the
target runs here, the `-mcpu` table otherwise, the target's `-num-cores`/`-mattr` over
both), so the search sees the machine the default schedules see. They are recorded
with every measurement, so they must describe the device that ran it. Describe a
board the model does not know in the target (`-num-cores=N`, `-mattr=...`), which the
default schedules and weight packing read too; `for_target(..., **overrides)` changes
what the search alone sees (for experiments with the cost model).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ember.device import DeviceModel, device_model
from ember.errors import TargetError
from ember.target import Target


@dataclass(frozen=True, slots=True)
class HardwareParams:
    """The machine parameters the search tunes for; 0 cache bytes means no such level."""

    num_cores: int
    vector_bytes: int
    vector_registers: int
    cache_line_bytes: int
    l1_cache_bytes: int
    l2_cache_bytes: int
    l3_cache_bytes: int
    # Every FMA operand is a register (AArch64's fmla): a register tile's rows each
    # hold their broadcast input in a register (DeviceModel.fma_register_operands).
    fma_register_operands: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.fma_register_operands, bool):
            raise TargetError(
                f"hardware parameter fma_register_operands={self.fma_register_operands!r} "
                "is invalid: give true or false"
            )
        for field in dataclasses.fields(self):
            if field.name == "fma_register_operands":
                continue
            value = getattr(self, field.name)
            minimum = 0 if field.name.endswith("cache_bytes") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise TargetError(
                    f"hardware parameter {field.name}={value!r} is invalid: give an integer "
                    f"of at least {minimum}"
                )

    @classmethod
    def from_device(cls, device: DeviceModel) -> HardwareParams:
        return cls(
            num_cores=device.num_cores,
            vector_bytes=device.vector_bytes,
            vector_registers=device.vector_registers,
            cache_line_bytes=device.cache_line_bytes,
            l1_cache_bytes=device.l1_cache_bytes,
            l2_cache_bytes=device.l2_cache_bytes,
            l3_cache_bytes=device.l3_cache_bytes,
            fma_register_operands=device.fma_register_operands,
        )

    @classmethod
    def for_target(cls, target: Target | str, **overrides: Any) -> HardwareParams:
        """The parameters of `target`'s device model, with `overrides` (field name ->
        value) replacing what it says (each checked as the constructor checks it)."""
        target = target if isinstance(target, Target) else Target(target)
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TargetError(
                f"unknown hardware parameters {unknown}: accepted are "
                f"{', '.join(f.name for f in dataclasses.fields(cls))}"
            )
        return dataclasses.replace(cls.from_device(device_model(target)), **overrides)

    def to_json(self) -> dict[str, int | bool]:
        return dataclasses.asdict(self)
