"""dhwt.analysis.corpus_dh: counts, profiles and relations against values derived here by brute
force, and the exact relations of the built-in grammars against dhwt.languages.truth (#18)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from scipy import sparse

from dhwt.analysis import corpus_dh as cdh
from dhwt.analysis.knn import nearest_neighbours
from dhwt.errors import DhwtError
from dhwt.languages import compute_truth, load_language
from dhwt.languages.language import EOS, language_from_spec, symbol_strings


def _brute_stream(ids: list[int], order: int, bos: int) -> Counter:
    """(context tuple, next) -> count, the context padded with bos before the stream."""
    padded = [bos] * order + list(ids)
    return Counter((tuple(padded[t:t + order]), padded[t + order]) for t in range(len(ids)))


def _as_counter(counts: cdh.Counts) -> Counter:
    coo = counts.joint.tocoo()
    return Counter({(tuple(counts.contexts[r].tolist()), int(c)): v
                    for r, c, v in zip(coo.row, coo.col, coo.data)})


@pytest.mark.parametrize("order", [1, 2, 3])
def test_stream_counts_and_profiles_equal_a_brute_force_count(order):
    rng = np.random.default_rng(order)
    ids = rng.integers(0, 5, size=3000)
    names = tuple("abcde")
    counts = cdh.count_stream(ids, names, order, progress=False)
    brute = _brute_stream(ids.tolist(), order, bos=5)
    assert _as_counter(counts) == brute
    assert counts.vocab[-1] == cdh.BOS and counts.bos == 5
    # input profile: N(u a, y) summed over u gives the bigram count N(a, y) (order 1: itself)
    bigram = Counter()
    for (context, y), n in brute.items():
        bigram[context[-1], y] += n
    dense_in = np.zeros((6, 6))
    for (a, y), n in bigram.items():
        dense_in[a, y] = n
    columns = cdh.input_matrix(counts)
    coo = columns.tocoo()
    base = len(counts.vocab)
    keys = np.unique((counts.keys[counts.joint.tocoo().row] // base) * base
                     + counts.joint.tocoo().col)
    summed = np.zeros((6, 6))
    np.add.at(summed, (coo.row, keys[coo.col] % base), coo.data)
    np.testing.assert_array_equal(summed, dense_in)
    # output profile: row a over contexts is N(c, a)
    out = cdh.output_matrix(counts).toarray()
    for (context, y), n in brute.items():
        row = np.searchsorted(counts.keys, sum(t * base ** (order - 1 - j)
                                               for j, t in enumerate(context)))
        assert out[y, row] == n


def test_stream_counts_cross_chunk_boundaries(monkeypatch):
    monkeypatch.setattr(cdh, "CHUNK", 7)
    ids = np.random.default_rng(0).integers(0, 3, size=100)
    assert _as_counter(cdh.count_stream(ids, "xyz", 2, progress=False)) == _brute_stream(
        ids.tolist(), 2, bos=3)


def test_string_counts_weight_every_position_and_end():
    rows = np.array([[0, 1, 1], [1, 0, -1], [2, -1, -1]])
    weights = np.array([0.5, 0.3, 0.2])
    counts = cdh.count_strings(rows, weights, ("a", "b", "c", "END"), 2)
    brute: Counter = Counter()
    for row, w in zip(rows.tolist(), weights):
        string = [t for t in row if t >= 0] + [3]
        for (context, y), n in _brute_stream(string, 2, bos=4).items():
            brute[context, y] += w * n
    got = _as_counter(counts)
    assert got.keys() == brute.keys()
    for key in brute:
        assert got[key] == pytest.approx(brute[key])


def _bigram_counts(matrix: np.ndarray, names: tuple[str, ...]) -> cdh.Counts:
    """Order-1 Counts with joint[a, y] = matrix[a, y] (contexts = the tokens, BOS unused)."""
    v = len(names) + 1
    joint = np.zeros((v, v))
    joint[:-1, :-1] = matrix
    keep = joint.sum(axis=1) > 0
    ids = np.flatnonzero(keep)
    return cdh.Counts((*names, cdh.BOS), 1, ids[:, None], ids, sparse.csr_matrix(joint[keep]))


def test_hand_built_bigram_relations():
    # a and b are followed alike (0.5 x, 0.5 y) and so are x and y: sem; c is followed by x
    # only. a, b and c are each predicted once after x and once after y: cnd
    m = np.array([
        # a  b  c  x  y
        [0, 0, 0, 2, 2],  # after a
        [0, 0, 0, 3, 3],  # after b
        [0, 0, 0, 4, 0],  # after c
        [1, 1, 1, 0, 0],  # after x
        [1, 1, 1, 0, 0],  # after y
    ], float)
    counts = _bigram_counts(m, tuple("abcxy"))
    tokens = np.arange(5)
    sem = cdh.semantic_distance(counts, tokens) <= 1e-12
    cnd = cdh.conditional_distance(counts, tokens) <= 1e-12
    assert {tuple(p) for p in zip(*np.nonzero(np.triu(sem, 1)))} == {(0, 1), (3, 4)}
    assert {tuple(p) for p in zip(*np.nonzero(np.triu(cnd, 1)))} == {(0, 1), (0, 2), (1, 2)}
    # x is predicted after a, b, c 2 + 3 + 4 times, y 2 + 3 + 0: relative L1 |4 - 0| / (9 + 5)
    assert cdh.conditional_distance(counts, tokens)[3, 4] == pytest.approx(4 / 14)
    # sem distance of a and c: after a TV(0.5/0.5, 1/0) = 0.5, after c the same; weights 4, 4
    assert cdh.semantic_distance(counts, tokens)[0, 2] == pytest.approx(0.5)
    assert cdh.dh_violation(sem, cnd) == (0.75, 3, 4)  # a~b in both; x~y, a~c, b~c in one


def test_symmetric_counts_give_identical_neighbourhoods():
    rng = np.random.default_rng(3)
    m = rng.poisson(3.0, size=(40, 40)).astype(float)
    counts = _bigram_counts(m + m.T, tuple(f"t{i}" for i in range(40)))
    found = cdh.neighbourhoods(counts, dim=10, k=5)
    assert len(found.tokens) == 40
    assert found.match.mean_overlap == pytest.approx(1.0)  # input = output profiles: the same space
    assert found.chance.mean_overlap < 0.4
    assert cdh.violating_pairs(found, 5) == []  # cos_in = cos_out for every pair


def test_ppmi_by_hand():
    m = np.array([[3.0, 1.0], [0.0, 2.0]])
    got = cdh.ppmi(sparse.csr_matrix(m), alpha=0.75).toarray()
    col = m.sum(axis=0) ** 0.75
    col /= col.sum()
    with np.errstate(divide="ignore"):
        expected = np.log(m / m.sum() / (m.sum(axis=1, keepdims=True) / m.sum()) / col)
    np.testing.assert_allclose(got, np.where(m > 0, np.maximum(expected, 0), 0))


def test_sparse_and_dense_svd_agree(monkeypatch):
    rng = np.random.default_rng(1)
    m = sparse.random(60, 50, density=0.3, random_state=2, format="csr")
    dense = cdh.embed(m, 5)
    monkeypatch.setattr(cdh, "DENSE_ENTRIES", 0)
    arpack = cdh.embed(m, 5, seed=int(rng.integers(100)))
    np.testing.assert_allclose(np.abs(dense), np.abs(arpack), atol=1e-8)  # up to signs


GRAMMARS = [("four-cases", {}), ("parity", {"n_bits": 3}), ("parity-dh", {"n_bits": 3}),
            ("parity-nocnd", {"n_bits": 3}), ("parity", {"n_bits": 3, "classes.1.skew": 0.4})]


@pytest.mark.parametrize("grammar, overrides", GRAMMARS)
def test_exact_relations_at_full_order_equal_the_truth(grammar, overrides):
    language = load_language(grammar, overrides)
    rows, probs = symbol_strings(language)
    counts = cdh.count_strings(rows, probs, (*language.symbols, EOS), rows.shape[1])
    truth = compute_truth(language, "clm")
    symbols = np.arange(len(language.symbols))
    sem = cdh.semantic_distance(counts, symbols) <= 1e-9
    cnd = cdh.conditional_distance(counts, symbols) <= 1e-9
    np.testing.assert_array_equal(sem, truth.sem)
    np.testing.assert_array_equal(cnd, truth.cnd)
    assert cdh.dh_violation(sem, cnd) == cdh.dh_violation(truth.sem, truth.cnd)


def test_four_cases_has_one_pair_of_each_kind_and_dh_holding_gives_zero():
    language = load_language("four-cases")
    rows, probs = symbol_strings(language)
    counts = cdh.count_strings(rows, probs, (*language.symbols, EOS), rows.shape[1])
    symbols = np.arange(len(language.symbols))
    sem = cdh.semantic_distance(counts, symbols) <= 1e-9
    cnd = cdh.conditional_distance(counts, symbols) <= 1e-9
    name = language.symbols.index
    assert sem[name("a1"), name("a2")] and cnd[name("a1"), name("a2")]
    assert sem[name("b1"), name("b2")] and not cnd[name("b1"), name("b2")]
    assert cnd[name("c"), name("d")] and not sem[name("c"), name("d")]
    assert not sem[name("e"), name("f")] and not cnd[name("e"), name("f")]
    assert cdh.dh_violation(sem, cnd) == (2 / 3, 2, 3)
    dh = load_language("parity-dh", {"n_bits": 3})
    rows, probs = symbol_strings(dh)
    counts = cdh.count_strings(rows, probs, (*dh.symbols, EOS), rows.shape[1])
    ids = np.arange(len(dh.symbols))
    assert cdh.dh_violation(cdh.semantic_distance(counts, ids) <= 1e-9,
                            cdh.conditional_distance(counts, ids) <= 1e-9)[0] == 0.0


DELAYED = {"family": "automaton", "start": "s",
           "classes": {n: {"variants": [n]} for n in ("a", "b", "c", "e1", "e2")},
           "states": {"s": [{"emit": "a", "to": "A", "p": 0.5}, {"emit": "b", "to": "B", "p": 0.5}],
                      "A": [{"emit": "c", "to": "A2", "p": 1.0}],
                      "B": [{"emit": "c", "to": "B2", "p": 1.0}],
                      "A2": [{"emit": "e1", "to": "end", "p": 1.0}],
                      "B2": [{"emit": "e2", "to": "end", "p": 1.0}]}}


def test_the_last_position_alone_misses_a_delayed_difference():
    """a c e1 | b c e2: after a and after b comes c (the input profiles I_a = I_b), but the
    contexts `a c` and `b c` differ: a and b are not semantically equivalent."""
    language = language_from_spec(DELAYED, "delayed")
    rows, probs = symbol_strings(language)
    counts = cdh.count_strings(rows, probs, (*language.symbols, EOS), rows.shape[1])
    truth = compute_truth(language, "clm")
    ids = np.arange(len(language.symbols))
    a, b = language.symbols.index("a"), language.symbols.index("b")
    assert not truth.sem[a, b]
    assert cdh.semantic_distance(counts, ids)[a, b] > 0
    assert cdh.semantic_distance(counts, ids, positions=[counts.order - 1])[a, b] == 0


def test_many_samples_find_the_exact_relations_at_order_one():
    language = load_language("four-cases")
    rows, probs = symbol_strings(language)
    exact = cdh.count_strings(rows, probs, (*language.symbols, EOS), 1)
    drawn = cdh.count_strings(rows, cdh.sample_weights(probs, 200_000, 0),
                              (*language.symbols, EOS), 1)
    ids = np.arange(len(language.symbols))
    for distance in (cdh.semantic_distance, cdh.conditional_distance):
        np.testing.assert_array_equal(distance(drawn, ids) <= 0.05, distance(exact, ids) <= 1e-9)


def _brute_neighbours(x: np.ndarray, k: int) -> list[set[int]]:
    """Each row's k nearest others by cosine, by sorting the full similarity matrix."""
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return [set(np.argsort(-row)[:k].tolist()) for row in similarity]


