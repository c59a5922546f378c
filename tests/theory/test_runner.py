"""`dhwt verify-theorems`: the table, exit codes (0 pass, 1 a failure, 2 bad input), selection."""

from __future__ import annotations

import json

import pytest

from dhwt.report.verify_theorems_report import format_table
from dhwt.theory import registry
from dhwt.theory.check import Check, Outcome, deferred, verdict
from dhwt.theory.runner import run_check


def test_only_t1_prints_its_table_and_exits_0(cli):
    code, out, err = cli(["verify-theorems", "--only", "t1"])
    assert code == 0, out
    header = out.splitlines()[0].split()
    assert header[:6] == ["theorem", "kind", "check", "prediction", "measured", "result"]
    names = [c.name for c in registry.THEOREMS["T1"] if not c.full_only]
    assert all(name in out for name in names)
    assert "T2" not in out.split("\n", 2)[2]  # no other theorem's rows
    assert f"{len(names)} passed, 0 failed" in out


@pytest.mark.parametrize("args, message", [
    (["--only", "T7"], "unknown theorem 'T7'"),
    (["--only", "T1,,X"], "unknown theorem 'X'"),
    (["--seed", "-1"], "--seed must be a non-negative integer"),
    (["--seed", "abc"], "error:"),
])
def test_bad_input_exits_2_with_one_line(cli, args, message):
    code, out, err = cli(["verify-theorems", *args])
    assert code == 2
    assert message in err and err.startswith("error:") and err.count("\n") == 1


def test_a_failing_check_makes_exit_1_with_or_without_json(cli, monkeypatch):
    good = Check("T1", "deliberately right", "numeric", "1 = 1", lambda t: verdict(True, "1 == 1"))
    bad = Check("T1", "deliberately wrong", "numeric", "1 = 2", lambda t: verdict(False, "1 != 2"))
    monkeypatch.setitem(registry.THEOREMS, "T1", (good, bad))
    code, out, _ = cli(["verify-theorems", "--only", "T1"])
    assert code == 1 and "FAIL" in out and "1 passed, 1 failed" in out
    code, out, _ = cli(["verify-theorems", "--only", "T1", "--json"])
    doc = json.loads(out)
    assert code == 1 and (doc["passed"], doc["failed"]) == (1, 1)
    assert [c["result"] for c in doc["checks"]] == ["PASS", "FAIL"]


def test_a_check_that_cannot_import_the_package_fails_it_is_never_skipped(cli, monkeypatch):
    """dhwt's own modules are never optional: an import error is a failed check, exit 1."""
    broken = Check("T1", "imports a missing room", "empirical", "-",
                   deferred("dhwt.no_such_room", "check"))
    monkeypatch.setitem(registry.THEOREMS, "T1", (broken,))
    code, out, _ = cli(["verify-theorems", "--only", "T1"])
    assert code == 1 and "error ModuleNotFoundError" in out and "0 passed, 1 failed" in out


def test_a_crashing_check_is_a_failure_that_names_the_error():
    def boom(trial):
        raise ZeroDivisionError("no")

    row = run_check(Check("T9", "crash", "numeric", "-", boom), seed=0)
    assert row.outcome.status == "fail"
    assert "ZeroDivisionError" in row.outcome.measured


def test_checks_get_distinct_reproducible_generators():
    a = Check("T1", "a", "numeric", "-", lambda t: Outcome("pass", ""))
    b = Check("T1", "b", "numeric", "-", lambda t: Outcome("pass", ""))
    assert a.trial(5).generator.random() == a.trial(5).generator.random()
    assert a.trial(5).generator.random() != b.trial(5).generator.random()
    assert a.trial(5).generator.random() != a.trial(6).generator.random()


def test_full_adds_only_empirical_checks():
    extra = [c for c in registry.select(full=True) if c not in registry.select(full=False)]
    assert extra and all(c.kind == "empirical" and c.full_only for c in extra)


def test_table_aligns_columns():
    rows = [run_check(Check("T1", "x", "numeric", "p", lambda t: verdict(True, "m")), 0)]
    lines = format_table(rows).splitlines()
    assert lines[2].index("PASS") == lines[0].index("result")
