"""The report in HTML: ``report.md`` as one self-contained page (``report.html``), figures embedded as base64 PNG.

It reads only the Markdown :mod:`~bandpo_lab.experiments.report.document` writes: blocks separated by blank lines,
each a heading, a bullet list, a pipe table, an image (followed by its caption in italics) or a paragraph; text is
shown as written (no inline markup)."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

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


def _block(block: str, base_dir: Path) -> str:
    esc = html.escape
    if block.startswith("#"):
        marks, _, text = block.partition(" ")
        return f"<h{len(marks)}>{esc(text)}</h{len(marks)}>"
    if block.startswith("- "):
        return "<ul>" + "".join(f"<li>{esc(line[2:])}</li>" for line in block.split("\n")) + "</ul>"
    if block.startswith("| "):
        header, _, *rows = [
            [esc(c.strip().replace("\\|", "|")) for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line in block.split("\n")
        ]
        head = "".join(f"<th>{c}</th>" for c in header)
        body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    image = re.fullmatch(r"!\[(.*)\]\((.*)\)\n\n\*.*\*", block)
    if image:
        caption, path = image.groups()
        data = base64.b64encode((base_dir / path).read_bytes()).decode("ascii")
        return (
            f"<figure><img alt='{esc(caption)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{esc(caption)}</figcaption></figure>"
        )
    return f"<p>{esc(block)}</p>"


def render_html(markdown: str, base_dir: Path, title: str) -> str:
    """``markdown`` (the report's) as an HTML page titled ``title``; images are read from ``base_dir`` (the report
    directory)."""
    head = f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{_CSS}</style>"
    blocks = re.split(r"\n\n(?!\*)", markdown.rstrip("\n"))  # an image keeps the caption below it
    return "\n".join([head, "</head><body>", *(_block(b, base_dir) for b in blocks), "</body></html>\n"])
