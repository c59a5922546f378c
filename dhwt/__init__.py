"""dhwt: when input and output embeddings may be tied, and how much of an embedding space the
data fixes rather than the random init. See README.md and DESIGN notes in the repository.

The API at the top, each name imported on first use (the command line starts without torch):
a run directory read back (load_run), training (train_run: one run; train_group: several as
one ensemble), a synthetic language and its exact truth (load_language, compute_truth), KNN
Match Similarity (knn_match, chance_baseline), the analyses behind the commands (analyze,
diagnose_path, corpus_dh), and the theorems' checks (verify).

Examples:
    >>> import numpy as np
    >>> import dhwt
    >>> rows = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> dhwt.knn_match(rows, rows[:, ::-1], k=1, metric="cos").mean_overlap
    1.0
    >>> truth = dhwt.compute_truth(dhwt.load_language("parity"), "mlm")
    >>> round(truth.bayes_accuracy, 2)
    0.7
"""

from importlib import import_module

__version__ = "0.1.0"

#: Each name of the API and the module that holds it.
_HOMES = {
    "load_run": "dhwt.runs",
    "train_run": "dhwt.training.runner",
    "train_group": "dhwt.training.runner",
    "load_language": "dhwt.languages",
    "compute_truth": "dhwt.languages.truth",
    "knn_match": "dhwt.analysis.knn",
    "chance_baseline": "dhwt.analysis.knn",
    "analyze": "dhwt.commands.analyze",
    "diagnose_path": "dhwt.commands.diagnose",
    "DiagnoseOptions": "dhwt.commands.diagnose",
    "corpus_dh": "dhwt.analysis.corpus_dh_result",
    "CorpusDhOptions": "dhwt.analysis.corpus_dh_result",
    "verify": "dhwt.theory.runner",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> object:
    """The names of __all__, each imported from its home on first use."""
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'dhwt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
