"""sparse_mla.launch.specs: run specs, the accepted backend names (from vLLM's own classes), --speculative-config
and the SPARSE_MLA_SIMULATED_CAPABILITY report."""
import json
import os
import re

import pytest

from sparse_mla.errors import UserInputError
from sparse_mla.launch import specs


@pytest.fixture(scope="module")
def vllm_cuda():
    """vLLM's CUDA platform importable here (the diagnosis probe's stubs for the driver-bound extensions): the
    simulated-indexer rule asks vLLM's ``support_deep_gemm()`` at the simulated capability."""
    from sparse_mla.diagnose import probe

    probe.load_vllm_extensions()


def _accepted_in_message(name: str) -> list[str]:
    with pytest.raises(UserInputError) as e:
        specs.attention_config(name)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1
    inner = re.search(r"CUDA sparse MLA backends \(([^)]*)\)", msg).group(1)
    return [n.strip() for n in inner.split(",")], msg


def test_the_accepted_list_is_what_launch_accepts():
    """The backend list in the error message for a dense name is exactly the set attention_config accepts: every
    name in it passes, every other vLLM backend name (DeepSeek-V4's 512-wide *_DSV4 ones included) is refused, and
    CUSTOM -- ours -- is named as accepted."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    listed, msg = _accepted_in_message("TRITON_MLA")
    assert "TRITON_MLA_SPARSE (alias CUSTOM)" in msg and "auto" in msg
    assert listed == list(specs.sparse_mla_backend_names())
    for name in listed:
        assert specs.attention_config(name) == {"backend": name}
    assert specs.attention_config("CUSTOM") == specs.attention_config("triton_mla_sparse") == {"backend": "CUSTOM"}
    others = [m for m in AttentionBackendEnum.__members__ if m not in listed and m != "CUSTOM"]
    dsv4 = [m for m in others if m.endswith("_DSV4")]
    assert dsv4, "vLLM 0.26.0 has DeepSeek-V4 sparse backends; this test expects to see them refused"
    for name in others:
        with pytest.raises(UserInputError, match="accepted: auto"):
            specs.attention_config(name)
    assert {"FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE"} <= set(listed)
    assert not any(n.startswith(("ROCM_", "XPU_")) for n in listed)


def test_head_size_comes_from_the_backend_classes():
    """A 512-wide head (DeepSeek-V4) gets the *_DSV4 backends, and GLM-5's FLASHMLA_SPARSE only on the lines where it
    also takes GLM-5.3-Flash's NoPE 512 head (0.33 on): the filter is the classes' supports_head_size, not a list typed
    here."""
    from sparse_mla.models import GLM5_NEXT_VLLM_LINES
    from sparse_mla.vllm_lines import current_line

    names_512 = specs.sparse_mla_backend_names(512)
    assert any(n.endswith("_DSV4") for n in names_512)
    assert ("FLASHMLA_SPARSE" in names_512) is (current_line() in GLM5_NEXT_VLLM_LINES)
    assert not any(n.endswith("_DSV4") for n in specs.sparse_mla_backend_names())


@pytest.mark.parametrize("text,name,backend,indexer", [
    ("TRITON_MLA_SPARSE", "TRITON_MLA_SPARSE", "TRITON_MLA_SPARSE", "vllm"),
    ("custom+triton_dsa_indexer", "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER", "TRITON_MLA_SPARSE", "TRITON_DSA_INDEXER"),
    (" flashmla_sparse + TRITON_DSA_INDEXER ", "FLASHMLA_SPARSE+TRITON_DSA_INDEXER", "FLASHMLA_SPARSE",
     "TRITON_DSA_INDEXER"),
    ("auto", "auto", "auto", "vllm"),
])
def test_parse_run_spec(text, name, backend, indexer):
    s = specs.parse_run_spec(text)
    assert (s.name, s.backend, s.indexer, s.capability) == (name, backend, indexer, None)
    assert s.env == {"SPARSE_MLA_TRITON_INDEXER": "1" if indexer == "TRITON_DSA_INDEXER" else None}
    assert s.describe() == {"run": name, "backend_requested": backend, "indexer": indexer}


@pytest.mark.parametrize("text,name,cap", [
    ("custom+triton_dsa_indexer@8.0", "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.0", "8.0"),
    ("TRITON_MLA_SPARSE @ 8.6 ", "TRITON_MLA_SPARSE@8.6", "8.6"),
    ("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER @ 12.0 ", "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@12.0", "12.0"),
])
def test_a_simulated_capability_goes_to_the_engines_environment(text, name, cap, vllm_cuda):
    s = specs.parse_run_spec(text)
    assert (s.name, s.capability) == (name, cap)
    assert s.env["SPARSE_MLA_SIMULATED_CAPABILITY"] == cap            # only the test harness acts on it
    assert s.describe()["simulated_capability"] == cap and s.describe()["run"] == name
    assert specs.normalize_backends([text, name]) == (name,)


@pytest.mark.parametrize("bad,says", [
    ("FLASHMLA_SPARSE+FAST", "run spec 'FLASHMLA_SPARSE+FAST' is not accepted"),
    ("FLASHMLA_SPARSE+TRITON_DSA_INDEXER+TRITON_DSA_INDEXER", "is not accepted"),
    ("TRITON_MLA+TRITON_DSA_INDEXER", "'TRITON_MLA' is not a CUDA sparse MLA backend"),
    ("TRITON_MLA_SPARSE@8", "has capability '8'; accepted:"),
    ("TRITON_MLA_SPARSE@8.0@9.0", "has capability '8.0@9.0'"),
    ("TRITON_MLA_SPARSE@", "has capability ''"),
    (7, "is not a name"),
    ("", "run spec '' is not accepted"),                    # ran as auto (issue 47, round 8)
    ("+TRITON_DSA_INDEXER", "run spec '+TRITON_DSA_INDEXER' is not accepted"),
])
def test_parse_run_spec_refuses(bad, says):
    with pytest.raises(UserInputError, match=re.escape(says)) as e:
        specs.parse_run_spec(bad)
    assert len(str(e.value).splitlines()) == 1


def test_normalize_backends_with_run_specs():
    assert specs.normalize_backends(["triton_mla_sparse+triton_dsa_indexer", "TRITON_MLA_SPARSE", "custom",
                                     "FLASHMLA_SPARSE", "flashmla_sparse+TRITON_DSA_INDEXER"]) == (
        "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER", "TRITON_MLA_SPARSE", "FLASHMLA_SPARSE",
        "FLASHMLA_SPARSE+TRITON_DSA_INDEXER")
    with pytest.raises(UserInputError, match="names no backend"):
        specs.normalize_backends(["auto+TRITON_DSA_INDEXER"])


@pytest.mark.parametrize("name,refused", [
    ("TRITON_MLA_SPARSE@12.0", True), ("FLASHMLA_SPARSE@9.0", True), ("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@12.0", False),
    ("TRITON_MLA_SPARSE@8.0", False), ("TRITON_MLA_SPARSE@8.9", False), ("TRITON_MLA_SPARSE", False)])
def test_a_simulation_runs_vllms_deepgemm_indexer_nowhere(name, refused, vllm_cuda):
    """vLLM's indexer under a simulated capability only where the plugin's default is the Triton indexer there: on
    12.0 and 9.0 vLLM's is DeepGEMM, built for the live GPU (H100, 2026-12-06: wrong tokens at a simulated 12.0)."""
    if refused:
        with pytest.raises(UserInputError, match=re.escape(f"{name.split('@')[0]}+TRITON_DSA_INDEXER@")) as e:
            specs.normalize_backends([name])
        assert len(str(e.value).splitlines()) == 1 and name in str(e.value)
    else:
        assert specs.normalize_backends([name]) == (specs.parse_run_spec(name).name,)


