"""A language served as batches for one objective: what the trainer consumes.

Variants are drawn afresh every time a string is served (inverse CDF on a per-class cumulative
table, vectorised in torch), as in the paper; MLM masks one maskable position per string, chosen
uniformly, with the loss only there; CLM reads [BOS] + string and predicts string + [EOS].
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from dhwt.errors import DhwtError
from dhwt.languages.batch import Batch
from dhwt.languages.dataset import dataset_checksum, read_dataset
from dhwt.languages.enumeration import PAD
from dhwt.languages.language import BOS, EOS, MASK, PAD_TOKEN, Language, check_objective
from dhwt.languages.splits import SPLITS
from dhwt.languages.truth import GroundTruth, compute_truth

#: Seed of the fixed variant draws in eval batches (the same tensors every call).
EVAL_SEED = 14
IGNORE = -100


class Task:
    """One language, its split assignment, one objective ("mlm" or "clm").

    vocab: token ids (grammar symbols first, then the objective's special tokens);
    symbols: the grammar symbols only; seq_len: L of every batch; checksum: that of the dataset
    directory it was read from (dhwt.languages.dataset.dataset_checksum), None if built here.
    """

    def __init__(self, language: Language, split: np.ndarray, objective: str,
                 checksum: str | None = None) -> None:
        self.language = language
        self.checksum = checksum
        self.objective = check_objective(objective)
        self.vocab = language.vocab(objective)
        self.symbols = language.symbols
        width = language.strings.shape[1]
        self.seq_len = width if objective == "mlm" else width + 1
        self._split = np.asarray(split)
        self._ids = {token: i for i, token in enumerate(self.vocab)}
        self._padded = not language.equal_lengths

        n_classes = len(language.classes)
        self._pad_class = n_classes
        self._classes = torch.from_numpy(
            np.where(language.strings == PAD, n_classes, language.strings)).long()
        most = max(len(c.variants) for c in language.classes)
        # cum[c, k] = P(variant <= k) for k below the last variant, 2 beyond: a draw u in [0, 1)
        # picks variant #(u >= cum[c]); the pad class always gives variant 0 = [PAD].
        cum = torch.full((n_classes + 1, most), 2.0)
        offset = torch.zeros(n_classes + 1, dtype=torch.long)
        first = 0
        for c, cls in enumerate(language.classes):
            cum[c, : len(cls.probs) - 1] = torch.tensor(np.cumsum(cls.probs)[:-1])
            offset[c] = first
            first += len(cls.variants)
        offset[n_classes] = self._ids.get(PAD_TOKEN, 0)
        self._cum, self._offset = cum, offset

        self._probs = torch.from_numpy(language.probs).double()
        lengths = torch.from_numpy(language.lengths).long()
        real = torch.from_numpy(language.strings != PAD)
        maskable = torch.from_numpy(language.maskable[language.strings]) & real
        self._maskable = maskable
        self._mask_cum = maskable.long().cumsum(dim=1)
        self._n_masks = maskable.sum(dim=1)
        steps = torch.arange(width + 1)
        self._valid = steps[None, :] <= lengths[:, None]  # clm: target positions
        self._eos = steps[None, :] == lengths[:, None]
        self._train = self.indices("train")
        train_probs = self._probs[self._train]
        self._train_cdf = train_probs.cumsum(0) / train_probs.sum()
        self._eval: dict[str, Batch] = {}
        self._truth: GroundTruth | None = None

    def indices(self, split: str) -> torch.Tensor:
        """Indices (into language.strings) of the strings of a split."""
        if split not in SPLITS:
            raise DhwtError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        return torch.from_numpy(np.flatnonzero(self._split == SPLITS.index(split)))

    def n_strings(self, split: str) -> int:
        """Number of class strings in a split."""
        return len(self.indices(split))

    @property
    def truth(self) -> GroundTruth:
        """Exact ground truth of the language under this objective (computed once)."""
        if self._truth is None:
            self._truth = compute_truth(self.language, self.objective)
        return self._truth

    def train_batch(self, generator: torch.Generator, batch_size: int | None = None) -> Batch:
        """A training batch, variants (and mask positions) drawn afresh from `generator`.
        batch_size None: every training string once, weighted by its probability; an int: that
        many strings drawn with replacement by probability, equally weighted."""
        return self.train_batches([generator], batch_size).member(0)

    def train_batches(self, generators: Sequence[torch.Generator],
                      batch_size: int | None = None) -> Batch:
        """(S, B, L) training batches for S ensemble members: member s's is `train_batch` of
        generators[s]. Each generator makes its own draws in a fixed order (the strings when
        batch_size is an int, the variants, the MLM mask positions), so member s's batch depends
        on generators[s] alone; everything after the draws runs once for all members."""
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, int) or batch_size < 1):
            raise DhwtError(f"batch_size must be a positive integer or None, got {batch_size!r}")
        rows = len(self._train) if batch_size is None else batch_size
        width = self._classes.shape[1]
        picks, variants, masks = [], [], []
        for generator in generators:
            if batch_size is not None:
                picks.append(torch.rand(batch_size, generator=generator, dtype=torch.float64))
            variants.append(torch.rand((rows, width), generator=generator))
            if self.objective == "mlm":
                masks.append(torch.rand(rows, generator=generator))
        if batch_size is None:  # (B,): every member serves every string, gathered once
            idx, string_weights = self._train, self._probs[self._train]
        else:  # (S, B)
            pick = torch.searchsorted(self._train_cdf, torch.stack(picks), right=True)
            idx, string_weights = self._train[pick.clamp_max(len(self._train) - 1)], None
        tokens = self._variants(idx, torch.stack(variants))  # (S, B, W) either way
        if self.objective == "clm":
            return self._clm_batch(idx, tokens, string_weights)
        n_masks = self._n_masks[idx]
        k = torch.minimum((torch.stack(masks) * n_masks).long(), n_masks - 1)
        positions = (self._mask_cum[idx] <= k[..., None]).sum(dim=-1)
        weights = torch.full((rows,), 1.0 / rows, dtype=torch.float64) \
            if string_weights is None else string_weights / string_weights.sum()
        return self._mlm_batch(idx, tokens, positions, weights.expand(positions.shape))

    def eval_batch(self, split: str) -> Batch:
        """A deterministic batch covering every string of the split (mlm: once per maskable
        position, weighted by P(x) / m(x)), variants drawn with a fixed seed; the same tensors on
        every call (do not modify them)."""
        if split not in self._eval:
            idx = self.indices(split)
            if not len(idx):
                raise DhwtError(f"the {split} split is empty (its fraction was 0 when the "
                                "dataset was written)")
            generator = torch.Generator().manual_seed(EVAL_SEED)
            tokens = self._variants(idx, torch.rand(self._classes[idx].shape, generator=generator))
            probs = self._probs[idx]
            if self.objective == "clm":
                self._eval[split] = self._clm_batch(idx, tokens, probs)
            else:
                n_masks = self._n_masks[idx]
                row, positions = torch.nonzero(self._maskable[idx], as_tuple=True)
                weights = (probs / n_masks)[row]
                self._eval[split] = self._mlm_batch(idx[row], tokens[row], positions,
                                                    weights / weights.sum())
        return self._eval[split]

    def _variants(self, idx: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """(..., W) token ids of strings `idx` (...): each position's variant picked from its
        class by the uniform draw u (..., W) (pads give [PAD]); u may have leading member dims
        that idx lacks (the strings shared by every member)."""
        classes = self._classes[idx]
        return self._offset[classes] + (u.unsqueeze(-1) >= self._cum[classes]).sum(dim=-1)

    def _mlm_batch(self, idx, tokens, positions, weights) -> Batch:
        """Strings `idx` with the token at `positions` (the shape of tokens but its last dim)
        masked and weighted; idx may lack tokens' leading member dims (shared strings)."""
        at = positions.unsqueeze(-1)
        targets = torch.full_like(tokens, IGNORE).scatter_(-1, at, tokens.gather(-1, at))
        tokens = tokens.scatter_(-1, at, self._ids[MASK])
        loss_weights = torch.zeros(tokens.shape).scatter_(-1, at, weights.float().unsqueeze(-1))
        padding = None
        if self._padded:
            padding = (self._classes[idx] == self._pad_class).expand(tokens.shape).contiguous()
        return Batch(tokens, targets, loss_weights, padding)

    def _clm_batch(self, idx, tokens, string_weights) -> Batch:
        """string_weights (the shape of idx) None: every target token weighs the same; else each
        string's tokens weigh string_weights[i], normalised over all target tokens (per-token
        average). Leading dimensions of `tokens` beyond the strings' are members, each
        normalised on its own; idx may lack them (shared strings)."""
        column = torch.full((*tokens.shape[:-1], 1), self._ids[BOS])
        inputs = torch.cat([column, tokens], dim=-1)
        targets = torch.cat([tokens, column], dim=-1)
        valid = self._valid[idx]
        targets = torch.where(self._eos[idx], self._ids[EOS], targets).masked_fill_(~valid, IGNORE)
        if string_weights is None:
            weights = valid.double()
        else:
            weights = valid * string_weights[..., None]
        weights = weights.expand(targets.shape)
        weights = (weights / weights.sum(dim=(-2, -1), keepdim=True)).float()
        padding = (~valid).expand(targets.shape).contiguous() if self._padded else None
        return Batch(inputs, targets, weights, padding)


def load_task(dataset_dir: str | Path, objective: str) -> Task:
    """The task of a dataset directory written by `write_dataset` (or `dhwt synth --out`).

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from dhwt.languages import load_language, load_task, write_dataset
        >>> tmp = tempfile.TemporaryDirectory()
        >>> write_dataset(load_language("parity", {"n_bits": 3}), Path(tmp.name) / "data")
        >>> task = load_task(Path(tmp.name) / "data", "mlm")
        >>> task.vocab[-1], task.seq_len, task.n_strings("train")
        ('[MASK]', 4, 6)
        >>> batch = task.train_batch(torch.Generator().manual_seed(0), batch_size=5)
        >>> batch.inputs.shape, int((batch.inputs == task.vocab.index("[MASK]")).sum())
        (torch.Size([5, 4]), 5)
        >>> round(float(batch.weights.sum()), 6)  # the loss is sum(weights * cross-entropy)
        1.0
        >>> load_task(Path(tmp.name) / "data", "clm").seq_len  # reads [BOS] + the string
        5
        >>> tmp.cleanup()
    """
    check_objective(objective)
    language, split = read_dataset(dataset_dir)
    return Task(language, split, objective, dataset_checksum(dataset_dir))
