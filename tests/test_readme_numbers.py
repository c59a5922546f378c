"""Numbers stated twice agree: the READMEs against the registry, the CLI's help against the
README, and the findings the README and the findings pages quote against the results files their
studies write.

Each count or figure is read from the text and compared with its source (the theorem registry, a
study's csv or json) or with the other place that states it, so that a change to one cannot
leave the other stale.
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dhwt.analysis.intervals import clopper_pearson, t_half, t_interval
from dhwt.theory.registry import THEOREMS, select

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")
PROOFS_README = (ROOT / "proofs" / "README.md").read_text("utf-8")


def _row(command: str) -> str:
    """The README's command-table row of `command`."""
    rows = [line for line in README.splitlines() if line.startswith(f"| `dhwt {command}")]
    assert len(rows) == 1, f"README has {len(rows)} table rows for dhwt {command}"
    return rows[0]


def test_readme_states_the_number_of_checks_verify_theorems_runs():
    row = _row("verify-theorems")
    default = re.search(r"\((\d+) checks", row)
    full = re.search(r"(\d+) with `--full`", row)
    assert default and full, row
    assert int(default.group(1)) == len(select())
    assert int(full.group(1)) == len(select(full=True))


def test_proofs_readme_states_the_number_of_checks():
    found = re.search(r"All (\d+) checks pass \((\d+) in the default mode", PROOFS_README)
    assert found, "proofs/README.md no longer states the counts this test reads"
    assert int(found.group(1)) == len(select(full=True))
    assert int(found.group(2)) == len(select())


def test_verify_theorems_help_lists_every_theorem(cli):
    code, out, _ = cli(["verify-theorems", "--help"])
    assert code == 0
    listed = re.search(r"of ((?:T\d+ ?)+)\)", " ".join(out.split()))
    assert listed, out
    assert listed.group(1).split() == list(THEOREMS)


def test_knn_help_and_readme_state_the_same_speed(cli):
    code, out, _ = cli(["knn", "--help"])
    assert code == 0
    help_ratios = set(re.findall(r"(\d\.\d+)x the time of", out))
    readme_ratios = set(re.findall(r"(\d\.\d+)x faiss's time", _row("knn")))
    assert help_ratios and help_ratios == readme_ratios
    assert "Intel Xeon" in _row("knn") and "Intel Xeon" in " ".join(out.split())


def test_knn_help_documents_the_precision_variable(cli):
    code, out, _ = cli(["knn", "--help"])
    assert code == 0
    flat = " ".join(out.split())
    assert "DHWT_KNN_PRECISION=float32|bfloat16|bfloat16-output" in flat


def test_readme_states_one_test_time():
    make_test = re.search(r"make test .*?about ([\d.]+) minutes", README)
    tiers = re.search(r"against about ([\d.]+) for all", README)
    assert make_test and tiers
    assert make_test.group(1) == tiers.group(1)


# ---- Findings quoted from the files the studies write ----------------------------------------
# Each quote is a sentence fragment of a page with its numbers written {}; the numbers printed
# there must equal the values computed here from the study's results file (csv, json, or the
# tables its analysis script writes) at the precision printed. Numbers written literally in a
# quote (a design: "K 16, d 4"; another CPU's run with no file kept) are text, not checked.

EXPERIMENTS = ROOT / "experiments"
NUMBER = r"[+-]?\d[\d,]*(?:\.\d+)?"


