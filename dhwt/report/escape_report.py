"""The report's "Leaving the plateau" section (dhwt.analysis.escape), for runs that recorded the
exact population fit during training: counts with exact intervals at several cuts, the state each
seed ends in, Kaplan-Meier curves, and each run against the first by the test its design fits
(seed by seed where the runs share seeds, after the step where they part; log-rank where they do
not), with the interval of the difference, Holm-adjusted p-values and the design's minimum
detectable difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from dhwt.analysis.escape import (CUTS, SPLIT as POPULATION, STATES, Escapes, detectable,
                                  difference_interval, end_states, escapes, holm, kaplan_meier,
                                  logrank, paired, parting_step, threshold_at)
from dhwt.analysis.intervals import count_text, summarise
from dhwt.directories import atomic_write_bytes
from dhwt.filenames import ESCAPE_TABLE, FIGURES, SURVIVAL_FIGURE
from dhwt.report.figures import survival_figure


def escape_lines(records: Mapping[str, list[dict]], configs: Mapping[str, object], truth,
                 figures: Path) -> list[str]:
    """The plateau escape section of runs that recorded the exact population fit during
    training; nothing for runs that did not. `configs`: each run's TrainConfig (its tie switches,
    and whether two runs are one computation up to a switch)."""
    found = {name: escapes(rows, truth) for name, rows in records.items()
             if any(r["split"] == POPULATION for r in rows)}
    if not found:
        return []
    horizon = max(e.last for e in found.values())
    label = {name: f"{name} ({len(e.seeds)} seeds)" for name, e in found.items()}
    survival_figure({label[name]: kaplan_meier(e) for name, e in found.items()},
                    figures / SURVIVAL_FIGURE, horizon,
                    {label[name]: configs[name].tying.tie_schedule.events for name in found})
    table = ["run,seed,escape_step,last_step,off_at_end"]  # escape_step empty: censored
    table += [f"{name},{seed},{step if left else ''},{e.last},{int(end)}"
              for name, e in found.items()
              for seed, step, left, end in zip(e.seeds, e.step, e.escaped, e.final_off)]
    atomic_write_bytes(figures.parent / ESCAPE_TABLE, ("\n".join(table) + "\n").encode())
    lines = ["", "## Leaving the plateau", "",
             "From the exact population cross-entropy recorded during training "
             "(record.population_every): a seed has left the plateau at the first recorded step "
             f"where its cross-entropy is below {found[next(iter(found))].threshold:.4f} nats, "
             "midway between the plateau (the target marginal's entropy) and the Bayes optimum "
             "(dhwt.analysis.escape); one that never does is censored at its last step. Counts "
             "with exact 95% intervals; the escape steps of the seeds that left as median "
             f"[quartiles] (the values where fewer than 3); every seed's step in `{ESCAPE_TABLE}`.",
             "",
             "| run | left by its last step | escape steps | off the plateau at the end |",
             "|---|---|---|---|"]
    for name, e in found.items():
        left = e.step[e.escaped]
        steps = summarise(left, robust=True).text(0) if len(left) else "-"
        lines.append(f"| {name} (to step {e.last}) | "
                     f"{count_text(int(e.escaped.sum()), len(e.seeds))} | {steps} | "
                     f"{count_text(int(e.final_off.sum()), len(e.seeds))} |")
    lines += _cut_lines(records, found, truth)
    if len(found) > 1:
        lines += _comparison_lines(found, configs)
    lines += ["", f"![share still on the plateau]({FIGURES}/{SURVIVAL_FIGURE})"]
    return lines


def _cut_lines(records, found: Mapping[str, Escapes], truth) -> list[str]:
    """Escape counts at every cut of CUTS and the three end states: whether the midpoint's
    verdict depends on where the cut is put (partial solutions sit between plateau and optimum)."""
    cuts = {share: threshold_at(truth, share) for share in CUTS}
    low, high = (threshold_at(truth, share) for share in STATES)
    lines = ["", "The same count at other cuts (a seed is off at cut q when its cross-entropy "
             "falls below optimum + q x (plateau - optimum)), and the state each seed ends in: "
             f"optimum (below {low:.4f} nats, q {STATES[0]}), partial ({low:.4f}-{high:.4f}) or "
             f"plateau (at or above {high:.4f}, q {STATES[1]}). Counts of seeds.", "",
             "| run | " + " | ".join(f"left, cut q {q} ({cut:.4f})" for q, cut in cuts.items())
             + " | end: optimum / partial / plateau |",
             "|---|" + "---|" * (len(cuts) + 1)]
    for name, e in found.items():
        counts = [int(escapes(records[name], truth, share).escaped.sum()) for share in cuts]
        states = end_states(records[name], truth)
        lines.append(f"| {name} | " + " | ".join(f"{k} of {len(e.seeds)}" for k in counts)
                     + f" | {states['optimum']} / {states['partial']} / {states['plateau']} |")
    return lines


def _comparison_lines(found: Mapping[str, Escapes], configs: Mapping[str, object]) -> list[str]:
    first, *others = found
    base = found[first]
    rows, pvalues = [], []
    for name in others:
        e = found[name]
        if sorted(e.seeds) == sorted(base.seeds):
            start = parting_step(configs[first], configs[name])
            r = paired(e, base, start)
            where = f"after step {start}" if start else "from the start"
            design = f"paired by seed, {where}"
            if r.n == 0:
                rows.append((name, design, "no seed on the plateau in both: nothing to compare",
                             "-", None))
                pvalues.append(float("nan"))
                continue
            compared = (f"{r.n}: {name} first in {r.first_a}, {first} first in {r.first_b}, "
                        f"alike in {r.same}")
            test = ("exact sign test: no seed differs" if np.isnan(r.p)
                    else f"exact sign test p {r.p:.3g}")
            off = (r.off_a, r.n, r.off_b, r.n)
            pvalues.append(r.p)
        else:
            z, p = logrank(e, base)
            design = "independent seeds"
            compared = f"{len(e.seeds)} and {len(base.seeds)}"
            test = ("log-rank: no escape in either run" if np.isnan(z)
                    else f"log-rank z {z:+.2f}, p {p:.3g}")
            off = (int(e.escaped.sum()), len(e.seeds), int(base.escaped.sum()), len(base.seeds))
            pvalues.append(p)
        rows.append((name, design, compared, test, off))
    adjusted = holm(pvalues)
    tests = int(np.sum(~np.isnan(pvalues)))
    lines = ["", f"Each run against {first}. Runs that share seeds are compared seed by seed "
             "(one member per run and seed, the log-rank test stratified by seed reduces to a "
             "sign test on which run left first, taken here exactly), and only over the seeds still on the plateau "
             "in both where the runs part: an untie@N run is its tied twin, bit for bit, up to "
             "step N, so an escape before N is one event, not one in each run. Runs of "
             "different seeds: the log-rank test. Difference: the share off the plateau by the "
             "last step, this run minus the other, over the seeds compared, with its 95% "
             "interval (Newcombe; for paired seeds that agree it is conservative): the "
             f"differences outside it are what the data exclude. {tests} test"
             f"{'s' if tests != 1 else ''} here; Holm-adjusted p beside each.", "",
             "| run | design | seeds compared | test | Holm p | difference (95% CI) |",
             "|---|---|---|---|---|---|"]
    for (name, design, compared, test, off), p in zip(rows, adjusted):
        if off is None:
            lines.append(f"| {name} | {design} | {compared} | - | - | - |")
            continue
        low, high = difference_interval(*off)
        diff = off[0] / off[1] - off[2] / off[3]
        lines.append(f"| {name} | {design} | {compared} | {test} | "
                     f"{'-' if np.isnan(p) else f'{p:.3g}'} | "
                     f"{100 * diff:+.0f} points ({100 * low:+.0f} to {100 * high:+.0f}) |")
    share = float(base.escaped.mean())
    below, above = detectable(share, len(base.seeds))
    sides = [f"below {100 * below:.0f}%" if not np.isnan(below) else "",
             f"above {100 * above:.0f}%" if not np.isnan(above) else ""]
    reach = " or ".join(s for s in sides if s)
    found_when = (f"only when the run's share is {reach}" if reach else
                  "for no share at all")
    lines += ["", f"What this design can find: with {len(base.seeds)} seeds a run, a two-sided "
              f"Fisher exact test at level 0.05 tells a run from {first} "
              f"({100 * share:.0f}% left) with 80% power {found_when} (exact power, for "
              "independent seeds; dhwt.analysis.escape.detectable). Smaller differences are "
              "beyond it, whatever the p-values above."]
    return lines
