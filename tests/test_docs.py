"""Every Python block in README.md and docs/*.md runs as written, on the shipped models (pipelines/README.md has its
own test). A block that talks to a server (`base_url=`) gets one on a free port in place of 127.0.0.1:8000. Every
relative link in those pages points at a file that exists."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_URL = "http://127.0.0.1:8000"


def python_blocks() -> list[tuple[str, str]]:
    return [(f"{page.relative_to(ROOT)}#{i}", block) for page in PAGES
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S))]


def test_each_block_is_written_once():
    blocks = [block for _, block in python_blocks()]
    assert blocks and len(blocks) == len(set(blocks))


@pytest.fixture(scope="module")
def server_url():
    from orthrus_rag.engine import AsyncEngine, EngineConfig
    from tests.serving.conftest import serving

    with serving(AsyncEngine(EngineConfig()), owns_engine=True) as running:
        yield running.url


@pytest.mark.shipped
@pytest.mark.parametrize("where, block", python_blocks(), ids=[where for where, _ in python_blocks()])
def test_block_runs(where, block, request):
    if "base_url=" in block:
        assert DOC_URL in block, f"{where}: a client block should point at {DOC_URL}, the default server"
        block = block.replace(DOC_URL, request.getfixturevalue("server_url"))
    exec(compile(block, where, "exec"), {"__name__": "__main__"})


def test_the_engine_knob_table_lists_every_runtime_field_with_its_default():
    import dataclasses

    import yaml

    from orthrus_rag.engine import EngineConfig

    page = (ROOT / "docs" / "engine.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| `?([^|`]+)`? \|", page.split("## Engine knobs", 1)[1], re.M))
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(EngineConfig) if f.name not in ("generator", "embedder")}
    assert {key: yaml.safe_load(value) for key, value in rows.items()} == defaults


def relative_links(page: Path) -> list[str]:
    """The targets of a page's Markdown links and images that point into the repository (no scheme, no anchor)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
    return [t.split("#", 1)[0] for t in targets if "://" not in t and not t.startswith(("#", "mailto:"))]


@pytest.mark.parametrize("page", [*PAGES, ROOT / "pipelines" / "README.md", *ROOT.glob("LEADERBOARD*.md")],
                         ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(page):
    missing = [target for target in relative_links(page) if not (page.parent / target).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"
