"""Markdown tables for the reports; imports nothing, so building a table costs no matplotlib or torch import."""


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(map(str, cells)) + " |" for cells in [header, *rows]]
    return "\n".join([lines[0], "|" + "|".join("---" for _ in header) + "|", *lines[1:]])


def cell(x, digits: int = 2, suffix: str = "") -> str:
    """A figure with `digits` decimals and `suffix`, or `-` where there is none."""
    return "-" if x is None else f"{x:.{digits}f}{suffix}"
