"""Languages with exact ground truth: grammar specs (synthetic/*.toml), their class-string
distributions, exact conditionals and equivalence relations, datasets on disk, and the Task
that serves batches to the trainer."""

from dhwt.languages.batch import Batch
from dhwt.languages.dataset import write_dataset
from dhwt.languages.language import Language, load_language
from dhwt.languages.task import Task, load_task
from dhwt.languages.truth import GroundTruth, compute_truth

__all__ = [
    "Batch", "GroundTruth", "Language", "Task", "compute_truth", "load_language", "load_task",
    "write_dataset",
]
