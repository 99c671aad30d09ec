"""Scripted retriever and reasoner fixtures: they record every call and return scripted outputs."""
from __future__ import annotations

import pytest

from orthrus_rag.rag.testing import ScriptedReasoner, ScriptedRetriever


@pytest.fixture
def retriever() -> ScriptedRetriever:
    """Answers any query with made-up passages `<query>#<i>`; scripted queries can be added to `.results`."""
    return ScriptedRetriever()


@pytest.fixture
def script():
    """`script(outputs)`: a reasoner returning `outputs` in order, one per call."""
    return ScriptedReasoner