def _csv(path: str) -> list[dict[str, str]]:
    with open(EXPERIMENTS / path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _t(values) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval."""
    values = np.asarray(values, dtype=float)
    return values.mean(), float(t_half(values))


def _bounds(values) -> tuple[float, float, float]:
    """Mean [low, high]: the 95% Student-t interval."""
    mean, half = _t(values)
    return mean, mean - half, mean + half


def _main_job(run: str, matrix: str, pair: str) -> tuple[float, float]:
    """exor_small.json (dhwt study --json): the normalised distance over the seeds off the
    plateau at the end, as the report's second closeness table."""
    found = json.loads((EXPERIMENTS / "exor_small.json").read_text("utf-8"))["closeness"]
    runs = found["runs"][run]
    distances = runs["final_closeness"][matrix][pair]["normalised"]
    return _t([d for d, off in zip(distances, runs["off_plateau"]) if off])


def _main_job_off(run: str) -> int:
    found = json.loads((EXPERIMENTS / "exor_small.json").read_text("utf-8"))["closeness"]
    return sum(found["runs"][run]["off_plateau"])


def _main_job_fit(run: str) -> list[float]:
    """exor_small.json: the seeds off the plateau and on it, each group's count and its lowest
    and highest exact cross-entropy, as the report's fit table gives the two groups."""
    runs = json.loads((EXPERIMENTS / "exor_small.json").read_text("utf-8"))["closeness"]["runs"]
    groups = ([ce for ce, off in zip(runs[run]["cross_entropy"], runs[run]["off_plateau"])
               if off == want] for want in (True, False))
    return [x for group in groups for x in (len(group), min(group), max(group))]


def _main_job_off_ci(run: str) -> list[float]:
    """The seeds off the plateau at the end, with their exact 95% interval in percent."""
    off = _main_job_off(run)
    return [off, *(100 * x for x in clopper_pearson(off, 8))]


def _tying_price_shares() -> list[np.ndarray]:
    """The pair's share of the price per cell (c > 1), price(c) - price(1) paired by seed, from
    tying_price/results.csv (as experiments/tying_price/equivalence.py computes it)."""
    price: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in _csv("tying_price/results.csv"):
        key = (r["frozen"], r["language"], int(r["c"]), r["bias"])
        price[key][r["seed"]] = float(r["excess_tied"]) - float(r["excess_untied"])
    return [np.array([by_seed[s] - price[(frozen, language, 1, bias)][s] for s in by_seed])
            for (frozen, language, c, bias), by_seed in price.items() if c > 1]


def _tying_price_bound(summary=max) -> float:
    """The largest end, in absolute value, of a share's 90% interval (`summary` over the cells:
    the largest, or the median cell's): the shares the data exclude."""
    return summary([max(abs(end) for end in t_interval(share, 0.90))
                    for share in _tying_price_shares()])


def _tying_price_tests() -> list[float]:
    """Cells whose 95% interval excludes zero, and of how many; the largest mean share with its
    95% half-width; cells equivalent to zero at a margin of 0.001 (90% interval inside)."""
    shares = _tying_price_shares()
    largest = max(shares, key=np.mean)
    excluding = sum(stats.ttest_1samp(share, 0.0).pvalue < 0.05 for share in shares)
    equivalent = sum(max(abs(end) for end in t_interval(share, 0.90)) < 0.001 for share in shares)
    return [excluding, len(shares), *_t(largest), equivalent, len(shares)]


def _merged_rows_price_at_99() -> tuple[float, float]:
    """T4's B(0) at c = 99 over the cells where it is not zero (results.csv)."""
    found = {float(r["B0"]) for r in _csv("tying_price/results.csv") if r["c"] == "99"}
    found.discard(0.0)
    return min(found), max(found)


def _capacity_share(results: str, language: str, d: str, bias: str = "False"):
    """A tying_capacity cell's share (price minus the control's, paired by seed) at K 16."""
    return _bounds([float(r["share"]) for r in _csv(f"tying_capacity/{results}")
                    if (r["language"], r["k"], r["d"], r["bias"]) == (language, "16", d, bias)
                    and r["decay"] == "0.1" and r["share"]])


def _capacity_price(results: str, language: str, d: str, bias: str = "False"):
    """A tying_capacity cell's price of tying (tied minus untied exact excess) at K 16."""
    return _bounds([float(r["price"]) for r in _csv(f"tying_capacity/{results}")
                    if (r["language"], r["k"], r["d"], r["bias"]) == (language, "16", d, bias)
                    and r["decay"] == "0.1"])


def _capacity_price_range() -> tuple[float, float]:
    """The lowest and highest mean price of tying over the cells above capacity (K > d) of the
    1,000-step grid (tying_capacity/results.csv)."""
    price: dict[tuple, list[float]] = defaultdict(list)
    for r in _csv("tying_capacity/results.csv"):
        if int(r["k"]) > int(r["d"]):
            price[(r["language"], r["k"], r["d"], r["decay"], r["bias"])].append(float(r["price"]))
    means = [np.mean(values) for values in price.values()]
    return min(means), max(means)


def _capacity_bound_range() -> tuple[float, float]:
    """The lowest and highest cell mean of T4's bound B(delta) at the measured tied rows, over
    every tying_capacity results file's cells at d >= 4."""
    bound: dict[tuple, list[float]] = defaultdict(list)
    for results in sorted(EXPERIMENTS.glob("tying_capacity/results*.csv")):
        for r in _csv(f"tying_capacity/{results.name}"):
            if r["bound"] and int(r["d"]) >= 4:
                bound[(results.name, r["language"], r["k"], r["d"], r["decay"], r["bias"])].append(
                    float(r["bound"]))
    means = [np.mean(values) for values in bound.values()]
    return min(means), max(means)


def _calibration() -> tuple[float, int, float]:
    """dh_calibration/capacity.csv at k 3 / cos: Spearman of overlap excess and price, the
    members, and the 95% prediction interval's half-width of the linear fit."""
    rows = _csv("dh_calibration/capacity.csv")
    x = np.array([float(r["excess_k3_cos"]) for r in rows])
    y = np.array([float(r["price"]) for r in rows])
    slope, intercept = np.polyfit(x, y, 1)
    residual = (y - (intercept + slope * x)).std(ddof=2)
    return stats.spearmanr(x, y).statistic, len(rows), 1.96 * residual


def _calibration_p() -> float:
    rows = _csv("dh_calibration/capacity.csv")
    return stats.spearmanr([float(r["excess_k3_cos"]) for r in rows],
                           [float(r["price"]) for r in rows]).pvalue


def _wikitext(results: str, tied: str, untied: str, *, step: str | None = None,
              best: bool = False, seed: str = "seed") -> tuple[float, float]:
    """tying_wikitext: tied minus untied valid loss, paired by seed, at `step` (None: the last)
    or at each arm's best evaluation."""
    rows = [r for r in _csv(f"tying_wikitext/{results}") if r["split"] == "valid"]
    last = str(max(int(r["step"]) for r in rows))
    loss: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if best:
            loss[r["run"]][r[seed]] = min(loss[r["run"]].get(r[seed], np.inf), float(r["loss"]))
        elif r["step"] == (step or last):
            loss[r["run"]][r[seed]] = float(r["loss"])
    return _t([loss[tied][s] - loss[untied][s] for s in loss[tied]])


def _word_level() -> tuple[float, float]:
    """tying_wikitext at word level (results-word-gpu.csv): tied minus untied valid loss at the
    best rate of both arms, paired by seed."""
    return _wikitext("results-word-gpu.csv", "tied-lr1e-3", "untied-lr1e-3", seed="seed_index")


def _demand(contrast: str, *columns: str) -> list[float]:
    """dh_demand/results/contrasts.csv at d 4: a contrast's mean [lo, hi] and `columns`."""
    row = next(r for r in _csv("dh_demand/results/contrasts.csv")
               if (r["d"], r["contrast"]) == ("4", contrast))
    return [float(row[c]) for c in ("mean", "lo", "hi", *columns)]


def _demand_certified(arm: str) -> list[float]:
    """dh_demand's cells at d 4: members meeting the declared certificate (drift < 2e-4, gradient
    norm < 2e-2), of how many, and the exact 95% interval."""
    cells = _demand_cells(arm)
    ok = sum(g < 2e-2 and d < 2e-4 for c in cells for g, d in zip(c["grad_norm"], c["drift"]))
    n = sum(len(c["grad_norm"]) for c in cells)
    return [ok, n, *clopper_pearson(ok, n)]


def _demand_cells(arm: str) -> list[dict]:
    return [json.loads(p.read_text("utf-8"))
            for p in (EXPERIMENTS / "dh_demand/results/cells").glob(f"k16-d4-*-{arm}.json")]


def _demand_restarts(arm: str) -> list[float]:
    """dh_demand at d 4: jobs whose two restarts end within 1e-3 in F, of how many, and the
    median restart gap in F."""
    gaps = [abs(c["objective"][0] - c["objective"][1]) for c in _demand_cells(arm)]
    return [sum(g < 1e-3 for g in gaps), len(gaps), float(np.median(gaps))]


def _demand_step_from_restart_means() -> list[float]:
    """dh_demand's dose step at d 4 with each arm's price read as the mean over its restarts."""
    ce: dict[tuple, float] = {}
    for arm in ("tied", "untied"):
        for c in _demand_cells(arm):
            lang = c["language"]
            ce[(lang["pattern"], float(lang["dose"]), lang["draw"], arm)] = float(
                np.mean(c["cross_entropy"]))

    def price(dose, draw):
        return ce[("ratio", dose, draw, "tied")] - ce[("ratio", dose, draw, "untied")]

    return list(_bounds([price(0.25, draw) - price(0.0, draw) for draw in range(5)]))


def _demand_holding_prices() -> list[float]:
    """dh_demand/results/results.csv at d 4: the lowest and highest mean price of the
    DH-holding languages, and the 1:1 control's with a shared tail."""
    price: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in _csv("dh_demand/results/results.csv"):
        if r["d"] == "4":
            price[(r["pattern"], r["dose"])].append(float(r["price"]))
    means = {key: np.mean(v) for key, v in price.items()}
    holding = [m for (pattern, dose), m in means.items()
               if (pattern == "equal") == (float(dose) == 0.0)]
    return [min(holding), max(holding), means[("equal", "0.0")]]


def _table_cell(path: str, row: str, column: str) -> list[float]:
    """The numbers in `column` of the row named `row` of a table an analysis script wrote."""
    header: list[str] = []
    for line in (EXPERIMENTS / path).read_text("utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == row and column in header:
            return [float(n) for n in re.findall(NUMBER, cells[header.index(column)])]
        header = cells if line.startswith("| ") and not header else header
        header = [] if not line.startswith("|") else header
    raise AssertionError(f"{path} has no row {row} under a column {column}")


def _twins(row: str, column: str) -> list[float]:
    return _table_cell("planted_twins/results.md", row, column)


def _fair(run: str, column: str) -> list[float]:
    return _table_cell("tying_wikitext/results.md", run, column)


def _fair_cost() -> float:
    """tying_wikitext/results.md: how much higher tied's valid perplexity is than untied's, in
    percent, each arm at its best learning rate."""
    return 100 * (_fair("tied", "valid ppl")[0] / _fair("untied", "valid ppl")[0] - 1)


def _flat(*values) -> list[float]:
    out = []
    for value in values:
        out.extend(value if isinstance(value, (tuple, list)) else [value])
    return out


@dataclass(frozen=True)
class Quote:
    page: str
    text: str
    values: Callable[[], list[float]]


QUOTES = [
    Quote("README.md", "a sem-only constant-ratio violation costs {} [{}, {}] nats beyond its "
          "partner (equivalent to zero at ±0.005), a context-dependent one {} [{}, {}], a "
          "cnd-only one {} [{}, {}]; the price rises as the violation is removed ({} [{}, {}])",
          lambda: _flat(*(_demand(c) for c in ("A_constant", "A_ratio", "A_equal", "C_step")))),
    Quote("experiments/dh_demand/README.md", "A_constant {} [{}, {}], **equivalent to zero** (TOST "
          "Holm p {})", lambda: _demand("A_constant", "p_tost_holm")),
    Quote("experiments/dh_demand/README.md", "A_ratio {} [{}, {}],", lambda: _demand("A_ratio")),
    Quote("experiments/dh_demand/README.md", "A_equal {} [{}, {}], undecided",
          lambda: _demand("A_equal")),
    Quote("experiments/dh_demand/README.md", "B_constant {} [{}, {}], B_ratio {} [{}, {}]",
          lambda: _demand("B_constant") + _demand("B_ratio")),
    Quote("experiments/dh_demand/README.md", "step λ 0.25 - λ 0 {} [{}, {}] (p {}, Holm {}); slope "
          "over λ {} [{}, {}]", lambda: _demand("C_step", "p", "p_holm") + _demand("C_slope")),
    Quote("experiments/dh_demand/README.md", "costing more than {} nats beyond its partner, a "
          "context-dependent one more than {}, a cnd-only one more than {}",
          lambda: [_demand(c)[2] for c in ("A_constant", "A_ratio", "A_equal")]),
    Quote("experiments/dh_demand/README.md", "is met by {} of {} tied members (exact 95% interval "
          "{}-{}) and {} of {} untied ({}-{})",
          lambda: _demand_certified("tied") + _demand_certified("untied")),
    Quote("experiments/dh_demand/README.md", "end within 1e-3 in F in {} of {} tied jobs and {} of "
          "{} untied. The median restart gap in F is {} (tied) and {} (untied)",
          lambda: [*_demand_restarts("tied")[:2], *_demand_restarts("untied")[:2],
                   _demand_restarts("tied")[2], _demand_restarts("untied")[2]]),
    Quote("experiments/dh_demand/README.md", "(median gradient norm {} tied, {} untied)",
          lambda: [float(np.median([g for c in _demand_cells(arm) for g in c["grad_norm"]]))
                   for arm in ("tied", "untied")]),
    Quote("experiments/dh_demand/README.md", "changes no sign (the dose step {} [{}, {}])",
          _demand_step_from_restart_means),
    Quote("experiments/dh_demand/README.md", "the DH-holding languages pay {} to {} nats (the 1:1 "
          "control with a shared tail {})", _demand_holding_prices),
    Quote("README.md", "untied output rows of the DH-violating pair end at {} ± {} of the "
          "cross-class distance, of the DH-holding pair at {} ± {} ({} of {} seeds off the plateau",
          lambda: _flat(_main_job("untied", "output", "0a-0b"),
                        _main_job("untied", "output", "1a-1b"), _main_job_off("untied"), 8)),
    Quote("README.md", "its share of the price lies within ±{} nats in every cell (90% intervals), "
          "against {}-{} nats for merged rows at 1 : 99",
          lambda: _flat(_tying_price_bound(), _merged_rows_price_at_99())),
    Quote("README.md", "(K 16, d 16, 10 seeds: every kind's share equivalent to zero, the "
          "context-dependent ratio's {} [{}, {}])",
          lambda: _flat(_capacity_share("results-d16.csv", "ratio-clm", "16"))),
    Quote("README.md", "(the ratio's {} [{}, {}] at K 16, d 4)",
          lambda: _flat(_capacity_share("results-3k.csv", "ratio-clm", "4"))),
    Quote("README.md", "(Spearman {} over {} models, 95% prediction interval ±{} nats",
          lambda: _flat(_calibration())),
    Quote("README.md", "(gap {} ± {} against log 9 = {}); cnd-only twins cost a tied model {} ± {} "
          "nats", lambda: _flat(_table_cell("planted_twins/results.md",
                                            "mlm-sem100-p0.1-untied", "mean z_a - z_b"),
                                np.log(9), _table_cell("planted_twins/results.md", "clm-cnd100",
                                                       "price"))),
    Quote("README.md", "tying costs {} ± {} nats at BPE 2,048 in GPT-2's convention, the price of "
          "the output matrix's weights (against an untied model of the tied one's size {} ± {}), "
          "and helps at word level ({} [{}, {}] nats",
          lambda: _flat(_wikitext("results-conventions.csv", "tied", "untied", step="1600"),
                        _wikitext("results-conventions.csv", "tied", "untied-d44", step="1600"),
                        _bounds_of(_word_level()))),
    Quote("experiments/tying_price/README.md", "in {} of the {} cells (c > 1) its 95% interval "
          "excludes zero, 6 above (LayerNorm fixed, masked conflict, c 2-24: +0.0004 to +0.0006) "
          "and 21 below (-0.0001 to -0.0009, mostly causal), and the largest mean is {} ± {} "
          "(LayerNorm learned, masked conflict, c = 2, no bias)", lambda: _tying_price_tests()[:4]),
    Quote("experiments/tying_price/README.md", "at a margin of ±0.001 nats {} of the {} cells are "
          "equivalent to zero", lambda: _tying_price_tests()[4:]),
    Quote("experiments/tying_price/README.md", "what the data exclude without a chosen margin is a "
          "share beyond ±{} nats in every cell (median cell ±{})",
          lambda: [_tying_price_bound(), _tying_price_bound(np.median)]),
    Quote("experiments/planted_twins/README.md", "of the untied output rows of sem twins: {} ± {} "
          "at p 0.5, {} ± {} at p 0.3, {} ± {} at p 0.1 (masked); the tied matrix follows ({} ± {}, "
          "{} ± {}, {} ± {}). Causal cnd-only twins: output rows closest ({} ± {}), input rows "
          "apart ({} ± {})",
          lambda: _flat(*(_twins(f"mlm-sem100-p{p}", column) for column in ("untied output", "tied")
                          for p in ("0.5", "0.3", "0.1")),
                        _twins("clm-cnd100", "untied output"), _twins("clm-cnd100", "untied input"))),
    Quote("experiments/planted_twins/README.md", "({} ± {} at p 0.1, {} ± {} at p 0.5), where the "
          "causal LM brings them to {} ± {}",
          lambda: _flat(_twins("mlm-sem100-p0.1", "untied input"),
                        _twins("mlm-sem100-p0.5", "untied input"),
                        _twins("clm-sem100-p0.1", "untied input"))),
    Quote("experiments/planted_twins/README.md", "is {} ± {} against log 9 = {} (masked, p 0.1; tied "
          "{} ± {})", lambda: _flat(_twins("mlm-sem100-p0.1-untied", "mean z_a - z_b"), np.log(9),
                                    _twins("mlm-sem100-p0.1-tied", "mean z_a - z_b"))),
    Quote("experiments/planted_twins/README.md", "(p 0.1 masked {} ± {}, merged rows would pay {}); "
          "causal cnd-only twins {} ± {} nats", lambda: _flat(
              _twins("mlm-sem100-p0.1", "price"), _twins("mlm-sem100-p0.1", "T4 B(0)"),
              _twins("clm-cnd100", "price"))),
    Quote("docs/findings/index.md", "both later protocols keep the ratio's share, {} and {}, but leave "
          "the cnd twins' undecided",
          lambda: [_capacity_share("results-converge.csv", "ratio-clm", "4")[0],
                   _capacity_share("results-converge2.csv", "ratio-clm", "4")[0]]),
    Quote("experiments/tying_wikitext/README.md", "tying costs {}% in valid perplexity at each arm's "
          "best learning rate, {} ± {} against {} ± {}",
          lambda: [_fair_cost(), *_fair("tied", "valid ppl"), *_fair("untied", "valid ppl")]),
    Quote("experiments/tying_wikitext/README.md", "Untying at 10 / 25 / 50% of training ends {} / {} "
          "/ {} perplexity over untied",
          lambda: [_fair(run, "valid - untied (paired)")[0]
                   for run in ("untie10", "untie25", "untie50")]),
    Quote("experiments/tying_wikitext/README.md", "at step 1,600: GPT-2's convention {} ± {}, "
          "fairseq's {} ± {}, T5's {} ± {} at its best rate tried; against an untied d 44 model "
          "with the tied one's weights, GPT-2's {} ± {} (undecided, tied lower in 3 of 3 seeds: the "
          "price is the output matrix's weights), fairseq's {} ± {}, T5's {} ± {}; untying at 10% "
          "{} ± {}",
          lambda: _flat(*(_wikitext("results-conventions.csv", tied, untied, step="1600")
                          for untied in ("untied", "untied-d44")
                          for tied in ("tied", "tied-fairseq-lr8e-3", "tied-t5-lr1.6e-2")),
                        _wikitext("results-conventions.csv", "untie10", "untied", step="1600"))),
    Quote("experiments/tying_wikitext/README.md", "tying helps: {} [{}, {}] nats at the best rate of "
          "both arms, {}% lower perplexity",
          lambda: _flat(_bounds_of(_word_level()),
                        100 * (1 - np.exp(_word_level()[0])))),
    Quote("experiments/tying_wikitext/README.md", "tied - untied at each arm's best evaluation {} ± {} "
          "nats (3 of 3 seeds; tied is worse for the first 3-4 epochs), and {} ± {} against an "
          "untied d 76 with tied's weights; there the convention decides the sign: fairseq's tied "
          "draws level with untied ({} ± {}), T5's pays ({} ± {})",
          lambda: _flat(_wikitext("results-ptb-proxy.csv", "tied", "untied", best=True),
                        _wikitext("results-ptb-proxy.csv", "tied", "untied-d76", best=True),
                        *(_wikitext("results-ptb-proxy-conv.csv", tied, "untied", best=True)
                          for tied in ("tied-fairseq", "tied-t5")))),
    Quote("experiments/dh_calibration/README.md", "| k 3, cos, all d | {} | {} (p {}) / -0.03 "
          "(p 0.5) | ±{} nats |", lambda: [_calibration()[1], _calibration()[0],
                                          _calibration_p(), _calibration()[2]]),
    Quote("experiments/tying_capacity/README.md", "(`tying_price`: the pair's share within ±{} "
          "nats)", lambda: [_tying_price_bound()]),
    Quote("experiments/tying_capacity/README.md", "T4's closeness bound B(δ) at the measured tied "
          "rows is {}-{} nats at d >= 4 (cell means)", lambda: _flat(_capacity_bound_range())),
    Quote("experiments/tying_capacity/README.md", "above capacity tying costs {}-{} nats (cell "
          "means, 6 seeds)", lambda: _flat(_capacity_price_range())),
    Quote("experiments/tying_capacity/README.md", "the control pays {} [{}, {}] nats, the "
          "violating kinds {} to {}:",
          lambda: _flat(_capacity_price("results-3k.csv", "control-clm", "4"),
                        min(_capacity_price("results-3k.csv", kind, "4")[0]
                            for kind in ("cnd-clm", "ratio-clm", "sem-clm")),
                        max(_capacity_price("results-3k.csv", kind, "4")[0]
                            for kind in ("cnd-clm", "ratio-clm", "sem-clm")))),
    Quote("experiments/tying_capacity/README.md", "the share is {} [{}, {}] for the "
          "context-dependent ratio ({} [{}, {}] with an output bias), {} [{}, {}] for the cnd "
          "twins and {} [{}, {}] for the constant-ratio sem pairs",
          lambda: _flat(_capacity_share("results-3k.csv", "ratio-clm", "4"),
                        _capacity_share("results-3k.csv", "ratio-clm", "4", "True"),
                        _capacity_share("results-3k.csv", "cnd-clm", "4"),
                        _capacity_share("results-3k.csv", "sem-clm", "4"))),
    Quote("experiments/tying_capacity/README.md", "the context-dependent ratio's share at the cap "
          "is {} [{}, {}] and {} [{}, {}]; the cnd twins' is undecided in both ({} [{}, {}], {} "
          "[{}, {}])",
          lambda: _flat(*(_capacity_share(results, kind, "4")
                          for kind in ("ratio-clm", "cnd-clm")
                          for results in ("results-converge.csv", "results-converge2.csv")))),
    Quote("experiments/tying_capacity/README.md", "the control pays {} [{}, {}] nats and every "
          "kind's share is equivalent to zero at ±0.005: cnd {} [{}, {}], sem {} [{}, {}], the "
          "context-dependent ratio {} [{}, {}]",
          lambda: _flat(_capacity_price("results-d16.csv", "control-clm", "16"),
                        *(_capacity_share("results-d16.csv", kind, "16")
                          for kind in ("cnd-clm", "sem-clm", "ratio-clm")))),
    Quote("experiments/tying_capacity/README.md", "a sem-only constant-ratio violation costs {} "
          "[{}, {}] nats beyond its partner", lambda: _demand("A_constant")),
    Quote("experiments/tying_capacity/README.md", "at K/d 2 fell to {} [{}, {}] at 3,000 steps "
          "(undecided), inside the margin at the first rerun's cap", lambda: _flat(_capacity_share("results-3k.csv", "ratio-clm", "8"))),
    Quote("README.md", "above capacity tying costs {}-{} nats (cell means, 6 seeds)",
          lambda: _flat(_capacity_price_range())),
    Quote("docs/findings/index.md", "costs {}-{} nats (cell means over 6 seeds at step 1,000)",
          lambda: _flat(_capacity_price_range())),
    Quote("experiments/README.md", "the context-dependent ratio's {} [{}, {}] at K 16, d 4, not "
          "converged", lambda: _flat(_capacity_share("results-3k.csv", "ratio-clm", "4"))),
    Quote("experiments/README.md", "a sem-only constant-ratio violation costs {} [{}, {}] nats "
          "beyond its partner (equivalent to zero at ±0.005)", lambda: _demand("A_constant")),
    Quote("experiments/README.md", "at BPE 2,048 tying costs {}% in valid perplexity at each arm's "
          "best learning rate", lambda: [_fair_cost()]),
    Quote("experiments/README.md", "(tied - matched {} ± {} nats); at word level tying helps ({} "
          "[{}, {}] nats)",
          lambda: _flat(_wikitext("results-conventions.csv", "tied", "untied-d44", step="1600"),
                        _bounds_of(_word_level()))),
    Quote("experiments/README.md", "({} models of `tying_capacity`'s grid, k 3 / cos: 95% "
          "prediction interval ±{} nats)", lambda: [_calibration()[1], _calibration()[2]]),
    Quote("experiments/README.md", "the untied logit gap of sem twins (p 0.1, masked) is {} ± {} "
          "against log 9 = {}, no price measurable on them; cnd-only twins cost a tied model {} "
          "± {} nats",
          lambda: _flat(_twins("mlm-sem100-p0.1-untied", "mean z_a - z_b"), np.log(9),
                        _twins("clm-cnd100", "price"))),
    Quote("experiments/README.md", "above capacity (K > d) tying costs {}-{} nats (cell means)",
          lambda: _flat(_capacity_price_range())),
    Quote("docs/findings/index.md", "a sem-only constant-ratio violation costs {} [{}, {}] nats "
          "beyond its partner (equivalent to zero at ±0.005)", lambda: _demand("A_constant")),
    Quote("docs/findings/index.md", "and {}% in the blog's recipe",
          lambda: [_fair_cost()]),
    Quote("docs/findings/index.md", "the data exclude a price of sharing above {} nats",
          lambda: [sum(_wikitext("results-conventions.csv", "tied", "untied-d44",
                                 step="1600"))]),
    Quote("docs/findings/index.md", "every cell's share within ±{} nats",
          lambda: [_tying_price_bound()]),
    Quote("docs/findings/index.md", "context-dependent ratio's {} [{}, {}] clear of zero",
          lambda: _flat(_capacity_share("results-d16.csv", "ratio-clm", "16"))),
    Quote("docs/findings/index.md", "(at K 16, d 4: cnd-only twins {} [{}, {}], pairs at a "
          "context-dependent ratio {} [{}, {}], a constant ratio {} [{}, {}], at 3,000 steps",
          lambda: _flat(*(_capacity_share("results-3k.csv", kind, "4")
                          for kind in ("cnd-clm", "ratio-clm", "sem-clm")))),
    Quote("docs/findings/index.md", "GPT-2's {} ± {} nats, fairseq's {} ± {}, T5's {} ± {} at its "
          "best rate tried",
          lambda: _flat(*(_wikitext("results-conventions.csv", tied, "untied", step="1600")
                          for tied in ("tied", "tied-fairseq-lr8e-3", "tied-t5-lr1.6e-2")))),
    Quote("docs/findings/index.md", "(tied - matched {} ± {}, tied lower in 3 of 3 seeds",
          lambda: _flat(_wikitext("results-conventions.csv", "tied", "untied-d44",
                                  step="1600"))),
    Quote("docs/findings/index.md", "conventions still pay at equal weights ({} ± {}, {} ± {})",
          lambda: _flat(*(_wikitext("results-conventions.csv", tied, "untied-d44", step="1600")
                          for tied in ("tied-fairseq-lr8e-3", "tied-t5-lr1.6e-2")))),
    Quote("docs/findings/index.md", "untying after 10% of training ends {} ± {} behind untied",
          lambda: _flat(_wikitext("results-conventions.csv", "untie10", "untied",
                                  step="1600"))),
    Quote("docs/findings/index.md", "tied - untied at each arm's best evaluation {} ± {} nats",
          lambda: _flat(_wikitext("results-ptb-proxy.csv", "tied", "untied", best=True))),
    Quote("docs/findings/index.md", "and {} ± {} against an untied d 76 with tied's weights",
          lambda: _flat(_wikitext("results-ptb-proxy.csv", "tied", "untied-d76", best=True))),
    Quote("docs/findings/index.md", "fairseq's tied draws level with untied ({} ± {}), T5's pays "
          "({} ± {})", lambda: _flat(*(_wikitext("results-ptb-proxy-conv.csv", tied, "untied",
                                                 best=True)
                                       for tied in ("tied-fairseq", "tied-t5")))),
    Quote("docs/findings/index.md", "{}% lower perplexity at the best rate ({} [{}, {}] nats",
          lambda: _flat(100 * (1 - np.exp(_word_level()[0])),
                        _bounds_of(_word_level()))),
    Quote("experiments/README.md", "untied output 0a-0b {} ± {} vs 1a-1b {} ± {} of the "
          "cross-class distance, input {} / {}, tied {} / {}, over the seeds off the plateau",
          lambda: _flat(_main_job("untied", "output", "0a-0b"),
                        _main_job("untied", "output", "1a-1b"),
                        _main_job("untied", "input", "0a-0b")[0],
                        _main_job("untied", "input", "1a-1b")[0],
                        _main_job("tied", "tied matrix", "0a-0b")[0],
                        _main_job("tied", "tied matrix", "1a-1b")[0])),
    Quote("experiments/README.md", "the data exclude a share beyond ±{} nats in every cell (90% "
          "intervals), against B(0) up to {}",
          lambda: [_tying_price_bound(), _merged_rows_price_at_99()[1]]),
    Quote("docs/findings/main-job.md", "| tied | {} at {} to {}; {} at {} | 5 / {} of 8 (exact 95% "
          "CI {}-{}%) |", lambda: _main_job_fit("tied")[:5] + _main_job_off_ci("tied")),
    Quote("docs/findings/main-job.md", "| untied | {} at {} to {}; {} at {} to {} | 7 / {} of 8 "
          "(47.3-99.7% / {}-{}%) |", lambda: _main_job_fit("untied") + _main_job_off_ci("untied")),
    Quote("docs/findings/main-job.md", "| untie@2000 | {} at {} to {}; {} at {} | 5 / {} of 8 "
          "(24.5-91.5% / {}-{}%) |",
          lambda: _main_job_fit("untie@2000")[:5] + _main_job_off_ci("untie@2000")),
    Quote("docs/findings/main-job.md", "((0.583 - 0.398) / (0.798 - 0.398); {}% on the AMD EPYC)",
          lambda: [100 * (_main_job("untie@2000", "output", "0a-0b")[0]
                          - _main_job("tied", "tied matrix", "0a-0b")[0])
                   / (_main_job("untied", "output", "0a-0b")[0]
                      - _main_job("tied", "tied matrix", "0a-0b")[0])]),
    Quote("docs/findings/main-job.md", "| untied, output | **0.798 ± 0.077 / {} ± {}** | "
          "**0.077 ± 0.022 / {} ± {}** | 7 / {} |",
          lambda: _flat(_main_job("untied", "output", "0a-0b"),
                        _main_job("untied", "output", "1a-1b"), _main_job_off("untied"))),
    Quote("docs/findings/main-job.md", "| untied, input | 0.284 ± 0.095 / {} ± {} | "
          "0.267 ± 0.105 / {} ± {} | 7 / {} |",
          lambda: _flat(_main_job("untied", "input", "0a-0b"),
                        _main_job("untied", "input", "1a-1b"), _main_job_off("untied"))),
    Quote("docs/findings/main-job.md", "| tied | 0.398 ± 0.068 / {} ± {} | 0.075 ± 0.016 / {} ± {} "
          "| 5 / {} |", lambda: _flat(_main_job("tied", "tied matrix", "0a-0b"),
                                      _main_job("tied", "tied matrix", "1a-1b"), _main_job_off("tied"))),
    Quote("docs/findings/main-job.md", "| untie@2000, output | 0.583 ± 0.105 / {} ± {} | "
          "0.068 ± 0.020 / {} ± {} | 5 / {} |",
          lambda: _flat(_main_job("untie@2000", "output", "0a-0b"),
                        _main_job("untie@2000", "output", "1a-1b"),
                        _main_job_off("untie@2000"))),
    Quote("docs/findings/main-job.md", "| untie@2000, input | 0.266 ± 0.119 / {} ± {} | "
          "0.211 ± 0.121 / {} ± {} | 5 / {} |",
          lambda: _flat(_main_job("untie@2000", "input", "0a-0b"),
                        _main_job("untie@2000", "input", "1a-1b"),
                        _main_job_off("untie@2000"))),
]


def _bounds_of(mean_half: tuple[float, float]) -> tuple[float, float, float]:
    mean, half = mean_half
    return mean, mean - half, mean + half


def _flatten(text: str) -> str:
    return " ".join(text.split())


def _printed(quote: Quote) -> list[str]:
    """The numbers `quote` prints on its page, in order."""
    literal = [re.escape(part) for part in _flatten(quote.text).split("{}")]
    found = re.search(f"({NUMBER})".join(literal), _flatten((ROOT / quote.page).read_text("utf-8")))
    assert found, f"{quote.page} no longer says: {quote.text}"
    return list(found.groups())


def _agrees(printed: str, value: float) -> bool:
    """`printed` is `value` at the precision printed (half a unit of its last digit)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(float(printed.replace(",", "")) - value) <= 0.5 * 10 ** -decimals + 1e-12


@pytest.mark.parametrize("quote", QUOTES, ids=lambda q: f"{q.page}: {q.text[:40]}")
def test_a_quoted_number_is_its_results_file_value(quote):
    printed, values = _printed(quote), quote.values()
    assert len(printed) == len(values), (printed, values)
    wrong = [(p, round(float(v), 6)) for p, v in zip(printed, values) if not _agrees(p, v)]
    assert wrong == [], f"{quote.page} prints {wrong} (printed, from the results file)"


#: The README's findings whose study writes no results file the test could read (its numbers
#: are in a report.md under runs/, or in the study's README alone): each number as printed.
#: A study that starts writing a csv or json moves from here to QUOTES.
UNCHECKED = {
    "input_side": ["96-100%"],
    "exor": ["12", "7", "40", "0.19"],
    "untie": ["100", "0.391", "0.001", "0.390", "0.001", "5"],
    "corpus_dh": ["9", "21%", "1%"],
    "diagnose": ["1.7-2.7%", "70-90x"],
    "wikitext": ["44.7%", "625"],
    "benchmarks": ["5.3-5.7x"],
}


def test_every_finding_of_the_readme_is_checked_or_listed_as_unchecked():
    section = README.split("\n## Findings\n", 1)[1].split("\n## ", 1)[0]
    quoted = [_flatten(q.text) for q in QUOTES if q.page == "README.md"]
    left: dict[str, list[str]] = {}
    for bullet in re.findall(r"^- (.*)$", section, re.M):
        study = re.findall(r"\[(\w+)\]\(", bullet)[-1]
        text = re.sub(r"\]\([^)]*\)", "]", _flatten(bullet))
        for quote in quoted:
            pattern = f"(?:{NUMBER})".join(re.escape(part) for part in quote.split("{}"))
            text = re.sub(pattern, " ", text)
        text = re.sub(r"\b[dK] \d+", " ", text)  # a design (width d, K pairs), not a result
        numbers = re.findall(r"(?<![\w.-])\d+(?:[.,]\d+)*(?:-\d+(?:\.\d+)?)?[%x]?", text)
        if numbers:
            left[study] = numbers
    assert left == UNCHECKED
