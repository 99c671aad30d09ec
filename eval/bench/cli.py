"""`orthrus-rag-bench`: serving modes side by side on the same requests, bench.json in the run dir.

    orthrus-rag-bench                                     # workload=mixed: 1:1 closed loop, MiniLM embedder
    orthrus-rag-bench workload=phases embedder=backbone   # 9:1, 1:1, 1:9 with backbone embeddings
    orthrus-rag-bench modes=[hetero,alternating] workload.requests=32 runtime.step_time_target_s=0.1

Modes: hetero (this engine), isolated (an embed process and a generate process, half the cores each),
alternating (this engine, never both kinds in one step), hf (transformers generate + sentence-transformers
encode in one loop). See eval/bench for how each is run and how bench.json is laid out.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from orthrus_rag.cli.common import CONF_DIR, UserError, check_conf_dir, engine_config, guarded, pooling_params

APP = "orthrus-rag-bench"


def workload_from_config(cfg: DictConfig):
    from eval.bench import MODES, Phase, Workload

    unknown = [m for m in cfg.modes if m not in MODES]
    if unknown:
        raise UserError(f"unknown modes {unknown}; choose from {list(MODES)}")
    spec = OmegaConf.to_container(cfg.workload, resolve=True)
    spec["phases"] = [Phase(**p) for p in spec["phases"]]
    return Workload(**spec)


def run(cfg: DictConfig) -> dict:
    from eval.bench import format_table, run_bench

    workload = workload_from_config(cfg)
    bench = run_bench(engine_config(cfg), pooling_params(cfg), workload, list(cfg.modes))
    path = Path(HydraConfig.get().runtime.output_dir) / "bench.json"
    path.write_text(json.dumps(bench, indent=2) + "\n")
    print(format_table(bench))
    print(f"bench: {path}")
    sys.stdout.flush()
    return bench


def main() -> None:
    check_conf_dir("bench")
    hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="bench")(guarded(APP, run))()


if __name__ == "__main__":
    main()
