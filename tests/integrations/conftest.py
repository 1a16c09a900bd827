"""Fixtures of the integration tests: a small CNN and its calibration samples (intlib.py)."""

from __future__ import annotations

import pytest
import torch
from intlib import SmallCnn, image, seeded_small_cnn


@pytest.fixture
def small_cnn() -> SmallCnn:
    return seeded_small_cnn()


@pytest.fixture
def calibration() -> list[tuple[torch.Tensor]]:
    return [(image(s),) for s in range(1, 5)]
