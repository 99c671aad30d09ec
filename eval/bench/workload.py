"""Benchmark workloads: the same seeded request list, in issue order, for every mode (eval/bench/README.md).

Texts are random words from a fixed vocabulary of short, common English words; each of them is one token for the
SmolLM2 BPE tokenizer (with its leading space) and for MiniLM's WordPiece, so a text of k words is about k tokens.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Kind = Literal["embed", "generate"]

VOCAB = tuple("""
time year people way day man thing woman life child world school state family student group country problem hand
part place case week company system program question work government number night point home water room mother area
money story fact month lot right study book eye job word business issue side kind head house service friend father
power hour game line end member law car city community name president team minute idea kid body information back
parent face others level office door health person art war history party result change morning reason research girl
guy moment air teacher force education river town road bridge king queen church music film song army island lake
mountain village castle garden street market field forest farm station library museum hospital bank prison court
paper letter report news radio card table chair window wall floor bed kitchen horse dog bird fish tree flower stone
gold silver iron wood glass fire light sound color voice heart blood bone skin red blue green black white old new
long short big small high low good bad first last young great little own other early late
""".split())


@dataclass(frozen=True)
class Request:
    kind: Kind
    text: str


def make_requests(n: int, embed_share: float, seed: int, gen_prompt_tokens: int, embed_tokens: int) -> list[Request]:
    """`n` requests, exactly round(n * embed_share) of them embeds, in a seeded order with seeded texts."""
    if not 0.0 <= embed_share <= 1.0:
        raise ValueError(f"embed_share must be in [0, 1], got {embed_share}")
    rng = random.Random(seed)
    num_embed = round(n * embed_share)
    kinds: list[Kind] = ["embed"] * num_embed + ["generate"] * (n - num_embed)
    rng.shuffle(kinds)
    lengths = {"embed": embed_tokens, "generate": gen_prompt_tokens}
    return [Request(kind, " ".join(rng.choice(VOCAB) for _ in range(lengths[kind])).capitalize() + ".")
            for kind in kinds]
