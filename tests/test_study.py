"""`dhwt study`: a whole study from one TOML, continued rather than redone when run again."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import dhwt.training.study as study_module
from dhwt.runs.snapshots import read_snapshot
from dhwt.errors import DhwtError
from dhwt.commands.study import study_results
from dhwt.training.runner import train_group
from dhwt.config.study import StudyConfig
from dhwt.languages import load_language, write_dataset
from dhwt.languages.dataset import FILES

STUDY = """
[study]
name = "tiny"
description = "two runs on a 3-bit parity"

[data]
grammar = "parity"
set = { n_bits = 3 }
valid_fraction = 0.25

[train]
seeds = "1-2"
steps = 20
lr = 1e-2
eval_every = 10
snapshot_every = 10
checkpoint_every = 10

[[runs]]
name = "tied"
tie_schedule = "tied"

[[runs]]
name = "untie"
tie_schedule = "untie@10"
"""


def write(tmp_path, text=STUDY, name="study.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_study_runs_reports_and_continues(tmp_path):
    study = StudyConfig.from_toml(write(tmp_path))
    out = tmp_path / "out"
    report = study_results(study, out).report
    text = report.read_text()
    # the tied run has one matrix, the untie run an input and an output panel
    assert "| tied: tied matrix | 0a-0b | sem only |" in text
    assert "| untie: output | 1a-1b | sem and cnd |" in text
    assert "| untie: input |" in text and "| tied: input |" not in text
    for figure in ("closeness.png", "fit.png"):
        assert (out / "figures" / figure).stat().st_size > 0
    assert (out / "data" / "truth.json").is_file()
    # running again keeps finished runs untouched
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*.safetensors")}
    study_results(study, out)
    assert stamps == {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*.safetensors")}


def test_study_says_each_phase_on_stderr(tmp_path, cli):
    """Off a terminal (no progress bar) `dhwt study` still says what it is doing: a line per
    group it trains, one before the report; run again, only the report is written."""
    out = tmp_path / "out"
    code, stdout, stderr = cli(["study", write(tmp_path), "--out", out])
    assert code == 0, stderr
    assert stderr.splitlines() == [
        "training 1 of 1: runs 'tied', 'untie' (4 members, to step 20)",
        "writing the report of 2 runs"]
    assert stdout == f"study report: {out / 'report.md'}\n"
    code, _, stderr = cli(["study", write(tmp_path), "--out", out])
    assert code == 0 and stderr.splitlines() == ["writing the report of 2 runs"]


def _kill_after_step_10(run):
    """What a kill after a run's checkpoint of step 10 leaves: no report, nothing of step 20."""
    (run / "report.md").unlink()
    (run / "checkpoints" / "step_0000020.pt").unlink()
    (run / "embeddings" / "step_0000020.safetensors").unlink()


def test_killed_study_resumes_the_interrupted_group_bit_for_bit(tmp_path):
    study = StudyConfig.from_toml(write(tmp_path))
    out = tmp_path / "out"
    study_results(study, out)
    runs = [out / "runs" / name for name in ("tied", "untie")]
    reference = [(run / "embeddings" / "step_0000020.safetensors").read_bytes() for run in runs]
    for run in runs:
        _kill_after_step_10(run)
    study_results(study, out)
    assert [(run / "embeddings" / "step_0000020.safetensors").read_bytes()
            for run in runs] == reference


