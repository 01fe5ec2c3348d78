"""The notebooks whose parameters cell takes a ``model`` ("preset (glm-5, deepseek-v3.2), a config.json or a
checkpoint directory") run top to bottom with a config.json, not only with the preset their profile names: notebook
04 indexed the presets by it in one cell (``PRESET_CONFIGS[model]``: a KeyError for a path), which the default
profile's preset never reached. Slow tier: each notebook runs whole in the CPU interpreter (about 1.5 min for 04)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparse_mla.models import PRESET_CONFIGS

pytestmark = pytest.mark.slow
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize("stem, extra", [("01_diagnose_backend_rejection", {}),
                                         ("04_register_vllm_backend", {"with_plugin": True, "device": "cpu"})])
def test_a_notebook_runs_with_a_config_json_for_its_model(tmp_path, stem, extra):
    papermill = pytest.importorskip("papermill", reason="the workbook extra brings papermill")
    config = tmp_path / "glm5" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(PRESET_CONFIGS["glm-5"]))
    out = tmp_path / "out"
    out.mkdir()
    papermill.execute_notebook(str(NOTEBOOKS / f"{stem}.ipynb"), str(out / f"{stem}.ipynb"), cwd=str(NOTEBOOKS),
                               parameters={"model": str(config), "out_dir": str(out), **extra},
                               progress_bar=False, kernel_name="python3")
    done = json.loads((out / f"{stem}.ipynb").read_text())
    errors = [o for c in done["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors and done["metadata"]["papermill"]["exception"] in (None, False)
