"""Turning sampled tokens into text: incremental detokenisation, stop conditions, stream deltas."""
from __future__ import annotations

from dataclasses import dataclass, field

from orthrus_rag.engine.request import EmbedOutput, GenerateOutput
from orthrus_rag.engine.sequence import Sequence


@dataclass
class StepOutput:
    """What one step produced for one request: a text delta, and the final result once finished."""

    request_id: str
    delta_text: str = ""
    delta_token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    result: GenerateOutput | EmbedOutput | None = None
    error: Exception | None = None


def check_stop(seq: Sequence, tokenizer, eos_ids: set[int]) -> None:
    """After a new token: update `seq.text` and set `seq.finish_reason` when a stop condition holds."""
    params, token = seq.sampling, seq.output_ids[-1]
    if token in params.stop_token_ids or (token in eos_ids and not params.ignore_eos):
        seq.finish_reason = "stop"
        seq.text = _decode(tokenizer, seq.output_ids[:-1])
        return
    seq.text = _decode(tokenizer, seq.output_ids)
    hit = _find_stop(seq.text, params.stop, seq.num_text_sent)
    if hit is not None:
        seq.text, seq.finish_reason = seq.text[:hit], "stop"
    elif len(seq.output_ids) >= params.max_tokens:
        seq.finish_reason = "length"


def take_delta(seq: Sequence) -> str:
    """New text safe to stream: held back while it could still be the start of a stop string or a split char."""
    end = len(seq.text)
    if seq.finish_reason is None:
        longest = max((len(s) for s in seq.sampling.stop), default=0)
        end -= max(0, longest - 1)
        while end > seq.num_text_sent and seq.text[end - 1] == "\ufffd":
            end -= 1
    end = max(end, seq.num_text_sent)
    delta = seq.text[seq.num_text_sent:end]
    seq.num_text_sent = end
    return delta


def _decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=True)


def _find_stop(text: str, stops: list[str], sent: int) -> int | None:
    """Earliest stop string occurrence that is not inside already-streamed text."""
    hits = [i for s in stops if (i := text.find(s, max(0, sent - len(s) + 1))) >= 0]
    return min(hits) if hits else None
