"""Recipes: what each `dhwt` command does, on top of the components (languages, models,
training, runs, analysis, report), with their configuration from dhwt.config. A recipe
`commands/NAME.py` has one entry point, `NAME_command`: it computes a typed result through the
library (dhwt.analysis.NAME_result, or the component's: dhwt.languages.synthesis,
dhwt.runs.hf_export), renders it through dhwt.report.NAME_report (text, Markdown, figures, and
JSON through dhwt.report.json_document for --json) and returns one dhwt.report.output.Output,
which dhwt.cli.options.emit prints.

- dhwt.commands.train: `dhwt train`, a run trained by the library (dhwt.training.runner), then
  its report written.
- dhwt.commands.study: `dhwt study`, a whole study from one TOML.
- dhwt.commands.analyze: `dhwt analyze`, the report of any run directories.
- dhwt.commands.knn: `dhwt knn`, KNN match of two matrices on disk.
- dhwt.commands.export: `dhwt export`, a run's member as a checkpoint transformers loads.
- dhwt.commands.diagnose, corpus_dh, synth, verify_theorems: the other commands.
"""
