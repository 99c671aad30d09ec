"""gpu_check.md: the sections of gpu_check.json as short tables, with the issue's GPU targets next to them."""
from __future__ import annotations

from ..experiment.markdown import cell, markdown_table


def render(check: dict) -> str:
    lines = [f"# GPU check{' (dry run: CPU, tiny models)' if check.get('dry_run') else ''}", "",
             f"Started {check.get('started')}, {check.get('seconds', 0):.0f} s. All models have dummy (random) weights:"
             " figures are speed only.", ""]
    lines += _machine(check.get("machine", {}))
    lines += _tests(check.get("tests", {}))
    for backend, section in check.get("steps", {}).items():
        lines += _steps(backend, section)
    for name, section in check.get("mixed", {}).items():
        lines += _mixed(name, section)
    lines += _rag(check.get("rag", {}))
    return "\n".join(lines) + "\n"


def _machine(m: dict) -> list[str]:
    gpu = f"{m.get('gpu')} ({m.get('gpu_memory_gib')} GiB, driver {m.get('driver')}, CUDA {m.get('cuda_version')}, " \
          f"copy {m.get('copy_gb_s')} GB/s)" if m.get("cuda") else "none"
    packages = ", ".join(f"{k} {v}" for k, v in m.get("packages", {}).items() if v)
    return ["## Machine", f"- GPU: {gpu}", f"- CPU: {m.get('cpu')}, {m.get('cores')} cores; Python {m.get('python')}",
            f"- packages: {packages}; faiss GPU: {m.get('faiss_gpu')}",
            f"- commit {m.get('git_commit')}{' (dirty)' if m.get('git_dirty') else ''}", ""]


def _tests(t: dict) -> list[str]:
    lines = ["## Engine tests", f"- status: {t.get('status')}; device {t.get('device')}; {t.get('seconds')} s",
             f"- passed {t.get('passed')}, failures {t.get('failures')}, errors {t.get('errors')}, "
             f"skipped {t.get('skipped')}, deselected {t.get('deselected')} (need shipped model packages)"]
    lines += [f"  - {name}" for name in t.get("failed_tests", [])[:20]]
    return lines + _tail(t) + [""]


def _steps(backend: str, s: dict) -> list[str]:
    lines = [f"## Step micro-benchmark: attention backend {backend}", f"- status: {s.get('status')}"]
    if s.get("steps"):
        rows = [[shape, threads, s.get("tokens", {}).get(shape), r.get("engine_ms"), r.get("host_ms"), r.get("hf_ms"),
                 r.get("floor_ms"), cell(r["engine_ms"] / r["floor_ms"] if r.get("floor_ms") else None, 2, "x")]
                for shape, by_threads in s["steps"].items() for threads, r in by_threads.items()]
        header = "shape|threads|tokens|engine ms|host ms|hf ms|floor ms|engine/floor".split("|")
        lines += ["", markdown_table(header, rows),
                  "\nTarget: decode64 engine step within 1.5x of the weight-read floor."]
    return lines + _tail(s) + [""]


def _mixed(name: str, m: dict) -> list[str]:
    lines = [f"## Mixed benchmark: {m.get('title', name)}", f"- status: {m.get('status')}"]
    lines += [f"- {mode}: {why}" for mode, why in m.get("problems", {}).items()]
    lines += _mode_table(m.get("modes", {}), m.get("ratios", {}), "all phases" if m.get("phases") else "")
    for phase, p in m.get("phases", {}).items():
        lines += _mode_table(p["modes"], p["ratios"], f"phase {phase} (generate:embed)")
    if m.get("phases"):
        lines.append("Targets: hetero/isolated >= 1.3 on 1:1 and >= 2 on 1:9; hetero/alternating > 1.")
    return lines + [""]


def _mode_table(modes: dict, ratios: dict, title: str) -> list[str]:
    if not modes:
        return []
    rows = [[mode, *(cell(r.get(key), 3) for key in ("rps", "embed_rps", "gen_rps")),
             *(cell((r.get(q) or {}).get(kind), 3) for kind in ("embed", "generate") for q in ("p50_s", "p99_s"))]
            for mode, r in modes.items()]
    header = "mode|req/s|embed/s|gen/s|p50 embed s|p99 embed s|p50 gen s|p99 gen s".split("|")
    ratio_text = "  ".join(f"{k} {cell(v, 2, 'x')}" for k, v in ratios.items())
    return ["", title, markdown_table(header, rows), "", ratio_text, ""]


def _rag(r: dict) -> list[str]:
    lines = [f"## RAG benchmark: {r.get('title', 'iterative RAG under load')}", f"- status: {r.get('status')}",
             "- dummy weights: latency only, the answers are meaningless (accuracy is not measured)"]
    lines += [f"- {mode}: {why}" for mode, why in r.get("problems", {}).items()]
    for rate, load in r.get("by_rate", {}).items():
        rows = [[mode, *(cell(m.get(key), 3) for key in ("qps", "p50_s", "p90_s", "p99_s"))]
                for mode, m in load["modes"].items()]
        lines += ["", f"rate {rate} questions/s", markdown_table("mode|q/s|p50 s|p90 s|p99 s".split("|"), rows)]
        reduction = load.get("p99_reduction_vs_isolated")
        lines.append(f"\nhetero p99 vs isolated: {f'{reduction:.0%} lower' if reduction is not None else '-'}")
    return lines + ["", "Target: hetero p99 at least 56% below isolated at the higher rate."]


def _tail(section: dict) -> list[str]:
    return ["", "```", section["tail"], "```"] if section.get("tail") else []
