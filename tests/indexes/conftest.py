import numpy as np
import pytest

from orthrus_rag.rag.types import Passage


def unit_rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def make_unit_rows():
    return unit_rows


@pytest.fixture
def passages() -> list[Passage]:
    return [Passage(id=f"p{i}", title=f"Title {i}", text=f"Text number {i}.") for i in range(300)]


@pytest.fixture
def vectors(passages) -> np.ndarray:
    return unit_rows(len(passages), 32)