def _cfg_dir(tmp_path, n_mtp):
    (tmp_path / "config.json").write_text(json.dumps({"num_nextn_predict_layers": n_mtp, "index_topk": 256}))
    return tmp_path


def test_check_speculative_config(tmp_path):
    mtp = '{"method": "mtp", "num_speculative_tokens": 1}'
    assert specs.check_speculative_config(None) is None and specs.check_speculative_config("  ") is None
    assert specs.check_speculative_config(mtp, _cfg_dir(tmp_path, 1)) == json.loads(mtp)
    ngram = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}
    assert specs.check_speculative_config(ngram, _cfg_dir(tmp_path, 0)) == ngram   # no MTP layer needed
    for bad, says in (("{x", "is not valid JSON"), ("[1]", "non-empty JSON object"), ("{}", "non-empty JSON object"),
                      ('"mtp"', "non-empty JSON object")):
        with pytest.raises(UserInputError, match=says):
            specs.check_speculative_config(bad)
    for method in ("mtp", "deepseek_mtp"):   # vLLM's MTPModelTypes, deprecated names included
        with pytest.raises(UserInputError, match="num_nextn_predict_layers = 0.*make-checkpoint --mtp"):
            specs.check_speculative_config({"method": method, "num_speculative_tokens": 1}, _cfg_dir(tmp_path, 0))


def test_simulated_reports_the_variable_only(monkeypatch):
    monkeypatch.delenv(specs.SIMULATED_ENV, raising=False)
    assert specs.simulated() is None and specs.with_simulated({"a": 1}) == {"a": 1}
    monkeypatch.setenv(specs.SIMULATED_ENV, "12.0")
    sim = specs.simulated()
    assert sim["capability"] == "12.0" and specs.SIMULATED_ENV in sim["how"] and "simulates nothing" in sim["how"]
    assert any("SASS" in d for d in sim["differs"]) and any("memory system" in d for d in sim["differs"])
    assert specs.with_simulated({"a": 1}) == {"a": 1, "simulated": sim}


def test_patched_environ_restores(monkeypatch):
    monkeypatch.setenv("SPARSE_MLA_TEST_A", "x")
    monkeypatch.delenv("SPARSE_MLA_TEST_B", raising=False)
    with pytest.raises(RuntimeError):
        with specs.patched_environ({"SPARSE_MLA_TEST_A": None, "SPARSE_MLA_TEST_B": "1"}):
            assert "SPARSE_MLA_TEST_A" not in os.environ and os.environ["SPARSE_MLA_TEST_B"] == "1"
            raise RuntimeError
    assert os.environ["SPARSE_MLA_TEST_A"] == "x" and "SPARSE_MLA_TEST_B" not in os.environ


def test_unimportable_backend_classes(monkeypatch):
    """A class that cannot be imported here is kept when it is one of vLLM's general backends (vLLM judges it on the
    GPU) and dropped when it is a model's own (its head size cannot be read): never a DSV4 backend by accident."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    real = AttentionBackendEnum.get_class

    def get_class(self):
        if self.name in ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4"):
            raise ImportError("no extension here")
        return real(self)

    specs.sparse_mla_backend_names.cache_clear()
    monkeypatch.setattr(AttentionBackendEnum, "get_class", get_class)
    try:
        names = specs.sparse_mla_backend_names()
        names_512 = specs.sparse_mla_backend_names(512)
    finally:
        specs.sparse_mla_backend_names.cache_clear()
    assert "FLASHMLA_SPARSE" in names and "FLASHMLA_SPARSE_DSV4" not in names
    assert "FLASHMLA_SPARSE_DSV4" not in names_512 and "FLASHINFER_MLA_SPARSE_DSV4" in names_512
