"""Tolerant readers of the JSON files runs write (run info, lock records, training logs): a file a killed
process left half-written reads as what it holds so far, never as an exception."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` if the file is missing, unreadable, torn or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The object rows of a JSONL file, or of its gzipped copy ``<path>.gz`` (what ``bandpo compare --export``
    writes) when the file itself is absent; ``[]`` if neither exists. Blank lines, a torn last line (the process
    was killed mid-write) and rows that are not objects are skipped."""
    gz = path.with_name(path.name + ".gz")
    if path.is_file():
        text = path.read_text()
    elif gz.is_file():
        text = gzip.decompress(gz.read_bytes()).decode()
    else:
        return []
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
