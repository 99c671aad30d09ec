"""The `machine` section of the GPU check: the GPU, its driver, the CPU, the package versions, and the device's
measured copy bandwidth (the ceiling a decode step's weight reads are compared with)."""
from __future__ import annotations

import platform
import time

import torch
from orthrus_rag.indexes.placement import faiss_has_gpu

from ..experiment.run_info import command_output, git_state, machine, package_version

PACKAGES = ("torch", "transformers", "sentence-transformers", "peft", "hydra-core", "faiss-cpu", "faiss-gpu",
            "flash-attn", "numpy")


def machine_info() -> dict:
    """run_info.machine() (the one description of the machine every results file carries), with what the GPU check
    adds: package versions, FAISS's GPU support and, on CUDA, the device's properties and copy bandwidth."""
    info = {"status": "ok", **machine(), "python": platform.python_version(), "cuda": torch.cuda.is_available(),
            "packages": {name: package_version(name) for name in PACKAGES}, "faiss_gpu": faiss_has_gpu(), **git_state()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count, cuda_version=torch.version.cuda,
                    driver=command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 20),
                    copy_gb_s=copy_bandwidth_gb_s())
    return info


def copy_bandwidth_gb_s(num_bytes: int = 2**30, repeats: int = 10) -> float:
    """Device-to-device copy, bytes read plus written over the median time (as the weight-read floor counts)."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    median = sorted(times[2:])[repeats // 2]
    return round(2 * num_bytes / median / 1e9, 1)
