"""`dhwt knn A B`: joins dhwt.analysis.knn_comparison (the KNN match of two matrices on disk,
with its chance baseline) and dhwt.report.knn_report (its text, JSON and per-token CSV)."""

from __future__ import annotations

from dhwt.analysis.knn_comparison import KnnOptions, compare
from dhwt.report import knn_report
from dhwt.report.json_document import json_text

__all__ = ["KnnOptions", "knn_command"]


def knn_command(a_spec: str, b_spec: str, options: KnnOptions, as_json: bool = False) -> str:
    """Compare A and B; return the report text (or its JSON document), and write per-token
    scores to options.per_token (CSV) when asked."""
    result = compare(a_spec, b_spec, options)
    if options.per_token:
        knn_report.write_per_token(options.per_token, result)
    return json_text(knn_report.document(result)) if as_json else knn_report.text(result)
