"""The configurations the documentation's how-to pages show are ones dhwt accepts as written."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from dhwt.config import TrainConfig

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_planted_twins_config_is_a_run_config_with_twins():
    page = (DOCS / "how-to" / "plant-twins.md").read_text("utf-8")
    (block,) = re.findall(r"^```toml\n(.*?)^```", page, re.M | re.S)
    config = TrainConfig(**tomllib.loads(block))
    assert (config.data.twins, config.data.twin_p, config.data.twin_kind) == (100, 0.1, "sem")
    assert config.data.corpus == "wikitext-2" and config.data.objective == "mlm"
