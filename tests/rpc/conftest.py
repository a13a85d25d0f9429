"""The `farm` fixture: a tracker on loopback, stopped with every server it got."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from farm import Farm


@pytest.fixture
def farm() -> Iterator[Farm]:
    farm = Farm()
    try:
        yield farm
    finally:
        farm.stop()
