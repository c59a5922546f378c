"""`dhwt knn A B`: the KNN match of two matrices on disk, with its chance baseline
(dhwt.analysis.knn_result), rendered by dhwt.report.knn_report (its text, JSON and per-token
CSV)."""

from __future__ import annotations

from dhwt.analysis.knn_result import KnnOptions, compare
from dhwt.analysis.matrices import matrix_source
from dhwt.directories import check_output_file
from dhwt.report import knn_report
from dhwt.report.output import Output, rendered

__all__ = ["KnnOptions", "knn_command"]


def knn_command(a_spec: str, b_spec: str, options: KnnOptions, as_json: bool = False) -> Output:
    """Compare A and B, and write per-token scores to options.per_token (CSV) when asked: a new
    file or an earlier such CSV, checked before anything is computed
    (dhwt.directories.check_output_file)."""
    if options.per_token:
        check_output_file(options.per_token, "--per-token", [
            matrix_source(a_spec), matrix_source(b_spec), options.tokens_file,
            options.weights_file], knn_report.is_per_token)
    result = compare(a_spec, b_spec, options)
    if options.per_token:
        knn_report.write_per_token(options.per_token, result)
    return rendered(result, as_json, knn_report.text, knn_report.document)
