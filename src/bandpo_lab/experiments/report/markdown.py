"""The report in Markdown: ``report.md`` (the whole document) and ``results.md`` (the results table)."""

from __future__ import annotations

from collections.abc import Sequence

from bandpo_lab.experiments.report.data import ReportData
from bandpo_lab.experiments.report.document import (
    Block,
    Bullets,
    Heading,
    Image,
    Paragraph,
    Table,
    results_table,
)

__all__ = ["render_markdown", "results_markdown"]


def _cell(x: object) -> str:
    return str(x).replace("|", "\\|")


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * block.level + " " + block.text
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Table):
        lines = [
            "| " + " | ".join(map(_cell, block.header)) + " |",
            "|" + "|".join("---" for _ in block.header) + "|",
        ]
        lines.extend("| " + " | ".join(map(_cell, row)) + " |" for row in block.rows)
        return "\n".join(lines)
    if isinstance(block, Image):
        return f"![{block.caption}]({block.path})\n\n*{block.caption}*"
    raise TypeError(f"block must be a Heading, Paragraph, Bullets, Table or Image, got {block!r}")


def render_markdown(blocks: Sequence[Block]) -> str:
    """``blocks`` as Markdown, separated by blank lines (pipe tables; ``|`` in a cell escaped)."""
    return "\n\n".join(map(_block, blocks)) + "\n"


def results_markdown(data: ReportData) -> str:
    """``results.md``: one line saying what the numbers are, then the results table."""
    return (
        f"Final evaluation: {data.main_key} etc. in % on the held-out set (k={data.k} samples per problem); mean ± "
        f"95% t-interval half-width over seeds."
        + (
            f" Late mean@{data.k}: mean@{data.k} averaged over the evaluations at steps "
            f"{', '.join(map(str, data.late_steps))} and the final one."
            if data.late_steps
            else ""
        )
        + "\n\n"
        + render_markdown([results_table(data)])
    )
