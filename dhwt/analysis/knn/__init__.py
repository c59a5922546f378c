"""Exact k nearest neighbours of every row of an embedding matrix, and KNN Match Similarity:
the blocked search (exact) and exact neighbours of a sample of query rows (sample)."""

from dhwt.analysis.knn.exact import (BLOCK, DEFAULT_K, METRICS, PRECISIONS, SLACK, TILE,
                                     WIDE_SLACK, KnnMatch, Neighbours, average_weights,
                                     candidate_precision, chance_baseline, check_k, check_matrix,
                                     choose_k, default_k, knn_match, match_neighbours,
                                     nearest_neighbours, norm_matched_random, phase_times,
                                     select_tokens)

__all__ = ["BLOCK", "DEFAULT_K", "METRICS", "PRECISIONS", "SLACK", "TILE", "WIDE_SLACK",
           "KnnMatch", "Neighbours", "average_weights", "candidate_precision", "chance_baseline",
           "check_k", "check_matrix", "choose_k", "default_k", "knn_match", "match_neighbours",
           "nearest_neighbours", "norm_matched_random", "phase_times", "select_tokens"]
