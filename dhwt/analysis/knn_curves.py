"""Similarity of embedding spaces over training, read from run directories' snapshots.

Two families of comparisons at every snapshot step:
- pairs: two members (of one run, or of two runs with the same vocabulary) compared side by
  side, input with input and output with output: KNN Match Similarity (dhwt.analysis.knn) and,
  on request, linear CKA, orthogonal Procrustes error and mutual k-NN (dhwt.analysis.similarity);
- DH diagnostic: one untied member's own input against its own output matrix (semantic vs
  distributional neighbourhoods), at the steps where it is untied (tied, the two are one matrix).
Every KNN value comes with its chance level: the same measure on norm-matched random stand-ins
(same row norms, random directions; dhwt.analysis.knn.norm_matched_random).

Work is shared: at each step the neighbours of every matrix (and of its random stand-in) are
computed once and matched against every partner, so S members cost S searches per side, not
S(S-1); a tied run's output side reuses its input side.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from dhwt.analysis.knn import (BLOCK, METRICS, Neighbours, average_weights, check_k,
                               match_neighbours, nearest_neighbours, norm_matched_random,
                               select_tokens)
from dhwt.analysis.matrices import SIDES
from dhwt.analysis.similarity import copy_residue, linear_cka, mutual_knn, procrustes
from dhwt.runs.snapshots import Snapshot, read_snapshot, snapshot_files
from dhwt.errors import DhwtError

#: Measures that can be asked for; "knn" gives jaccard, overlap and their chance levels.
MEASURES = ("knn", "cka", "procrustes", "mutual-knn")


@dataclass(frozen=True)
class Source:
    """One member of one run: what a curve compares. name labels it in reports."""

    name: str
    run: Path
    member: int


@dataclass
class Curve:
    """One comparison over the steps of a SimilarityCurves (NaN where it does not apply).

    kind "pair": a and b are two sources, side "input" or "output"; kind "dh": a == b, side
    "input-output". values: measure name -> (T,) array; names jaccard, overlap,
    chance_jaccard, chance_overlap (knn), cka, procrustes (relative error after alignment),
    mutual_knn; copy_residue (dh: ||E_in - E_out||_F / ||E_out||_F, 0 right after an untie).
    """

    kind: str
    side: str
    a: str
    b: str
    values: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.kind == "dh":
            return f"{self.a}: input vs output"
        return f"{self.a} vs {self.b} ({self.side})"


@dataclass(frozen=True)
class SimilarityCurves:
    """Every curve over the union of the runs' snapshot steps."""

    k: int
    metric: str
    steps: np.ndarray
    n_tokens: int
    curves: tuple[Curve, ...]
    tied_everywhere: bool  # every snapshot of every run is tied: "output" curves were dropped

    def of_kind(self, kind: str) -> list[Curve]:
        return [c for c in self.curves if c.kind == kind]


def parse_measures(text: str | Sequence[str]) -> tuple[str, ...]:
    """"knn,cka" -> ("knn", "cka"), validated against MEASURES."""
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text)]
    bad = [t for t in items if t not in MEASURES]
    if bad or not items:
        raise DhwtError(f"unknown similarity measure {', '.join(map(repr, bad)) or '(none)'}; "
                        f"choose from {', '.join(MEASURES)} (comma separated)")
    return tuple(dict.fromkeys(items))


