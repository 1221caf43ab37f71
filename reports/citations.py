"""BibTeX for the report's 'How to cite': one entry for the run, one per paper whose method ran.

Each method's record in the results (reports/names.py) carries its paper's entry; methods that share a paper
(ESSAM and ESSAM-F, ESSA and its warm start alone) carry the same one, and it is cited once.
"""

from __future__ import annotations

import importlib.metadata
import re

from reports.names import bibtex, ordered


def suite_version() -> str:
    try:
        return importlib.metadata.version("nograd")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def entry(kind: str, key: str, fields: dict[str, str]) -> str:
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields.items())
    return f"@{kind}{{{key},\n{body}\n}}"


def run_entry(header: dict) -> str:
    """The run itself: suite version, commit, config hash and date, and the scale it ran at."""
    name = str(header.get("name", "run"))
    digest = str(header.get("config_hash", "unknown"))
    date = str(header.get("date", ""))
    version = suite_version()
    return entry("misc", f"nograd_{re.sub(r'[^A-Za-z0-9]', '', name)}_{digest}", {
        "title": f"{{nograd}} run '{name}': gradient-free {{LLM}} post-training against {{RL}}",
        "author": "{nograd contributors}",
        "year": date[:4] or "unknown",
        "howpublished": f"nograd {version}",
        "note": (f"nograd {version}, commit {header.get('commit', 'unknown')}, config hash {digest}, "
                 f"run on {date or 'unknown date'}; model {header.get('model', 'unknown')}"),
    })


def paper_entries(methods) -> list[str]:
    """One entry per paper whose method appears, in the report's method order, each once."""
    return list(dict.fromkeys(filter(None, map(bibtex, ordered(methods)))))
