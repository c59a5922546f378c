"""The report's plateau section: escape counts and steps from the exact population lines, with
exact intervals, and statistics that fit a two-state outcome in the final-fit table."""

from __future__ import annotations

import json

import pytest

from dhwt.analysis.intervals import count_text


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cli):
    root = tmp_path_factory.mktemp("escape")
    assert cli(["synth", "--grammar", "parity", "--set", "n_bits=3", "--valid-fraction", 0,
                "--test-fraction", 0, "--out", root / "data"])[0] == 0
    # a model that leaves the plateau within a few hundred steps for most seeds
    (root / "fast.toml").write_text("lr = 0.01\nd_model = 16\nd_ff = 16\nn_layers = 2\n"
                                    "n_heads = 4\npopulation_every = 20\n")
    common = ["--config", root / "fast.toml", "--data", root / "data", "--steps", 300,
              "--seeds", "1-6", "--eval-every", 20, "--snapshot-every", 100]
    for schedule in ("tied", "untied", "untie@100"):
        assert cli(["train", *common, "--tie-schedule", schedule, "--out", root / schedule])[0] == 0
    return root


def escape_steps(run_dir, truth) -> dict[int, float]:
    """seed -> the first recorded step where its exact cross-entropy is below the midpoint
    (inf: never)."""
    cut = (truth["marginal_entropy_nats"] + truth["bayes_cross_entropy_nats"]) / 2
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    first: dict[int, float] = {}
    for r in sorted((r for r in rows if r["split"] == "population"), key=lambda r: r["step"]):
        first.setdefault(r["seed"], float("inf"))
        if r["loss"] < cut and first[r["seed"]] == float("inf"):
            first[r["seed"]] = r["step"]
    return first


def escaped_by_hand(run_dir, truth) -> tuple[int, int]:
    """(seeds whose exact cross-entropy ever fell below the midpoint, seeds)."""
    cut = (truth["marginal_entropy_nats"] + truth["bayes_cross_entropy_nats"]) / 2
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    lows: dict[int, float] = {}
    for r in rows:
        if r["split"] == "population":
            lows[r["member"]] = min(lows.get(r["member"], float("inf")), r["loss"])
    return sum(v < cut for v in lows.values()), len(lows)


def test_the_plateau_section_counts_escapes_with_exact_intervals(runs, tmp_path, cli):
    assert cli(["analyze", runs / "tied", runs / "untied", "--out", tmp_path / "rep",
                "--similarity", "none"])[0] == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    truth = json.loads((runs / "data" / "truth.json").read_text())["objectives"]["mlm"]
    assert "## Leaving the plateau" in text
    for name in ("tied", "untied"):
        k, n = escaped_by_hand(runs / name, truth)
        assert n == 6 and k > 0  # the fixture must exercise escapes
        row = next(x for x in text.splitlines() if x.startswith(f"| {name} (to step 300) |"))
        assert row.split(" | ")[1] == count_text(k, n)
    assert "Each run against tied." in text and "| untied | paired by seed, from the start |" in text
    assert (tmp_path / "rep" / "figures" / "survival.png").stat().st_size > 0
    table = (tmp_path / "rep" / "escape.csv").read_text().splitlines()
    assert table[0] == "run,seed,escape_step,last_step,off_at_end" and len(table) == 13
    for name in ("tied", "untied"):
        rows = [x.split(",") for x in table[1:] if x.startswith(name + ",")]
        assert [int(r[1]) for r in rows] == list(range(1, 7))
        assert sum(r[2] != "" for r in rows) == escaped_by_hand(runs / name, truth)[0]
    final = text[text.index("## Final fit"):text.index("## Final closeness")]
    split = 0
    for row in (x for x in final.splitlines() if x.startswith(("| tied |", "| untied |"))):
        cells = row.split(" | ")
        assert "exact 95% CI" in cells[-1]  # escape: a count, never mean ± t
        k, n = (int(w) for w in cells[-1].split()[:3:2])
        if 0 < k < n:  # seeds on and off the plateau: the two groups, never a median of both
            split += 1
            assert all(c.startswith("two groups: ") and f"{k} at " in c and f"{n - k} at " in c
                       for c in cells[2:5]), row
    assert split and not any("median" in x for x in final.splitlines() if x.startswith("|"))


