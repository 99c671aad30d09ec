"""Contrastive LoRA training of an embedding adapter for a causal LM backbone: in-batch InfoNCE over (query, passage)
pairs pooled exactly as the engine pools backbone rows (orthrus_rag/training/pooled.py), plus distillation from a
teacher embedder when `distill_from` is set; only the LoRA weights train (the objective: docs/embedding-adapter.md).
The result is a PEFT LoRA folder that `runtime.embedding_adapter` loads, with `training.json` and `loss.png` beside it.
"""
from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from orthrus_rag.models import load_embedder, resolve_model_path, set_threads
from orthrus_rag.training.batching import BATCHINGS, bm25_batches, random_batches, relevant_passages
from orthrus_rag.training.pairs import Pair, PairSource, load_pairs, split_pairs
from orthrus_rag.training.pooled import POOLINGS, embed_texts, encode_batch, pooled_embeddings

@dataclass
class TrainSettings:
    """One training run; the Hydra config `conf/train_adapter.yaml` documents each key."""

    model: str
    output: str
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    last_layers: int | None = None
    pooling: str = "mean"
    query_prefix: str = ""
    passage_prefix: str = ""
    temperature: float = 0.05
    distill_from: str | None = None
    distill_weight: float = 1.0
    batch_size: int = 32
    batching: str = "random"
    group_size: int = 8
    lr: float = 3e-4
    warmup_steps: int = 5
    max_steps: int = 100
    max_minutes: float | None = None
    query_max_tokens: int = 32
    passage_max_tokens: int = 64
    held_out: int = 128
    eval_max_tokens: int = 128
    checkpoint_every: int = 25
    seed: int = 0
    num_threads: int | None = None
    dtype: str = "float32"
    save_dtype: str = "bfloat16"

    def check(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS} (as the engine pools backbone rows), got "
                             f"{self.pooling!r}")
        for key in ("rank", "batch_size", "max_steps", "query_max_tokens", "passage_max_tokens", "checkpoint_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be at least 1, got {getattr(self, key)}")
        if self.batching not in BATCHINGS:
            raise ValueError(f"batching must be one of {BATCHINGS}, got {self.batching!r}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be at least 2 (a seed pair and a hard negative), got {self.group_size}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be at least 2: the other pairs of a batch are the negatives")
        if self.distill_weight < 0:
            raise ValueError(f"distill_weight must be >= 0, got {self.distill_weight}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        for key in ("dtype", "save_dtype"):
            if getattr(self, key) not in ("float32", "bfloat16"):
                raise ValueError(f"{key} must be float32 or bfloat16, got {getattr(self, key)!r}")


@dataclass
class TrainResult:
    output: Path
    steps: int
    seconds: float
    losses: list[float]
    recall_before: dict[str, float]
    recall_after: dict[str, float]
    num_pairs: int

    @property
    def final_loss(self) -> float:
        """The mean of the last 10 batch losses (nan without any)."""
        tail = self.losses[-10:]
        return sum(tail) / len(tail) if tail else float("nan")


# ---- model ----------------------------------------------------------------------------------------------------
def lora_model(settings: TrainSettings):
    """The backbone in float32 with fresh LoRA weights (seeded) on the target modules of the last `last_layers`
    decoder layers (None: every layer; gradients then stop below them)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(settings.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    torch.manual_seed(settings.seed)
    layers, count = base.config.num_hidden_layers, settings.last_layers
    last = None if count is None or count >= layers else list(range(layers - count, layers))
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=list(settings.target_modules), task_type="FEATURE_EXTRACTION",
                        layers_to_transform=last)
    return get_peft_model(base, config), tokenizer


# ---- loss -----------------------------------------------------------------------------------------------------
def masked_logits(queries: torch.Tensor, passages: torch.Tensor, relevant: torch.Tensor,
                  temperature: float) -> torch.Tensor:
    """(B, B) cosine similarities / temperature of normalised rows; `relevant[i, j]` (i != j) masks passage j out
    of query i's negatives."""
    logits = queries @ passages.T / temperature
    eye = torch.eye(len(queries), dtype=torch.bool, device=logits.device)
    return logits.masked_fill(relevant.to(logits.device) & ~eye, float("-inf"))


def info_nce(logits: torch.Tensor) -> torch.Tensor:
    """In-batch InfoNCE from (B, B) masked logits, each query's own passage (the diagonal) the label."""
    return F.cross_entropy(logits, torch.arange(len(logits), device=logits.device))


def distillation(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) of each query's distribution over the batch's passages, from (B, B) masked logits."""
    target, target_log = F.softmax(teacher, dim=1), F.log_softmax(teacher, dim=1)
    terms = torch.where(target > 0, target * (target_log - F.log_softmax(student, dim=1)), 0.0)
    return terms.sum(1).mean()


def relevance_mask(batch: list[Pair], relevant: dict[str, set[str]]) -> torch.Tensor:
    """(B, B): passage j is relevant to query i (its own pair, the same passage, or another gold passage of it)."""
    return torch.tensor([[b.passage_id == a.passage_id or b.passage_id in relevant.get(a.query, ())
                          for b in batch] for a in batch])


def batch_loss(model, tokenizer, batch: list[Pair], relevant: dict[str, set[str]],
               settings: TrainSettings, teacher=None) -> torch.Tensor:
    """InfoNCE, plus `distill_weight` times the distillation loss when a teacher embedder is given."""
    queries = encode_batch(tokenizer, [settings.query_prefix + p.query for p in batch], settings.query_max_tokens)
    passages = encode_batch(tokenizer, [settings.passage_prefix + p.passage for p in batch],
                            settings.passage_max_tokens)
    q = pooled_embeddings(model, queries, settings.pooling)
    d = pooled_embeddings(model, passages, settings.pooling)
    mask = relevance_mask(batch, relevant)
    logits = masked_logits(q, d, mask, settings.temperature)
    loss = info_nce(logits)
    if teacher is not None:
        loss = loss + settings.distill_weight * distillation(logits, teacher_logits(teacher, batch, mask, settings))
    return loss


@torch.no_grad()
def teacher_logits(teacher, batch: list[Pair], mask: torch.Tensor, settings: TrainSettings) -> torch.Tensor:
    """The teacher's masked logits for the batch: its own normalised embeddings of the raw query and passage texts
    (no prefixes, its own length limit)."""
    texts = [p.query for p in batch] + [p.passage for p in batch]
    vectors = teacher.encode(texts, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False,
                             batch_size=len(texts)).float().cpu()
    return masked_logits(vectors[:len(batch)], vectors[len(batch):], mask, settings.temperature)


# ---- held-out recall ------------------------------------------------------------------------------------------
def held_out_recall(model, tokenizer, pairs: list[Pair], settings: TrainSettings) -> dict[str, float]:
    """Recall@1 and @5 of each held-out query among the held-out pairs' distinct passages."""
    if not pairs:
        return {}
    model.eval()
    ids = sorted({p.passage_id for p in pairs})
    texts = {p.passage_id: settings.passage_prefix + p.passage for p in pairs}
    d = embed_texts(model, tokenizer, [texts[i] for i in ids], settings.pooling, settings.eval_max_tokens)
    q = embed_texts(model, tokenizer, [settings.query_prefix + p.query for p in pairs], settings.pooling,
                    settings.eval_max_tokens)
    ranks = (q @ d.T).argsort(dim=1, descending=True)
    gold = torch.tensor([ids.index(p.passage_id) for p in pairs])
    position = (ranks == gold[:, None]).float().argmax(dim=1)
    return {f"recall@{k}": (position < k).float().mean().item() for k in (1, 5)}


# ---- loop -----------------------------------------------------------------------------------------------------
def lr_at(step: int, settings: TrainSettings) -> float:
    """Linear warm-up, then cosine decay to zero at max_steps."""
    if step < settings.warmup_steps:
        return settings.lr * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, settings.max_steps - settings.warmup_steps)
    return settings.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def train_adapter(settings: TrainSettings, source: PairSource | list[Pair], model_and_tokenizer=None) -> TrainResult:
    """Train, checkpoint every `checkpoint_every` steps, and write the adapter folder to `settings.output`."""
    settings.check()
    set_threads(settings.num_threads)
    pairs = load_pairs(source, settings.seed) if isinstance(source, PairSource) else list(source)
    train_pairs, held = split_pairs(pairs, min(settings.held_out, len(pairs) // 5), settings.seed)
    if len(train_pairs) < settings.batch_size:
        raise ValueError(f"{len(train_pairs)} training pairs are fewer than batch_size={settings.batch_size}")
    if model_and_tokenizer is None:
        resolve_model_path(settings.model)  # a missing backbone fails before the teacher loads
    # the sentence-transformers teacher (float32, CPU-or-GPU as torch finds): a missing one fails before the backbone
    teacher = load_embedder(settings.distill_from, "float32") if settings.distill_from else None
    model, tokenizer = model_and_tokenizer or lora_model(settings)
    output = Path(settings.output)
    output.mkdir(parents=True, exist_ok=True)
    before = held_out_recall(model, tokenizer, held, settings)
    losses, start = _loop(model, tokenizer, train_pairs, relevant_passages(pairs), settings, output, teacher)
    after = held_out_recall(model, tokenizer, held, settings)
    result = TrainResult(output, len(losses), time.perf_counter() - start, losses, before, after, len(train_pairs))
    save_adapter(model, output, settings.save_dtype, settings.model)
    write_metadata(output, settings, source, pairs, result)
    plot_losses(losses, output / "loss.png", "InfoNCE + distillation loss" if teacher else "InfoNCE loss")
    return result


def _loop(model, tokenizer, pairs: list[Pair], relevant: dict[str, set[str]], settings: TrainSettings,
          output: Path, teacher=None) -> tuple[list[float], float]:
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    deadline = start + settings.max_minutes * 60 if settings.max_minutes else math.inf
    batches = (bm25_batches(pairs, settings.batch_size, settings.group_size, settings.seed)
               if settings.batching == "bm25" else random_batches(pairs, settings.batch_size, settings.seed))
    steps = zip(range(settings.max_steps), batches)
    with tqdm(steps, total=settings.max_steps, desc="training adapter", unit="step") as bar:
        for step, batch in bar:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, settings)
            with _autocast(model, settings.dtype):
                loss = batch_loss(model, tokenizer, batch, relevant, settings, teacher)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if (step + 1) % settings.checkpoint_every == 0:
                save_adapter(model, output / "checkpoints" / f"step-{step + 1:06d}", settings.save_dtype,
                             settings.model)
            if time.perf_counter() > deadline:
                break
    model.eval()
    return losses, start


def _autocast(model, dtype: str):
    """bfloat16: the forward and backward in bf16 autocast (the weights and the optimizer stay float32)."""
    device = next(model.parameters()).device.type
    return torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bfloat16")


# ---- outputs --------------------------------------------------------------------------------------------------
def save_adapter(model, folder: Path, dtype: str, base_model: str) -> None:
    """peft's save_pretrained, the weights then stored in `dtype` (the engine casts them to the model's dtype) and
    the base model recorded as given (a shipped name stays a name, not this machine's cache path)."""
    model.save_pretrained(folder)
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").unlink(missing_ok=True)  # peft's blank model card; training.json says what this is
    weights = folder / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    save_file({k: v.to(getattr(torch, dtype)).contiguous() for k, v in tensors.items()}, str(weights),
              metadata={"format": "pt"})


def write_metadata(output: Path, settings: TrainSettings, source: PairSource | list[Pair], pairs: list[Pair],
                   result: TrainResult) -> None:
    """training.json: the settings, where the pairs came from and how many of each kind (held-out ones included),
    the losses and the held-out recall."""
    data = asdict(source) if isinstance(source, PairSource) else {"pairs": "given in code"}
    counts = dict(Counter(p.source for p in pairs))
    record = {"settings": asdict(settings), "data": {**data, "pairs_by_kind": counts,
                                                     "training_pairs": result.num_pairs},
              "steps": result.steps, "seconds": round(result.seconds, 1), "final_loss": round(result.final_loss, 5),
              "losses": [round(x, 5) for x in result.losses], "held_out_recall_before": result.recall_before,
              "held_out_recall_after": result.recall_after}
    (output / "training.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def plot_losses(losses: list[float], path: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses, lw=1, label="batch loss")
    window = max(1, len(losses) // 10)
    if window > 1:
        smooth = [sum(losses[i - window:i]) / window for i in range(window, len(losses) + 1)]
        ax.plot(range(window, len(losses) + 1), smooth, lw=2, label=f"mean of {window}")
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
