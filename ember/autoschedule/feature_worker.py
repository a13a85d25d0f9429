"""The feature helper process: `python -m ember.autoschedule.feature_worker` (started
by `FeaturePool`, never imported by the tuner). Each request is a list of States; the
reply is their feature rows (`ember.autoschedule.features.extract_features_batch`)."""

from __future__ import annotations

from ember.autoschedule.features import extract_features_batch
from ember.autoschedule.worker import serve


def main() -> None:
    serve(extract_features_batch)


if __name__ == "__main__":
    main()
