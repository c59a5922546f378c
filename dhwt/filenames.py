"""The names dhwt gives what it writes at the top of a run directory and of a report folder.

One home for them, at the bottom of the package (no imports): dhwt.runs.layout lays a run
directory out with them, and dhwt.directories knows by them what --overwrite may replace. Code
elsewhere reaches a run's files through dhwt.runs.Run (`dhwt.load_run`), never by these names.
"""

#: The resolved config, written first of a run's files.
CONFIG = "config.toml"
#: One JSON line per member, split and evaluated step (dhwt.runs.metrics).
METRICS = "metrics.jsonl"
#: The checkpoints the run keeps (dhwt.runs.checkpoints).
CHECKPOINTS = "checkpoints"
#: The embedding snapshots (dhwt.runs.snapshots).
EMBEDDINGS = "embeddings"
#: The dataset built from a grammar for this run.
DATA = "data"
#: Training count per token id (text runs), for analysis over the tokens seen in training.
TOKEN_COUNTS = "token_counts.npy"
#: The planted twins of a text run and their exact relations (dhwt.text.twins).
TWINS = "twins.json"
#: TensorBoard event files (record.tensorboard): metrics.jsonl's numbers, a folder per member.
TENSORBOARD = "tensorboard"
#: A report folder's (a run's, a study's, `dhwt analyze --out`'s) Markdown report, its HTML
#: copy, and the folder of its figures.
REPORT = "report.md"
HTML = "report.html"
FIGURES = "figures"
#: The training curves the end-of-run report shows.
FIGURE = f"{FIGURES}/training.png"
#: What dhwt writes at the top of a run directory.
RUN = (CONFIG, METRICS, TOKEN_COUNTS, TWINS, CHECKPOINTS, EMBEDDINGS, FIGURES, DATA, TENSORBOARD,
       REPORT, HTML)
