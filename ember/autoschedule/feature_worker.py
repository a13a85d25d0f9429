"""The feature helper process: `python -m ember.autoschedule.feature_worker` (started
by `FeaturePool`, never imported by the tuner). Each request is a list of States; the
reply is their feature rows and program keys
(`ember.autoschedule.features.extract_features_and_keys`)."""

from __future__ import annotations

from ember.autoschedule.features import extract_features_and_keys
from ember.autoschedule.worker import serve


def main() -> None:
    serve(extract_features_and_keys)


if __name__ == "__main__":
    main()
