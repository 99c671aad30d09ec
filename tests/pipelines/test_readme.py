"""The example in pipelines/README.md runs as written."""
import re
from pathlib import Path

import pipelines

README = Path(pipelines.__file__).with_name("README.md")


async def test_readme_example_pipeline_and_its_test_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    namespace: dict = {}
    exec(blocks[0], namespace)  # the pipeline
    exec(blocks[-1], namespace)  # its test
    await namespace["test_second_query_carries_the_draft"]()
