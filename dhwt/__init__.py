"""dhwt: when input and output embeddings may be tied, and how much of an embedding space the
data fixes rather than the random init. See README.md and DESIGN notes in the repository.

The library's face, each name imported on first use (PEP 562: `import dhwt` and the command
line start without torch): a run's settings (TrainConfig, ModelConfig, StudyConfig) and training
(train_run: one run; train_group: several as one ensemble; run_study: a study's runs); a run
directory read back (load_run); a synthetic language, its exact truth and its datasets
(load_language, compute_truth, write_dataset, load_task); a model's exact population fit
(population_fit); KNN Match Similarity (knn_match, chance_baseline); the analyses behind the
commands (pair_closeness, analyze, diagnose, diagnose_path with DiagnoseOptions, corpus_dh with
CorpusDhOptions); and the theorems' checks (verify).

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
    "TrainConfig": "dhwt.config.run",
    "ModelConfig": "dhwt.models.config",
    "StudyConfig": "dhwt.config.study",
    "load_run": "dhwt.runs",
    "train_run": "dhwt.training.runner",
    "train_group": "dhwt.training.runner",
    "run_study": "dhwt.training.study",
    "load_language": "dhwt.languages",
    "compute_truth": "dhwt.languages.truth",
    "write_dataset": "dhwt.languages",
    "load_task": "dhwt.languages",
    "population_fit": "dhwt.models.population",
    "knn_match": "dhwt.analysis.knn",
    "chance_baseline": "dhwt.analysis.knn",
    "pair_closeness": "dhwt.analysis.closeness",
    "analyze": "dhwt.commands.analyze",
    "diagnose": "dhwt.analysis.diagnosis",
    "diagnose_path": "dhwt.analysis.diagnose_result",
    "DiagnoseOptions": "dhwt.analysis.diagnose_result",
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
