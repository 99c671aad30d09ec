"""A sequence's outputs, written here only (the other fields' writers: engine/sequence.py): sampled tokens and their
text (incremental detokenisation, stop conditions, stream deltas), the first-token and finish times, the results."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from orthrus_rag.engine.request import EmbedOutput, FinishReason, GenerateOutput, Usage
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


def generate_output(seq: Sequence) -> GenerateOutput:
    """The finished generation's result (call after the scheduler has recorded its finish reason)."""
    seq.timings.finished = time.perf_counter()
    return GenerateOutput(seq.request_id, seq.text, list(seq.output_ids), seq.finish_reason,
                          Usage(len(seq.prompt_ids), len(seq.output_ids), seq.num_cached,
                                seq.num_reused, seq.num_recomputed), seq.timings)


def embed_output(seq: Sequence, vector: torch.Tensor) -> EmbedOutput:
    seq.timings.finished = time.perf_counter()
    return EmbedOutput(seq.request_id, vector.float().cpu().numpy(), seq.num_tokens, seq.timings)


def append_token(seq: Sequence, token: int, tokenizer, eos_ids: set[int]) -> FinishReason | None:
    """Record a sampled token and extend `seq.text` by its text; returns why the sequence stops here, if it does
    (the scheduler records it when it finishes the request). Work per call is proportional to the new tokens, not
    to the whole output."""
    seq.output_ids.append(token)
    seq.timings.first_token = seq.timings.first_token or time.perf_counter()
    params = seq.sampling
    stop_token = token in params.stop_token_ids or (token in eos_ids and not params.ignore_eos)
    done = len(seq.output_ids) >= params.max_tokens
    before = len(seq.text)
    end = len(seq.output_ids) - 1 if stop_token else len(seq.output_ids)  # a stop token's own text is not added
    seq.text += _detokenize(tokenizer, seq, end, flush=stop_token or done)
    hit = _find_stop(seq.text, params.stop, before)  # a stop token flushes held-back text: it may hold a stop string
    if hit is not None:
        seq.text = seq.text[:hit]
        return "stop"
    return "stop" if stop_token else "length" if done else None


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


def _detokenize(tokenizer, seq: Sequence, end: int, flush: bool) -> str:
    """Text of output tokens [detok_read, end), decoded with the previous token as context (so word-initial
    spaces come out as in a full decode). An incomplete multi-byte character waits for its next token, unless
    `flush` (the sequence ends here)."""
    ids = seq.output_ids
    prefix = tokenizer.decode(ids[seq.detok_prefix:seq.detok_read], skip_special_tokens=True)
    text = tokenizer.decode(ids[seq.detok_prefix:end], skip_special_tokens=True)
    if len(text) <= len(prefix) or (text.endswith("\ufffd") and not flush):
        return ""
    seq.detok_prefix, seq.detok_read = seq.detok_read, end
    return text[len(prefix):]


def _find_stop(text: str, stops: list[str], new_from: int) -> int | None:
    """Earliest stop string occurrence that ends in the text added since `new_from` (the tail only)."""
    return min((i for s in stops if (i := text.find(s, max(0, new_from - len(s) + 1))) >= 0), default=None)