def test_frequency_null_equals_the_mean_over_every_within_bin_permutation():
    rng = np.random.default_rng(3)
    x_in, x_out = rng.normal(size=(2, 7, 3))
    counts = np.array([5, 1, 9, 3, 7, 2, 8])
    near_in, near_out = (nearest_neighbours(x, 2, "cos").indices for x in (x_in, x_out))
    null = cdh.frequency_null(near_in, near_out, counts, bins=3, permutations=500, seed=1)
    bins = [[1, 5, 3], [0, 4], [6, 2]]  # by hand: counts 1 2 3 | 5 7 | 8 9 (3 bins of 7)
    assert [sorted(np.flatnonzero(null.bins == b)) for b in range(3)] == [sorted(b) for b in bins]
    brute_in = _brute_neighbours(x_in, 2)
    per_token, means = [], set()
    for parts in itertools.product(*(itertools.permutations(b) for b in bins)):
        pi = np.arange(7)
        for b, image in zip(bins, parts):
            pi[b] = image
        relabelled = _brute_neighbours(x_out[pi], 2)  # token i has pi(i)'s output vector
        overlap = np.array([len(a & b) / 2 for a, b in zip(brute_in, relabelled)])
        per_token.append(overlap)
        means.add(round(float(overlap.mean()), 9))
    assert len(per_token) == 3 * 2 * 1 * 2 * 2
    np.testing.assert_allclose(null.expected, np.mean(per_token, axis=0), atol=1e-12)
    assert {round(float(m), 9) for m in null.permuted} <= means  # each draw is one of them
    assert null.interval()[0] <= null.mean_overlap <= null.interval()[1]


