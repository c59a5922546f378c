"""The distribution ships every package and the built-in grammar specs (so `--grammar parity`
works from an installed wheel, not only from a checkout), and importing it imports no optional
extra."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "dhwt").rglob("__init__.py")
    } | {"dhwt.synthetic"}
    assert on_disk == listed


@pytest.mark.slow
def test_wheel_contains_builtin_specs(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("dhwt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    specs = sorted(p.name for p in (ROOT / "synthetic").glob("*.toml"))
    assert specs, "no built-in specs in synthetic/"
    for spec in specs:
        assert f"dhwt/synthetic/{spec}" in names


@pytest.mark.slow
def test_the_heavy_extras_are_not_imported_with_the_package():
    """The CLI, and the modules that use huggingface_hub, write for transformers or submit
    jobs through submitit, import none of them (nor tensorboard) until a command needs them:
    they are optional extras."""
    code = ("import sys, dhwt.cli, dhwt.pretrained.hub, dhwt.commands.diagnose, "
            "dhwt.commands.export, dhwt.commands.study; print(sorted({'huggingface_hub', "
            "'transformers', 'tensorboard', 'submitit'} & {m.split('.')[0] for m in "
            "sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