def similarity_curves(sources: Sequence[Source], *, k: int = 10, metric: str = "ip",
                      measures: Sequence[str] = ("knn",), tokens: np.ndarray | None = None,
                      weights: np.ndarray | None = None, chance: bool = True, seed: int = 0,
                      pairs: bool = True, dh: bool = True, block_size: int = BLOCK,
                      progress: bool | None = False, steps: Sequence[int] | None = None,
                      device: str = "cpu") -> SimilarityCurves:
    """Pair curves between every two sources and DH curves of every source (see module doc).

    tokens: row ids to keep (e.g. tokens seen in training; neighbours are searched among them
    only); weights: (V,) per-token weights of the averages (e.g. training counts). chance: also
    the KNN chance level, with stand-ins drawn from numpy generators seeded by (seed, step,
    source, side), so results do not depend on the order of the work. steps: only these
    snapshot steps (default: every step of the runs). device: where the neighbour searches run
    (dhwt.analysis.knn.nearest_neighbours; the result does not depend on it).

    Examples:
        Two members of one tied run: unrelated at step 0, the same space (rotated) at step 10.

        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from dhwt.runs import layout
        >>> from dhwt.runs.snapshots import save_snapshot
        >>> tmp = tempfile.TemporaryDirectory()
        >>> run = Path(tmp.name)
        >>> generator = torch.Generator().manual_seed(0)
        >>> first, other = torch.randn(2, 40, 4, generator=generator)
        >>> rotation, _ = torch.linalg.qr(torch.randn(4, 4, generator=generator))
        >>> for step, second in ((0, other), (10, first @ rotation)):
        ...     weight = torch.stack([first, second])
        ...     _ = save_snapshot(run / layout.EMBEDDINGS, step, weight, weight, tied=True,
        ...                       seeds=[1, 2], vocab=tuple(f"t{i}" for i in range(40)))
        >>> result = similarity_curves([Source("seed 1", run, 0), Source("seed 2", run, 1)], k=5)
        >>> result.steps.tolist(), [curve.label for curve in result.curves]  # tied: input only
        ([0, 10], ['seed 1 vs seed 2 (input)'])
        >>> jaccard = result.curves[0].values["jaccard"]
        >>> bool(jaccard[0] < 0.5), round(float(jaccard[1]), 6)
        (True, 1.0)
        >>> sorted(result.curves[0].values)
        ['chance_jaccard', 'chance_overlap', 'jaccard', 'overlap']
        >>> similarity_curves([Source("seed 1", run, 0), Source("seed 2", run, 1)], k=5,
        ...                   steps=[10]).steps.tolist()  # only the steps asked for
        [10]
        >>> tmp.cleanup()
    """
    if metric not in METRICS:
        raise DhwtError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    measures = parse_measures(measures)
    if len({s.name for s in sources}) < len(sources):
        raise DhwtError("two sources have the same name; name every run and member distinctly")
    if not sources or (len(sources) < 2 and not dh):
        raise DhwtError("comparing members needs at least two of them")
    files = {run: snapshot_files(run) for run in _runs(sources)}
    every = sorted(set().union(*files.values()))
    if steps is not None:
        missing = sorted(set(steps) - set(every))
        if missing:
            raise DhwtError(f"no snapshot of step {missing[0]}; the runs' snapshots are at "
                            f"steps {', '.join(map(str, every))}")
        every = sorted(set(steps))
    steps = every
    first = read_snapshot(next(iter(files[sources[0].run].values())))
    n_rows = first.input.shape[1]
    ids = select_tokens(tokens, n_rows)
    w = average_weights(weights, n_rows, ids)
    check_k(k, len(ids))
    pair_list = list(itertools.combinations(range(len(sources)), 2)) if pairs else []
    curves: dict[tuple[str, str, int, int], Curve] = {}
    for i, j in pair_list:
        for side in SIDES:
            curves[("pair", side, i, j)] = Curve("pair", side, sources[i].name, sources[j].name)
    for i in range(len(sources)) if dh else ():
        curves[("dh", "input-output", i, i)] = Curve("dh", "input-output", sources[i].name,
                                                     sources[i].name)
    for curve in curves.values():
        for name in _value_names(measures, chance, curve.kind):
            curve.values[name] = np.full(len(steps), np.nan)

    all_tied = True
    untied_ever: set[int] = set()
    bar = tqdm(total=0, desc="similarity", unit="search", disable=None if progress else True)
    for t, step in enumerate(steps):
        snaps = {run: read_snapshot(paths[step]) for run, paths in files.items() if step in paths}
        for run, snap in snaps.items():
            _check_snapshot(snap, run, n_rows, sources)
            all_tied &= snap.tied
        work = _StepWork(sources, snaps, step, ids, k, metric, seed, block_size, bar, device)
        for (kind, side, i, j), curve in curves.items():
            a, b = sources[i], sources[j]
            if a.run not in snaps or b.run not in snaps:
                continue
            if kind == "dh":
                if snaps[a.run].tied:
                    continue  # one matrix: trivially identical neighbourhoods
                untied_ever.add(i)
                sides = ("input", "output")
            else:
                sides = (side, side)
            _fill(curve, t, work, (i, sides[0]), (j, sides[1]), measures, chance, w)
    bar.close()
    kept = [c for key, c in curves.items()
            if not (all_tied and key[1] == "output")
            and not (key[0] == "dh" and key[2] not in untied_ever)]
    return SimilarityCurves(k=k, metric=metric, steps=np.array(steps), n_tokens=len(ids),
                            curves=tuple(kept), tied_everywhere=all_tied)


