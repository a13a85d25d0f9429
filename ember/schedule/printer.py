"""Text form of a State: each stage with its location and loop nest, outermost first."""

from __future__ import annotations

from ember.schedule.state import Annotation, Location, Stage, State


def _iterators(stage: Stage) -> str:
    parts = []
    for iterator in stage.iters:
        mark = "" if iterator.annotation is Annotation.NONE else f" {iterator.annotation.value}"
        parts.append(f"{iterator.name}({iterator.extent}{mark})")
    return " ".join(parts)


def format_state(state: State) -> str:
    lines = []
    for index, stage in enumerate(state.stages):
        if stage.is_placeholder:
            lines.append(f"#{index} {stage.name}: placeholder {list(stage.tensor.shape)}")
            continue
        if stage.location is Location.INLINED:
            where = "inlined"
        elif stage.location is Location.ATTACHED:
            target = state.stages[stage.attach_stage].name
            where = f"at {target}.{stage.attach_iter}"
        else:
            where = "root"
        scope = f" [{stage.scope}]" if stage.scope != "global" else ""
        lines.append(f"#{index} {stage.name}{scope} ({where}): {_iterators(stage)}")
    return "\n".join(lines)
