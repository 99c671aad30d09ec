"""The install puts the checkout's folders under the project's namespace: from anywhere, `orthrus_rag.eval`,
`orthrus_rag.pipelines` and `orthrus_rag.indexes` import, and no top-level `eval`, `pipelines` or `indexes` does."""
import subprocess
import sys

import pytest


def run_elsewhere(code: str, folder) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["eval", "pipelines", "indexes"])
def test_nothing_generic_lands_at_the_top_level(tmp_path, name):
    done = run_elsewhere(f"import {name}", tmp_path)
    assert done.returncode != 0 and f"No module named '{name}'" in done.stderr


def test_the_folders_import_under_the_namespace(tmp_path):
    done = run_elsewhere("import orthrus_rag.eval.bench.cli, orthrus_rag.indexes.bm25_index\n"
                         "from orthrus_rag.pipelines import PIPELINES\nprint(sorted(PIPELINES))", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ircot" in done.stdout
