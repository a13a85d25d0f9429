"""The build helper process: `python -m ember.autoschedule.build_worker` (started by
`LocalBuilder`, never imported by the tuner). It lowers and compiles the batches of
candidates it is sent, one at a time, with `ember.autoschedule.builder.build_candidates`."""

from __future__ import annotations

from ember.autoschedule.builder import build_candidates
from ember.autoschedule.worker import serve


def main() -> None:
    serve(build_candidates)


if __name__ == "__main__":
    main()
