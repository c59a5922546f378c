"""What `dhwt analyze` finds (dhwt.commands.analyze joins it; dhwt.report.analyze_report renders
it): the closeness of a synthetic language's runs or the loss of text runs, and the similarity
of embedding spaces over training, with the report written and the record of what was
analysed; and how its inputs read (parse_pairs: --pairs; run_labels: each run's label)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dhwt.analysis.runs_closeness import RunsCloseness
from dhwt.analysis.runs_loss import RunsLoss
from dhwt.analysis.runs_similarity import RunsSimilarity
from dhwt.errors import DhwtError


@dataclass(frozen=True, eq=False)
class Analysis:
    """What `dhwt analyze` found: the report's path, what was analysed (the record), the
    closeness of a synthetic language's runs (None for text), the loss of text runs (None for a
    synthetic language's) and the similarity."""

    report: Path
    record: dict
    closeness: RunsCloseness | None
    similarity: RunsSimilarity
    loss: RunsLoss | None = None


def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """`"0a:0b,1a:1b"` -> (("0a", "0b"), ("1a", "1b"))."""
    pairs = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 2 or not all(parts):
            raise DhwtError(f"bad --pairs {text!r}: write pairs as A:B joined by commas, "
                            f"e.g. 0a:0b,1a:1b")
        pairs.append((parts[0], parts[1]))
    return tuple(pairs)


def run_labels(dirs: Sequence[Path]) -> list[str]:
    """Each run's label in the report: the shortest ending of the resolved paths that tells
    every run apart (its name alone where that does). One directory given twice is refused.

    Examples:
        >>> run_labels([Path("a/runs/tied"), Path("a/runs/untied")])
        ['tied', 'untied']
        >>> run_labels([Path("study_a/runs/tied"), Path("study_b/runs/tied")])
        ['study_a/runs/tied', 'study_b/runs/tied']
    """
    resolved = [d.resolve() for d in dirs]
    for i, path in enumerate(resolved):
        if path in resolved[:i]:
            first = dirs[resolved.index(path)]
            raise DhwtError(f"{first} is given twice; give each run once" if first == dirs[i]
                            else f"{first} and {dirs[i]} are the same run directory; give each "
                            "run once")

    def endings(depth: int) -> list[str]:
        return ["/".join(p.parts[-depth:]).lstrip("/") for p in resolved]

    # the whole paths differ, so some depth up to the longest tells them apart
    return endings(next(depth for depth in range(1, max(len(p.parts) for p in resolved) + 1)
                        if len(set(endings(depth))) == len(dirs)))
