"""sparse_mla.diagnose.config: a config.json vLLM's loader refuses is one line that says why."""
from __future__ import annotations

import json

import pytest

from sparse_mla import cli
from sparse_mla.models import PRESET_CONFIGS


@pytest.mark.parametrize("change, reason", [
    # (a field of the workbook's own rule, e.g. num_hidden_layers, is refused before vLLM sees it: tests/test_models.py)
    ({"first_k_dense_replace": "2"}, "Field 'first_k_dense_replace' expected int, got str (value: '2')"),
    ({"q_lora_rank": None}, "Field 'q_lora_rank' expected int, got NoneType"),
    ({"qk_rope_head_dim": 7}, "RoPE requires an even rotary dimension"),
])
def test_vllm_loader_refusal_keeps_its_reason(tmp_path, capsys, change, reason):
    """transformers puts the reason on the line after "Validation error for field 'x':", which alone was shown."""
    from transformers import AutoConfig

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**PRESET_CONFIGS["glm-5"], **change}))
    try:
        AutoConfig.from_pretrained(tmp_path)
    except Exception:  # noqa: BLE001  (this transformers refuses the value: the diagnosis must keep its reason)
        pass
    else:
        pytest.skip(f"transformers {__import__('transformers').__version__} accepts {change}")
    assert cli.main(["diagnose", "--model", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM cannot load the config" in err[0] and reason in err[0], err


def test_refusal_names_the_users_file_not_the_temporary_copy(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({k: v for k, v in PRESET_CONFIGS["glm-5"].items() if k != "model_type"}))
    assert cli.main(["diagnose", "--model", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"Unrecognized model in {cfg}" in err[0] and "sparse_mla_model_" not in err[0], err