def test_an_untie_run_is_compared_with_its_tied_twin_per_seed_after_the_untie(runs, tmp_path,
                                                                             cli):
    """untie@100 is the tied run, bit for bit, up to step 100: the report compares the two seed by
    seed over the seeds still on the plateau at step 100 (an exact sign test on which left
    first), never by a log-rank test that counts their shared escapes twice."""
    assert cli(["analyze", runs / "tied", runs / "untie@100", runs / "untied", "--out",
                tmp_path / "rep", "--similarity", "none"])[0] == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    truth = json.loads((runs / "data" / "truth.json").read_text())["objectives"]["mlm"]
    tied, untie = escape_steps(runs / "tied", truth), escape_steps(runs / "untie@100", truth)
    assert all(untie[s] == tied[s] for s in tied if min(tied[s], untie[s]) <= 100)
    kept = [s for s in tied if tied[s] > 100 and untie[s] > 100]
    first_untie = sum(untie[s] < tied[s] for s in kept)
    first_tied = sum(tied[s] < untie[s] for s in kept)
    row = next(x for x in text.splitlines() if x.startswith("| untie@100 | paired"))
    assert "after step 100" in row
    assert (f"| {len(kept)}: untie@100 first in {first_untie}, tied first in {first_tied}, "
            f"alike in {len(kept) - first_untie - first_tied} |") in row
    assert "log-rank" not in row
    untied_row = next(x for x in text.splitlines() if x.startswith("| untied | paired"))
    assert "from the start" in untied_row
    tests = sum("sign test p" in x or "log-rank z" in x for x in text.splitlines())
    assert f"{tests} test{'s' if tests != 1 else ''} here; Holm-adjusted p" in text
    assert "What this design can find: with 6 seeds a run" in text
    assert "end: optimum / partial / plateau" in text


def test_runs_without_population_lines_get_no_plateau_section(runs, tmp_path, cli):
    code = cli(["train", "--data", runs / "data", "--steps", 4, "--eval-every", 2, "--out",
                tmp_path / "plain"])[0]
    assert code == 0
    assert cli(["analyze", tmp_path / "plain", "--out", tmp_path / "rep", "--similarity",
                "none"])[0] == 0
    assert "## Leaving the plateau" not in (tmp_path / "rep" / "report.md").read_text()


def test_runs_of_different_seeds_are_compared_by_log_rank_and_holm_counts_the_tests(tmp_path):
    from types import SimpleNamespace

    from dhwt.analysis.escape import escapes, holm, logrank
    from dhwt.config.run import TrainConfig
    from dhwt.report.escape_report import escape_lines

    truth = SimpleNamespace(marginal_entropy=1.2, bayes_cross_entropy=0.5)  # the cut: 0.85

    def population(seeds, steps, left):
        """Population lines of a run whose seed i leaves the plateau at steps[i] if left[i]."""
        return [{"split": "population", "step": at, "member": m, "seed": seed,
                 "loss": 0.5 if off and at >= step else 1.2}
                for at in sorted({0, 100, *steps})
                for m, (seed, step, off) in enumerate(zip(seeds, steps, left))]

    records = {"tied": population(range(6), [10, 20, 30, 100, 100, 100], [1, 1, 1, 0, 0, 0]),
               "other seeds": population(range(10, 16), [5, 6, 7, 8, 9, 100],
                                         [1, 1, 1, 1, 1, 0]),
               "untied": population(range(6), [5, 20, 100, 100, 40, 100], [1, 1, 0, 0, 1, 0])}
    configs = {name: TrainConfig(grammar="parity", steps=100, tie_schedule=schedule)
               for name, schedule in (("tied", "tied"), ("other seeds", "untied"),
                                      ("untied", "untied"))}
    (tmp_path / "figures").mkdir()
    text = "\n".join(escape_lines(records, configs, truth, tmp_path / "figures"))
    found = {name: escapes(rows, truth) for name, rows in records.items()}
    z, p = logrank(found["other seeds"], found["tied"])
    compared = text[text.index("| other seeds | independent seeds |"):].splitlines()
    row = next(x for x in compared if x.startswith("| other seeds |"))
    assert f"log-rank z {z:+.2f}, p {p:.3g}" in row
    untied = next(x for x in compared if x.startswith("| untied |"))
    assert "6: untied first in 2, tied first in 1, alike in 3" in untied  # seeds 0, 4; 2
    adjusted = holm([p, 1.0])
    assert f"| {adjusted[0]:.3g} |" in row and "2 tests here" in text
