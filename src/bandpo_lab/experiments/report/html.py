"""The report in HTML: one self-contained page (``report.html``), figures embedded as base64 PNG."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from bandpo_lab.experiments.report.document import Block, Bullets, Heading, Image, Paragraph, Table

__all__ = ["render_html"]

_CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
"""


def _block(block: Block, base_dir: Path) -> str:
    esc = html.escape
    if isinstance(block, Heading):
        return f"<h{block.level}>{esc(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{esc(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{esc(str(i))}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Table):
        head = "".join(f"<th>{esc(str(h))}</th>" for h in block.header)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in block.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(block, Image):
        data = base64.b64encode((base_dir / block.path).read_bytes()).decode("ascii")
        return (
            f"<figure><img alt='{esc(block.caption)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{esc(block.caption)}</figcaption></figure>"
        )
    raise TypeError(f"block must be a Heading, Paragraph, Bullets, Table or Image, got {block!r}")


def render_html(blocks: Sequence[Block], base_dir: Path, title: str) -> str:
    """``blocks`` as an HTML page titled ``title``; images are read from ``base_dir`` (the report directory)."""
    head = f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{_CSS}</style>"
    return "\n".join([head, "</head><body>", *(_block(b, base_dir) for b in blocks), "</body></html>\n"])
