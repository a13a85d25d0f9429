"""EvolutionarySearch: a task's first round measures its seeds and a random sample,
without the model unless asked; later rounds evolve; no state is proposed twice."""

from __future__ import annotations

import pytest
from sketch_cases import task_of

import ember.autoschedule.search as search_module
from ember.autoschedule.cost_model import RandomModel
from ember.autoschedule.records import state_key
from ember.autoschedule.search import EvolutionarySearch, SearchParams
from ember.schedule.default import default_schedule


@pytest.mark.parametrize(
    ("first_round_model", "pretrained"), [(False, False), (True, False), (False, True)]
)
def test_the_first_round_asks_the_model_only_if_asked_or_pretrained(
    monkeypatch: pytest.MonkeyPatch, first_round_model: bool, pretrained: bool
) -> None:
    mutations: list[int] = []
    real_mutate = search_module.mutate

    def counting_mutate(*args):  # type: ignore[no-untyped-def]
        mutations.append(1)
        return real_mutate(*args)

    monkeypatch.setattr(search_module, "mutate", counting_mutate)
    predictions: list[int] = []
    model = RandomModel(seed=0)
    model.pretrained = pretrained  # type: ignore[attr-defined]  # as a warm-started XGBModel
    real_predict = model.predict
    model.predict = lambda task, states: (
        predictions.append(len(states))
        or real_predict(  # type: ignore[method-assign]
            task, states
        )
    )
    params = SearchParams(population=16, first_round_model=first_round_model)
    task = task_of("conv2d_3x3")
    default = default_schedule(task.compute_dag, task.target)
    search = EvolutionarySearch(task, model, params, seed=0, initial_states=[default])
    first = search.next_batch(8)
    assert len(first) == 8 and state_key(first[0]) == state_key(default)  # the seed first
    assert bool(mutations) == bool(predictions) == (first_round_model or pretrained)
    search.record_measured(first, [1e-3] * len(first))
    second = search.next_batch(8)
    assert mutations  # later rounds evolve
    assert not {state_key(s) for s in first} & {state_key(s) for s in second}


def test_a_batch_holds_one_state_per_program_and_none_of_a_measured_program() -> None:
    """States that lower to one program (e.g. unroll pragmas that unroll the same loops)
    are measured once: within a batch, and across rounds."""
    from ember.autoschedule.program import program_key

    task = task_of("dense")
    search = EvolutionarySearch(task, RandomModel(seed=0), SearchParams(population=32), seed=0)
    measured: set[str | None] = set()
    for _ in range(4):
        batch = search.next_batch(8)
        programs = [program_key(state) for state in batch]
        assert None not in programs and len(set(programs)) == len(programs)
        assert not set(programs) & measured
        measured |= set(programs)
        search.record_measured(batch, [1e-3] * len(batch))
    assert search.measured_programs == measured
