"""Model resolution and loading: shipped names or local folders."""
from orthrus_rag.models.device import resolve_device, resolve_dtype
from orthrus_rag.models.loading import load_embedder, load_generator, load_tokenizer, set_threads, usable_cores
from orthrus_rag.models.registry import SHIPPED, ModelNotFoundError, resolve_adapter_path, resolve_model_path

__all__ = ["SHIPPED", "ModelNotFoundError", "load_embedder", "load_generator", "load_tokenizer",
           "resolve_device", "resolve_adapter_path", "resolve_dtype", "resolve_model_path", "set_threads", "usable_cores"]
