"""Exact k nearest neighbours of every row of an embedding matrix, and KNN Match Similarity.

KNN Match Similarity of two spaces A and B (same tokens, any widths): for token i, N_A(i) and
N_B(i) are its k nearest neighbours among the other rows (self excluded by masking, since under
inner product a row is often not its own top neighbour). Two scores per token:
  Jaccard  |N_A ∩ N_B| / |N_A ∪ N_B|   (what the Butterfly Effect post defines), and
  overlap  |N_A ∩ N_B| / k             (what its code computed; = mutual-kNN alignment).
Both are reported; averages are plain or weighted (e.g. by token frequency).

Metrics: "ip" (raw inner product, the reference study's), "cos" (cosine), "l2" (Euclidean). The
ranking score is higher-is-nearer: <x_i, x_j>, cos(x_i, x_j), or -||x_i - x_j||^2.

Ties: neighbours are ordered by score, higher first, and equal scores by lower row index first,
so the result is a function of the matrix alone. Scores are float64: values equal in exact
arithmetic that float64 rounds apart (cosines of integer rows, say, or squared distances next to
rows 1e15 times longer) are ordered by their rounded values, which another float64 brute force
with another summation order may round otherwise (a fuzz of 300 such matrices found only these).

Modules: neighbours (the result types and argument checks), exact (the blocked search of every row:
nearest_neighbours, knn_match, chance_baseline and its stand-ins, norm_matched_random and
query_stand_in), candidates (its filter: the best candidates so far and the block entries that can
enter them), gram (the Gram blocks' products and their precision, the rows' squared norms), rerank
(the float64 re-rank both searches end with), sample (exact neighbours of a sample of query rows,
and the estimate of a mean over them).
"""

from dhwt.analysis.knn.candidates import TILE
from dhwt.analysis.knn.exact import (WIDE_SLACK, chance_baseline, knn_match, nearest_neighbours,
                                     norm_matched_random, phase_times, query_stand_in)
from dhwt.analysis.knn.gram import BLOCK, KNN_PRECISIONS, candidate_precision, row_squares
from dhwt.analysis.knn.neighbours import (DEFAULT_K, KnnMatch, Neighbours, average_weights,
                                          check_k, choose_k, default_k, match_neighbours,
                                          select_tokens)
from dhwt.defaults import METRICS
from dhwt.analysis.knn.rerank import SLACK
from dhwt.checks import check_matrix

__all__ = ["BLOCK", "DEFAULT_K", "KNN_PRECISIONS", "METRICS", "SLACK", "TILE", "WIDE_SLACK",
           "KnnMatch", "Neighbours", "average_weights", "candidate_precision", "chance_baseline",
           "check_k", "check_matrix", "choose_k", "default_k", "knn_match", "match_neighbours",
           "nearest_neighbours", "norm_matched_random", "phase_times", "query_stand_in",
           "row_squares", "select_tokens"]
