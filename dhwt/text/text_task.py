"""Natural text served as causal-LM or masked-LM batches: the Task interface
(dhwt.languages.task) for a tokenized corpus, with no ground truth (`truth` is None).

Training: `train_batch(generator, B)` draws B windows of seq_len + 1 tokens whose start may be
any token of the train split (as in the reference study), uniformly, from `generator`; inputs
are the first seq_len tokens, targets the next seq_len; every target weighs 1 / (B * seq_len).

Evaluation ("valid", "test"): the split cut into consecutive windows of seq_len predictions
(window w reads tokens [w L, (w+1) L) and predicts [w L + 1, (w+1) L + 1)), so every token but
the first is predicted exactly once, with the context since its window start; the last window
is shorter (its missing positions have target -100 and weight 0; causal attention keeps them
from touching real positions). exp(loss) of this batch is the perplexity under that windowing.
"train" evaluates `eval_windows` windows spread evenly over the train split (default: as many
as valid has, at most TRAIN_WINDOWS: a fixed sample for the training curve, which need not cost
as much as the whole valid split). `eval_windows` caps every split (e.g. for smoke tests).

Masked LM (`objective="mlm"`): the vocabulary gains [MASK] (the last id); windows are seq_len
tokens and every target is at its own position, masked by dhwt.text.masking's rule (rate
`mask_rate`, rule `mask_rule`); the loss is on the chosen positions only, each weighing 1 / (the
batch's chosen positions). Training draws the masks afresh from the generator; evaluation cuts
a split into consecutive windows of seq_len tokens (every token in one window; the last one
padded) and masks them once, from a generator seeded with EVAL_MASK_SEED and the split, so the
evaluation masks, and the numbers, are the same in every run with the same data, seq_len and
masking. exp(loss) is the masked-token perplexity on those masks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from dhwt.errors import DhwtError
from dhwt.languages.batch import Batch, stack_batches
from dhwt.languages.language import MASK, check_objective
from dhwt.text.corpus import SPLITS, find_corpus
from dhwt.text.masking import MASK_RATE, MASK_RULE, apply_mask
from dhwt.text.token_cache import tokenize_corpus
from dhwt.text.twins import plant_twins

IGNORE = -100
#: At most this many windows in the "train" evaluation sample unless eval_windows says otherwise.
TRAIN_WINDOWS = 1024
#: The evaluation masks of split i (in SPLITS' order) come from a generator seeded with this + i.
EVAL_MASK_SEED = 20_240_000


class TextTask:
    """A tokenized corpus served for causal or masked language modelling (see the module doc)."""

    truth = None
    #: The planted twins' truth (dhwt.text.twins), if any.
    twins: dict | None = None
    #: The checksum of the corpus it was read from (dhwt.text.corpus.Corpus), if any.
    checksum: str | None = None

    def __init__(self, ids: Mapping[str, np.ndarray], vocab: tuple[str, ...], seq_len: int,
                 eval_windows: int | None = None, objective: str = "clm",
                 mask_rate: float = MASK_RATE, mask_rule: str = MASK_RULE) -> None:
        self.objective = check_objective(objective)
        if objective == "mlm" and MASK in vocab:
            raise DhwtError(f"the corpus's vocabulary has {MASK!r} already; a masked LM adds it "
                            "as its own token")
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise DhwtError(f"seq_len must be a positive integer, got {seq_len!r}")
        if eval_windows is not None and (isinstance(eval_windows, bool)
                                         or not isinstance(eval_windows, int) or eval_windows < 1):
            raise DhwtError(f"eval_windows must be a positive integer or None, got "
                            f"{eval_windows!r}")
        self._span = seq_len + 1 if objective == "clm" else seq_len
        if len(ids["train"]) < self._span:
            raise DhwtError(f"the train split has {len(ids['train'])} tokens; a window needs "
                            + (f"seq_len + 1 = {seq_len + 1}" if objective == "clm" else
                               f"seq_len = {seq_len}"))
        self.vocab = vocab + (MASK,) if objective == "mlm" else vocab
        self.symbols = self.vocab
        self.mask_rate, self.mask_rule = mask_rate, mask_rule
        self.seq_len = seq_len
        self._ids = dict(ids)
        self._eval_windows = eval_windows
        self._eval: dict[str, Batch] = {}

    def n_strings(self, split: str) -> int:
        """Number of evaluation windows of a split."""
        return len(self._window_starts(split))

    def token_counts(self) -> np.ndarray:
        """(V,) int64 occurrences of each token id in the train split: the tokens training sees
        (the trainer writes them to RUN_DIR/token_counts.npy for `dhwt analyze --tokens seen`)."""
        return np.bincount(self._ids["train"], minlength=len(self.vocab)).astype(np.int64)

    def train_batch(self, generator: torch.Generator, batch_size: int | None = None) -> Batch:
        """batch_size windows starting at uniformly drawn tokens of the train split."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise DhwtError("a text task needs a positive integer batch size (a full batch "
                            f"would be the whole corpus), got {batch_size!r}")
        train = self._ids["train"]
        starts = torch.randint(0, len(train) - self._span + 1, (batch_size,), generator=generator)
        tokens = torch.from_numpy(
            train[starts.numpy()[:, None] + np.arange(self._span)].astype(np.int64))
        if self.objective == "mlm":
            return self._masked(tokens, generator, None)
        weights = torch.full((batch_size, self.seq_len), 1.0 / (batch_size * self.seq_len))
        return Batch(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous(), weights, None)

    def _masked(self, tokens: torch.Tensor, generator: torch.Generator,
                real: torch.Tensor | None) -> Batch:
        """An MLM batch of (B, seq_len) windows: the masking rule applied (only where `real`;
        elsewhere padding)."""
        inputs, chosen = apply_mask(tokens, self.mask_rate, self.mask_rule, len(self.vocab) - 1,
                                    generator, real)
        weights = chosen / max(int(chosen.sum()), 1)
        padding = None if real is None else ~real
        return Batch(inputs, tokens.masked_fill(~chosen, IGNORE), weights.float(), padding)

    def train_batches(self, generators: Sequence[torch.Generator],
                      batch_size: int | None = None) -> Batch:
        """(S, B, L) batches, member s's `train_batch` of generators[s]."""
        return stack_batches([self.train_batch(g, batch_size) for g in generators])

    def eval_batch(self, split: str) -> Batch:
        """The fixed evaluation windows of a split (see the module doc); the same tensors on
        every call (do not modify them)."""
        if split not in self._eval:
            starts = self._window_starts(split)
            if not len(starts):
                raise DhwtError(f"the {split} split has fewer than 2 tokens: nothing to evaluate")
            stream = self._ids[split]
            span = starts[:, None] + np.arange(self._span)
            valid = span < len(stream)
            tokens = np.where(valid, stream[np.minimum(span, len(stream) - 1)], 0).astype(np.int64)
            if self.objective == "mlm":
                generator = torch.Generator().manual_seed(EVAL_MASK_SEED + SPLITS.index(split))
                self._eval[split] = self._masked(torch.from_numpy(tokens), generator,
                                                 torch.from_numpy(valid))
                return self._eval[split]
            inputs = torch.from_numpy(tokens[:, :-1].copy())
            targets = torch.from_numpy(np.where(valid[:, 1:], tokens[:, 1:], IGNORE))
            weights = torch.from_numpy(valid[:, 1:] / valid[:, 1:].sum()).float()
            self._eval[split] = Batch(inputs, targets, weights, None)
        return self._eval[split]

    def _window_starts(self, split: str) -> np.ndarray:
        if split not in SPLITS:
            raise DhwtError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        # the positions a split predicts: every token but the first (clm), every token (mlm)
        length, step = len(self._ids[split]) - self._span + self.seq_len, self.seq_len
        if split == "train":
            wanted = self._eval_windows or min(TRAIN_WINDOWS,
                                               max(1, len(self._window_starts("valid"))))
            count = length // step
            picks = np.linspace(0, count - 1, min(wanted, count)).round().astype(np.int64)
            return np.unique(picks) * step
        starts = np.arange(0, max(length, 0), step)
        return starts[: self._eval_windows] if self._eval_windows else starts


