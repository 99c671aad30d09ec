"""Markdown tables for the reports; imports nothing, so building a table costs no matplotlib or torch import."""


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(map(str, cells)) + " |" for cells in [header, *rows]]
    return "\n".join([lines[0], "|" + "|".join("---" for _ in header) + "|", *lines[1:]])