@pytest.mark.slow
def test_tie_variants_train_as_one_group_equal_to_one_after_another(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(study_module, "train_group",
                        lambda runs, *a, **k: calls.append([d.name for _, d in runs])
                        or train_group(runs, *a, **k))
    study_results(StudyConfig.from_toml(write(tmp_path)), tmp_path / "grouped")
    assert calls == [["tied", "untie"]]
    alone = STUDY.replace('name = "tiny"', 'name = "tiny"\ngroup = false')
    study_results(StudyConfig.from_toml(write(tmp_path, alone, "alone.toml")), tmp_path / "alone")
    assert calls[1:] == [["tied"], ["untie"]]
    final = {(way, name): read_snapshot(tmp_path / way / "runs" / name / "embeddings" /
                                        "step_0000020.safetensors")
             for way in ("grouped", "alone") for name in ("tied", "untie")}
    for name in ("tied", "untie"):
        a, b = final["grouped", name], final["alone", name]
        assert a.tied == b.tied
        np.testing.assert_allclose(a.output, b.output, rtol=1e-4, atol=1e-5)
    # a run killed on its own (its group finished) resumes on its own, to float tolerance
    run = tmp_path / "grouped" / "runs" / "untie"
    _kill_after_step_10(run)
    study_results(StudyConfig.from_toml(write(tmp_path)), tmp_path / "grouped")
    assert calls[3:] == [["untie"]]  # alone: the finished run of its group is not trained
    resumed = read_snapshot(run / "embeddings" / "step_0000020.safetensors")
    np.testing.assert_allclose(resumed.output, final["alone", "untie"].output, rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("edit, keys", [
    (lambda s: s.replace("lr = 1e-2", "lr = 2e-2"), "train.lr differs"),
    (lambda s: s.replace("valid_fraction = 0.25", "valid_fraction = 0.5").replace(
        "steps = 20", "steps = 20\nwarmup_steps = 1"),
     "data.valid_fraction, train.warmup_steps differ"),
    (lambda s: s.replace('"untie@10"', '"untie@15"'), "runs.untie.tie_schedule differs"),
    (lambda s: s.replace('name = "untie"', 'name = "untie2"'), "runs.untie differs"),  # gone
])
def test_a_different_study_in_the_same_dir_is_refused_naming_what_differs(tmp_path, edit, keys):
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(write(tmp_path)), out)
    other = StudyConfig.from_toml(write(tmp_path, edit(STUDY), "b.toml"))
    with pytest.raises(DhwtError, match=re.escape(f"does not hold this study ({keys}); pass "
                                                  "--overwrite")):
        study_results(other, out)
    assert (out / "study.toml").read_text() == STUDY


def test_a_study_whose_dataset_was_replaced_is_refused_before_anything_changes(tmp_path, cli,
                                                                              file_tree):
    """Continued (`--steps`) on another dataset put in its data/, a study says so in one line
    and keeps every file, its runs' report.md too."""
    path, out = write(tmp_path), tmp_path / "out"
    study_results(StudyConfig.from_toml(path), out)
    other = tmp_path / "other"
    write_dataset(load_language("parity", {"n_bits": 4}), other)
    for name in FILES:
        shutil.copyfile(other / name, out / "data" / name)
    before = file_tree(out)
    code, _, err = cli(["study", path, "--out", out, "--steps", "30"])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(rf"error: dataset {re.escape(str((out / 'data').resolve()))} changed since "
                     r".*runs/tied was trained on it .*pass --overwrite", err), err
    assert file_tree(out) == before


def test_a_study_with_runs_added_continues_and_keeps_the_finished_ones(tmp_path):
    out = tmp_path / "out"
    study_results(StudyConfig.from_toml(write(tmp_path)), out)
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*.safetensors")}
    extended = STUDY.replace('name = "tiny"', 'name = "tiny, extended"') + (
        '\n[[runs]]\nname = "untied"\ntie_schedule = "untied"\n')
    report = study_results(StudyConfig.from_toml(write(tmp_path, extended, "b.toml")), out).report
    assert stamps == {p: p.stat().st_mtime_ns for p in stamps}
    assert (out / "runs" / "untied" / "report.md").is_file()
    assert "| untied |" in report.read_text() and "tiny, extended" in report.read_text()
    assert (out / "study.toml").read_text() == extended


@pytest.mark.parametrize("text, message", [
    ('train = 3\n[[runs]]\nname = "a"\n', r"train must be a table \[train\], got 3"),
    ('runs = [1]\n[data]\ngrammar = "parity"\n', r"runs must be tables \[\[runs\]\]"),
])
def test_a_section_that_is_not_a_table_is_one_clear_error(tmp_path, text, message):
    with pytest.raises(DhwtError, match=message):
        StudyConfig.from_toml(write(tmp_path, text))


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace("[data]", "[dataz]"), r"unknown sections \['dataz'\]"),
    (lambda s: s.replace('grammar = "parity"', ""), "needs a grammar"),
    (lambda s: s.replace('grammar = "parity"', 'grammar = "nope"'), "nope"),
    (lambda s: s.replace('tie_schedule = "untie@10"', 'tie_schedule = "untie@99"'),
     "at or beyond"),
    (lambda s: s.replace('name = "untie"', 'name = "tied"'), "appears twice"),
    (lambda s: s.replace('tie_schedule = "untie@10"', 'tie_schedule = "untie@10"\nobjective = "clm"'),
     "mix objectives"),
    (lambda s: s + '\n[analysis]\nmeasure = "angle"\n', "measure must be one of"),
    (lambda s: s + "\n[analysis]\npairs = [[\"0a\"]]\n", "pairs must be a list"),
    (lambda s: s + "\n[analysis]\nk = 20\n", r"unknown \[analysis\] keys \['k'\]"),
    (lambda s: s.replace("[train]", "[train]\nbogus_key = 1"),
     r"unknown key 'bogus_key' in \[train\] of study file .*study.toml; allowed keys"),
    (lambda s: s.replace('tie_schedule = "tied"', 'tie_schedule = "tied"\nlrr = 1'),
     r"unknown key 'lrr' in run 'tied' of"),
    (lambda s: s.replace('name = "tiny"', 'title = "tiny"'), r"unknown \[study\] keys \['title'\]"),
    (lambda s: s.replace('name = "tiny"', 'group = "yes"'), "group must be true or false"),
    (lambda s: s + "\nnot toml [", "not valid TOML"),
])
def test_bad_study_files_are_one_line_errors(tmp_path, cli, edit, message):
    path = write(tmp_path, edit(STUDY))
    code, _, err = cli(["study", path, "--out", tmp_path / "out"])
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_a_built_in_grammar_name_is_not_shadowed_by_a_folder_beside_the_study(tmp_path):
    (tmp_path / "parity").mkdir()  # e.g. an old output folder named after the grammar
    assert StudyConfig.from_toml(write(tmp_path)).data["grammar"] == "parity"
    spec = tmp_path / "mine.toml"
    spec.write_text("family = 'parity'\nn_bits = 3\n")
    study = StudyConfig.from_toml(write(tmp_path, STUDY.replace('"parity"', '"mine.toml"')))
    assert study.data["grammar"] == str(spec.resolve())  # a path beside the file still resolves


def test_a_study_on_the_authors_strings_keeps_their_split_and_records_escapes(tmp_path):
    """set = { strings = "paper" }: the dataset holds the authors' split; with
    population_every the report has the plateau section. A split option beside it is refused
    before anything is trained."""
    text = (STUDY.replace("set = { n_bits = 3 }\nvalid_fraction = 0.25",
                          "set = { n_bits = 4, strings = \"paper\" }")
            .replace("eval_every = 10", "eval_every = 10\npopulation_every = 10"))
    out = tmp_path / "out"
    report = study_results(StudyConfig.from_toml(write(tmp_path, text)), out).report.read_text()
    split = np.load(out / "data" / "strings.npz")["split"]
    assert np.bincount(split, minlength=3).tolist() == [13, 1, 1]  # int(0.9 * 15), int(1.5)
    assert "## Leaving the plateau" in report and (out / "escape.csv").is_file()
    refused = text.replace('strings = "paper" }', 'strings = "paper" }\nvalid_fraction = 0.25')
    with pytest.raises(DhwtError, match="fixes its own split"):
        study_results(StudyConfig.from_toml(write(tmp_path, refused, "refused.toml")), tmp_path / "refused")
    assert not (tmp_path / "refused" / "runs").exists()
