"""Plain data types shared by retrieval, pipelines and evaluation."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Passage:
    """One retrievable passage of a corpus; `score` is filled by a search."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def formatted(self) -> str:
        """The passage as shown to a generator and as embedded for the index."""
        if not self.title:
            return self.text
        return f"Title: {self.title}\n{self.text}"