def load_text_task(corpus: str | Path, tokenizer: str, seq_len: int, *,
                   source: str | Path | None = None, cache_dir: str | Path | None = None,
                   eval_windows: int | None = None, objective: str = "clm",
                   mask_rate: float = MASK_RATE, mask_rule: str = MASK_RULE,
                   twins: int | list[str] | None = None, twin_p: float = 0.5,
                   twin_kind: str = "sem", twin_seed: int = 0) -> TextTask:
    """A TextTask for a corpus (`wikitext-2` or a path, see load_corpus) and a tokenizer name
    (`gpt2`, `bpe:N`, `word`, `char`); token ids come from the cache (dhwt.text.token_cache).
    `source`: where WikiText-2 lies (folder or archive), instead of the environment. `twins`:
    plant twins in the token ids (dhwt.text.twins); the task's `twins` is then the planted
    truth (else None). The task's `checksum` is the corpus'."""
    found = find_corpus(corpus, source)
    tokens = tokenize_corpus(found, tokenizer, cache_dir)
    ids, vocab, planted = tokens.ids, tokens.vocab, None
    if twins is not None:
        planted = plant_twins(ids, vocab, twins, p=twin_p, kind=twin_kind, seed=twin_seed)
        ids, vocab = planted.ids, planted.vocab
    task = TextTask(ids, vocab, seq_len, eval_windows, objective, mask_rate, mask_rule)
    task.twins = None if planted is None else planted.truth
    task.checksum = found.checksum
    return task