def _value_names(measures: Sequence[str], chance: bool, kind: str) -> list[str]:
    names = []
    if "knn" in measures:
        names += ["jaccard", "overlap"] + (["chance_jaccard", "chance_overlap"] if chance else [])
    if kind == "dh":
        names.append("copy_residue")
    if kind == "pair":
        names += [{"cka": "cka", "procrustes": "procrustes", "mutual-knn": "mutual_knn"}[m]
                  for m in measures if m != "knn"]
    return names


def _fill(curve: Curve, t: int, work: _StepWork, a: tuple[int, str], b: tuple[int, str],
          measures: Sequence[str], chance: bool, w: np.ndarray) -> None:
    """Compute curve's values at step index t between matrix a and matrix b."""
    if "knn" in measures:
        match = match_neighbours(work.neighbours(*a), work.neighbours(*b), weights=w)
        curve.values["jaccard"][t] = match.mean_jaccard
        curve.values["overlap"][t] = match.mean_overlap
        if chance:
            match = match_neighbours(work.neighbours(*a, random=True),
                                     work.neighbours(*b, random=True), weights=w)
            curve.values["chance_jaccard"][t] = match.mean_jaccard
            curve.values["chance_overlap"][t] = match.mean_overlap
    x, y = work.matrix(*a), work.matrix(*b)
    if curve.kind == "dh":
        curve.values["copy_residue"][t] = copy_residue(x, y)
        return
    if "cka" in measures:
        curve.values["cka"][t] = linear_cka(x, y)
    if "procrustes" in measures:
        curve.values["procrustes"][t] = procrustes(x, y).error
    if "mutual-knn" in measures:
        curve.values["mutual_knn"][t] = mutual_knn(x, y, work.k)


class _StepWork:
    """The matrices of one step and their neighbour sets, each computed at most once."""

    def __init__(self, sources: Sequence[Source], snaps: dict[Path, Snapshot], step: int,
                 ids: np.ndarray, k: int, metric: str, seed: int, block_size: int,
                 bar: tqdm, device: str) -> None:
        self.sources, self.snaps, self.step, self.ids = sources, snaps, step, ids
        self.k, self.metric, self.seed, self.block_size, self.bar = k, metric, seed, block_size, bar
        self.device = device
        self._cache: dict[tuple[int, str, bool], Neighbours] = {}

    def _side(self, i: int, side: str) -> str:
        return "input" if self.snaps[self.sources[i].run].tied else side

    def matrix(self, i: int, side: str) -> np.ndarray:
        source = self.sources[i]
        full = getattr(self.snaps[source.run], self._side(i, side))[source.member]
        return full if len(self.ids) == full.shape[0] else full[self.ids]

    def neighbours(self, i: int, side: str, random: bool = False) -> Neighbours:
        side = self._side(i, side)
        key = (i, side, random)
        if key not in self._cache:
            self.bar.total += 1
            self.bar.refresh()
            x = self.matrix(i, side)
            if random:
                generator = np.random.default_rng([self.seed, self.step, i, SIDES.index(side)])
                x = norm_matched_random(x, generator)
            self._cache[key] = nearest_neighbours(x, self.k, self.metric,
                                                  block_size=self.block_size,
                                                  name=f"{self.sources[i].name} {side}",
                                                  device=self.device)
            self.bar.update(1)
        return self._cache[key]


def _runs(sources: Sequence[Source]) -> list[Path]:
    return list(dict.fromkeys(s.run for s in sources))


def _check_snapshot(snap: Snapshot, run: Path, n_rows: int, sources: Sequence[Source]) -> None:
    if snap.input.shape[1] != n_rows:
        raise DhwtError(f"{run} step {snap.step} has {snap.input.shape[1]} tokens, other "
                        f"snapshots {n_rows}; compared runs must share their vocabulary")
    for s in sources:
        if s.run == run and not 0 <= s.member < snap.input.shape[0]:
            raise DhwtError(f"{run} holds {snap.input.shape[0]} members; member {s.member} does "
                            "not exist")


def excess_over_chance(value: float, chance: float) -> float:
    """(value - chance) / (1 - chance): the share of the way from chance to identity."""
    if not (math.isfinite(value) and math.isfinite(chance)) or chance >= 1:
        return float("nan")
    return (value - chance) / (1 - chance)
