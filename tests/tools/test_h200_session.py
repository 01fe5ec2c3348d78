"""The maintainers' GPU harness (tools/gpu/h200_session.sh): what bash would read otherwise than written."""
import re
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "h200_session.sh"


def test_no_record_name_reads_an_unset_variable():
    """``launch_$G_simulated.json`` is ``launch_`` + ``$G_simulated`` (unset) + ``.json`` to bash: every record of
    such a stage went to ``launch_.json``, one over the other (found 2026-12-06, 21 names). Every ``$NAME`` the
    harness reads is one it sets (or the environment's ``$OUT``, ``$PATH``, ...): a suffix glued to a variable
    reads another variable."""
    text = HARNESS.read_text()
    set_here = set(re.findall(r"(?:^|[\s;(])(?:local\s+|export\s+)?([A-Za-z_]\w*)=", text, re.M))
    set_here |= {w for ws in re.findall(r"\blocal\s+([A-Za-z_][\w ]*?)(?:;|$)", text, re.M) for w in ws.split()}
    set_here |= set(re.findall(r"\bfor\s+([A-Za-z_]\w*)\s+in\b", text))
    environment = {"OUT", "PATH", "PYTHONPATH", "HOME", "CUDA_HOME", "GGUF_TYPES"}
    read = set(re.findall(r"\$\{?([A-Za-z_]\w*)", text))
    assert not sorted(read - set_here - environment), sorted(read - set_here - environment)


def test_no_stage_shadows_the_gpu_folder():
    """``$G`` is the GPU's folder and file tag (results/<gpu>/); the GGUF stages' ``local G=/tmp/gguf_site`` made
    their records ``results//tmp/gguf_site/launch_/tmp/gguf_site_gguf_q4_k.json`` (found 2026-12-06)."""
    assert not re.search(r"\blocal\s+(\w+\s+)*G=", HARNESS.read_text())
