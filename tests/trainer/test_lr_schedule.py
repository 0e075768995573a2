"""The lr multiplier: linear warmup, then constant or cosine to a floor (hand-computed)."""

import math

import pytest

from services.trainer.actor import lr_lambda


def test_warmup_then_constant() -> None:
    values = [lr_lambda(s, warmup=4, total=10, schedule="constant", min_ratio=0.0) for s in range(6)]
    assert values == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_to_a_floor() -> None:
    f = [lr_lambda(s, warmup=2, total=10, schedule="cosine", min_ratio=0.1) for s in range(11)]
    assert f[:2] == [0.5, 1.0]
    # progress (s - 2) / 8: cos(0) = 1 at s=2, cos(pi/2) = 0 at s=6, cos(pi) = -1 at s=10
    assert f[2] == pytest.approx(1.0)
    assert f[6] == pytest.approx(0.1 + 0.9 * 0.5)
    assert f[10] == pytest.approx(0.1)
    assert f[4] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_lambda(50, warmup=2, total=10, schedule="cosine", min_ratio=0.1) == pytest.approx(0.1)
