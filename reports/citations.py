"""BibTeX for the report's 'How to cite': one entry for the run, one per paper whose method ran.

The method registry's `paper` strings are one-line references for people; BibTeX needs author
lists and fields, so they live here, keyed by method name, in one place. Authors are given as far
as the sources this suite was built from (../shared/reference/METHODS.md, the method files'
docstrings) list them; where they list only the first author, the entry says "and others".
"""

from __future__ import annotations

import importlib.metadata
import re

from reports.names import ordered

PAPERS: dict[str, dict[str, str]] = {
    "grpo": {
        "type": "misc", "key": "shao2024deepseekmath",
        "author": "Shao, Zhihong and others",
        "title": "{DeepSeekMath}: Pushing the Limits of Mathematical Reasoning in Open Language Models",
        "year": "2024", "eprint": "2402.03300", "archiveprefix": "arXiv",
        "note": "GRPO; run here with TRL's GRPOTrainer",
    },
    "fgrpo": {
        "type": "misc", "key": "plyusov2026fgrpo",
        "author": "Plyusov and Gorbatovski and Shaposhnikov and Sinii and Malakhov and Korotyshova and Gavrilov",
        "title": "Don't Let Your Policy Learn the Obvious and Forget the Rare",
        "year": "2026", "eprint": "2602.06717", "archiveprefix": "arXiv", "note": "F-GRPO",
    },
    "mezo": {
        "type": "inproceedings", "key": "malladi2023mezo",
        "author": "Malladi, Sadhika and Gao, Tianyu and Nichani, Eshaan and Damian, Alex and Lee, Jason D. and "
                  "Chen, Danqi and Arora, Sanjeev",
        "title": "Fine-Tuning Language Models with Just Forward Passes",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2023", "eprint": "2305.17333", "archiveprefix": "arXiv", "note": "MeZO",
    },
    "sazo": {
        "type": "misc", "key": "sazo2026",
        "title": "{SAZO}: Sample-Adaptive Zeroth-Order Optimisation",
        "year": "2026", "eprint": "2610.12566", "archiveprefix": "arXiv",
        "note": "Authors not recorded in this suite's sources; nograd runs a reconstruction from the abstract",
    },
    "essa": {
        "type": "misc", "key": "korotyshova2025essa",
        "author": "Korotyshova and Shaposhnikov and Malakhov and Khokhulin and Surnachev and Ovcharenko and Bredis "
                  "and Gorbatovski and Sinii and Gavrilov",
        "title": "{ESSA}: Evolutionary Strategies for Scalable Alignment",
        "year": "2025", "eprint": "2507.04453", "archiveprefix": "arXiv",
    },
    "essam": {
        "type": "misc", "key": "sun2026essam",
        "author": "Sun and Dang and Dai and Ye",
        "title": "{ESSAM}: A Novel Competitive Evolution Strategies Approach to Reinforcement Learning for Memory "
                 "Efficient {LLMs} Fine-Tuning",
        "year": "2026", "eprint": "2602.01003", "archiveprefix": "arXiv", "note": "ESSAM and ESSAM-F",
    },
    "randopt": {
        "type": "inproceedings", "key": "gan2026thickets",
        "author": "Gan and Isola",
        "title": "Neural Thickets: Diverse Task Experts Are Dense Around Pretrained Weights",
        "booktitle": "International Conference on Machine Learning (ICML)",
        "year": "2026", "eprint": "2603.12228", "archiveprefix": "arXiv", "note": "RandOpt",
    },
    "corp": {
        "type": "inproceedings", "key": "zhang2026corp",
        "author": "Zhang and Yang and Kasneci",
        "title": "Consolidating Rewarded Perturbations for {LLM} Post-Training",
        "booktitle": "COLM 2026 Workshop on Efficient Reasoning",
        "year": "2026", "eprint": "2605.31494", "archiveprefix": "arXiv", "note": "CoRP",
    },
}
"""BibTeX fields per method; ESSAM-F shares ESSAM's paper and SFT, ESSA's warm start alone, ESSA's
(SAME_PAPER); the base model has none."""
SAME_PAPER = {"essam_f": "essam", "sft": "essa"}


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
    seen, entries = set(), []
    for method in ordered(methods):
        paper = SAME_PAPER.get(method, method)
        if paper in PAPERS and paper not in seen:
            seen.add(paper)
            fields = dict(PAPERS[paper])
            kind, key = fields.pop("type"), fields.pop("key")
            entries.append(entry(kind, key, fields))
    return entries
