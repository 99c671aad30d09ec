"""The packages to install (the rest of the packaging is in pyproject.toml): orthrus_rag, and the folders at the top
of the checkout (eval/, pipelines/, indexes/) under its namespace, as orthrus_rag.eval, orthrus_rag.pipelines and
orthrus_rag.indexes, so nothing generic lands at the top level of site-packages."""
from setuptools import find_namespace_packages, find_packages, setup

FOLDERS = ("eval", "pipelines", "indexes")

setup(packages=find_namespace_packages(include=["orthrus_rag", "orthrus_rag.*"])
      + [f"orthrus_rag.{package}" for package in find_packages(include=[f"{f}*" for f in FOLDERS])],
      package_dir={f"orthrus_rag.{folder}": folder for folder in FOLDERS})