def _grouped_stream(twins: float, n: int = 100_000, seed: int = 0) -> np.ndarray:
    """40 tokens in 4 groups of 10 with stationary shares 0.4, 0.3, 0.2, 0.1: the next token
    stays in the group with probability 0.9 (else jumps to a group drawn by the shares), and
    is uniform within its group, or with probability `twins` one of the current token's twin
    pair (2i, 2i + 1). Without twins, a token's profiles on both sides are its group's (up to
    noise): frequency alone decides its neighbours."""
    rng = np.random.default_rng(seed)
    jump, to = rng.random(n) < 0.1, rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    twin, within, side = rng.random(n) < twins, rng.integers(0, 10, n), rng.integers(0, 2, n)
    ids, current = np.empty(n, np.int64), 0
    for t in range(n):
        group = to[t] if jump[t] else current // 10
        current = group * 10 + (current % 10 // 2 * 2 + side[t] if twin[t] and not jump[t]
                                else within[t])
        ids[t] = current
    return ids


def test_frequency_null_keeps_what_frequency_explains_and_not_more():
    names = tuple(str(i) for i in range(40))
    alike = cdh.neighbourhoods(cdh.count_stream(_grouped_stream(0.0), names, 1, progress=False),
                               dim=100, k=2, null_bins=4)
    groups = alike.tokens // 10
    assert (np.bincount(alike.frequency_null.bins) == 10).all()  # the bins are the groups
    assert (groups[alike.near_in.indices] == groups[:, None]).all()
    assert (groups[alike.near_out.indices] == groups[:, None]).all()
    # every neighbour a group mate: the null is 2 of 9 group mates, chance 2 of 39 tokens
    assert alike.frequency_null.mean_overlap == pytest.approx(2 / 9)
    assert alike.chance.mean_overlap < 2 / 9 / 2
    low, high = alike.frequency_null.interval()
    assert low <= alike.match.mean_overlap <= high  # frequency explains all of it
    twins = cdh.neighbourhoods(cdh.count_stream(_grouped_stream(0.5), names, 1, progress=False),
                               dim=100, k=2, null_bins=4)
    assert twins.frequency_null.mean_overlap == pytest.approx(2 / 9)
    assert twins.match.mean_overlap > twins.frequency_null.interval()[1]  # the twins agree
    assert twins.frequency_null.p_value(twins.match.mean_overlap) == 1 / 201


