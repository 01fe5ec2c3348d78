"""The bad-input contract, property-based (hypothesis): whatever config dict or option string a user hands
``sparse-mla launch`` on a machine without a GPU, the command exits 2 with exactly one line on stderr, no traceback,
and writes nothing (launch cannot succeed here, so every generated input must end in that one line)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse_mla import cli
from sparse_mla.models import POSITIVE_DIMENSIONS, PRESET_CONFIGS

VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.integers(10**300, 10**301),
                   st.floats(allow_nan=True), st.text(max_size=12), st.lists(st.integers(), max_size=3),
                   st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
KEYS = st.sampled_from(sorted(set(POSITIVE_DIMENSIONS) | {"architectures", "model_type", "text_config",
                                                          "num_nextn_predict_layers", "rope_theta"}))
OPTIONS = st.sampled_from(["--kv-cache-dtype", "--tp", "--backends", "--throughput", "--speculative-config",
                           "--prompt-lengths", "--max-tokens", "--json-out"])


def _launch(capsys, monkeypatch, config: dict, extra: list[str]) -> None:
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: False)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "model"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        before = sorted(Path(tmp).rglob("*"))
        try:
            rc = cli.main(["launch", "--model", str(d), "--no-serve", *extra])
        except SystemExit as e:        # argparse's own refusals (a wrong type) exit from inside the parser
            rc = e.code
        out, err = capsys.readouterr()
        assert sorted(Path(tmp).rglob("*")) == before, "something was written"
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and lines[0].startswith("sparse-mla launch: error: "), \
        (config, extra, err[-1500:])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(KEYS, VALUES, min_size=1, max_size=3))
def test_any_config_gets_one_line(capsys, monkeypatch, changes):
    _launch(capsys, monkeypatch, {**PRESET_CONFIGS["glm-5"], **changes}, [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=OPTIONS, value=st.text(max_size=40))
def test_any_option_string_gets_one_line(capsys, monkeypatch, option, value):
    if option == "--json-out" and value.strip() and "\0" not in value:
        value = "/nonexistent-dir-of-the-test/" + value.replace("/", "_")   # never a path inside the repository
    _launch(capsys, monkeypatch, dict(PRESET_CONFIGS["glm-5"]), [option, value])
