"""How retrieval embeds its texts: the engine's PoolingParams plus what retrieval adds around the engine."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from orthrus_rag.engine import PoolingParams


@dataclass(frozen=True)
class EmbeddingRecipe:
    """The PoolingParams sent with every embed request, the text put before each query and before each passage,
    the tokens of each passage embedded (its first `passage_max_tokens`; None: all), the identity of the
    embedding adapter the engine applies (`name@sha256-prefix`, or None), and the dtype the engine computes in
    (None: not recorded). An index records `recipe()` in its manifest; a retriever refuses an index made with
    another recipe."""

    params: PoolingParams = field(default_factory=PoolingParams)
    query_prefix: str = ""
    passage_prefix: str = ""
    passage_max_tokens: int | None = None
    adapter: str | None = None
    dtype: str | None = None

    def recipe(self) -> dict[str, Any]:
        """What changes the vectors, beyond the embedder's name (`passage_max_tokens` and `dtype` only when set,
        so indexes of whole passages keep their recipe)."""
        optional = {"passage_max_tokens": self.passage_max_tokens, "dtype": self.dtype}
        return {"pooling": self.params.pooling, "normalize": self.params.normalize, "query_prefix": self.query_prefix,
                "passage_prefix": self.passage_prefix, "adapter": self.adapter,
                **{key: value for key, value in optional.items() if value is not None}}

    def for_passages(self) -> PoolingParams:
        """The params a passage is embedded with: these, cut at `passage_max_tokens`."""
        return replace(self.params, truncate=self.passage_max_tokens)