def test_bad_input_is_a_dhwt_error():
    with pytest.raises(DhwtError, match="order must be an integer >= 1"):
        cdh.count_stream(np.array([0, 1]), "ab", 0)
    with pytest.raises(DhwtError, match="too high"):
        cdh.count_stream(np.array([0, 1]), tuple(str(i) for i in range(50_000)), 4)
    with pytest.raises(DhwtError, match="empty"):
        cdh.count_stream(np.array([], np.int64), "ab", 1)
    with pytest.raises(DhwtError, match="dim must be an integer >= 1"):
        cdh.embed(sparse.eye(3, format="csr"), 0)
    with pytest.raises(DhwtError, match="samples must be an integer >= 1"):
        cdh.sample_weights(np.array([1.0]), 0, 0)
    near = np.array([[1], [0], [3], [2]])
    with pytest.raises(DhwtError, match="permutations must be an integer >= 1"):
        cdh.frequency_null(near, near, np.ones(4), permutations=0)
    with pytest.raises(DhwtError, match="null bins must be an integer >= 1"):
        cdh.frequency_null(near, near, np.ones(4), bins=0)


def _agreement_script():
    """experiments/corpus_dh/agreement.py as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "experiments" / "corpus_dh" / "agreement.py"
    spec = importlib.util.spec_from_file_location("corpus_dh_agreement", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agreement_rank_correlations_on_synthetic_overlaps(tmp_path):
    script = _agreement_script()
    # ranks x 1 2.5 2.5 4, y 1 3 2 4: centred dot 4.5 over sqrt(4.5 * 5)
    assert script.spearman(np.array([1, 2, 2, 3]), np.array([1, 3, 2, 4])) == pytest.approx(
        4.5 / np.sqrt(22.5))
    rng = np.random.default_rng(0)
    count = rng.lognormal(3, 1.5, 500)
    z = np.log(count)
    both = {"id": np.arange(500), "token": np.arange(500).astype(str).astype(object),
            "count": count, "overlap": z + rng.normal(size=500), "null": np.zeros(500)}
    model = z + rng.normal(size=500)  # tied to the corpus overlap through frequency only
    result = script.agreement(both, model, model, draws=100)
    rho, low, high = result["rho"]
    assert low <= rho <= high and low > 0.5
    _, low, high = result["partial_rho_given_log_count"]
    assert low < 0 < high  # nothing beyond frequency
    same = script.agreement(both, both["overlap"] * 2 + 1, both["overlap"], draws=20)
    assert same["rho"] == (1.0, 1.0, 1.0) and same["partial_rho_given_log_count"][1] > 0.99
    (tmp_path / "per_token.csv").write_text(
        "id,token,count,intersection,overlap,jaccard,chance_intersection,frequency_bin,"
        "frequency_null_overlap\n7,the,12.0,3,0.3,0.18,0,1,0.1\n")
    read = script.read_per_token(tmp_path)
    assert read["id"].tolist() == [7] and read["null"].tolist() == [0.1]
