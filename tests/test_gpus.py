"""``sparse_mla.gpus``: the named GPUs' SM counts, which ``records check`` holds a header's ``sm_count`` to."""
import pytest

from sparse_mla.gpus import DEVICE_LIMITS, GPUS, mig_parent


@pytest.mark.parametrize("preset, name, sms", [
    ("h100", "NVIDIA H100 80GB HBM3", 132), ("h100", "NVIDIA H100 PCIe", 114), ("h100", "NVIDIA H100 NVL", 132),
    ("h200", "NVIDIA H200", 132), ("h200", "NVIDIA H200 NVL", 132), ("a100", "NVIDIA A100-SXM4-80GB", 108),
    ("rtx-4090", "NVIDIA GeForce RTX 4090", 128), ("rtx-4090", "NVIDIA GeForce RTX 4090 D", 114),
    ("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 188),
    ("h100", "NVIDIA H100 PCIe MIG 1g.10gb", 114),      # a MIG slice: its whole GPU's, the most it may have
])
def test_a_cards_sms_are_its_variants_else_the_presets(preset, name, sms):
    assert GPUS[preset].sm_count(name) == sms


def test_every_planning_row_is_the_sm_count_of_a_preset_of_its_capability():
    """DEVICE_LIMITS holds one GPU's SMs per capability: that of a named GPU of the same capability."""
    for (major, minor), lim in DEVICE_LIMITS.items():
        assert lim.sm_count in {g.sms for g in GPUS.values() if g.capability == f"{major}.{minor}"}, (major, minor)


@pytest.mark.parametrize("name, parent, mig", [
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA H100 80GB HBM3", True),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A100-SXM4-40GB", True),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "NVIDIA H100 80GB HBM3", True),
    ("NVIDIA A100-SXM4-40GB MIG 4c.7g.40gb", "NVIDIA A100-SXM4-40GB", True),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", False),
    ("NVIDIA H100 80GB HBM3 MIG", "NVIDIA H100 80GB HBM3 MIG", False),
])
def test_a_mig_slices_name_is_its_gpus_and_its_profile(name, parent, mig):
    assert mig_parent(name) == (parent, mig)


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H100 PCIe", "h100"), ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100"),
    ("NVIDIA GeForce RTX 4090 D", "rtx-4090"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
    ("NVIDIA GeForce RTX 5090 Laptop GPU", "rtx-5090"),
    ("NVIDIA GB10", "gb10"), ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "h100"),
    # issue 47 round 13 (r46, r47): a preset held as a word is no driver's name
    ("NVIDIA h200", None), ("NVIDIA Fake H200 Clone", None), ("NVIDIA H2000", None), ("NVIDIA A400", None),
    ("h200", None), ("NVIDIA", None), ("H200", None), (None, None),
    # round 14 (t88-t96): a profile in another case or twice, the consumer brand on the wrong card, a line break
    ("NVIDIA H200 mig 1G.18GB", None), ("NVIDIA H200 MIG 1g.18gb MIG 1g.18gb", None), ("NVIDIA GeForce H200", None),
    ("NVIDIA RTX 4090", None), ("NVIDIA H200\n", None), ("NVIDIA H200 ", None),
    # later drivers' engine suffixes, taken in the +me form (t85-t87)
    ("NVIDIA B200 MIG 1g.23gb+me.all", "b200"), ("NVIDIA B200 MIG 1g.23gb-me", "b200"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb+gfx", "rtx-pro-6000"),
    # round 15 (u40, u46, u47): one engine suffix; a slice only of a GPU with MIG
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me+me", None), ("NVIDIA GeForce RTX 4090 MIG 1g.10gb", None),
    ("NVIDIA L40S MIG 1g.12gb", None), ("NVIDIA A100-SXM4-40GB MIG 4c.7g.40gb", "a100"),
    ("NVIDIA B200 MIG 1g.23gb+me.all.all", None),                                    # round 16 (v34)
])
def test_a_device_name_is_the_drivers_name_of_a_preset(name, preset):
    from sparse_mla.gpus import device_name_preset

    assert device_name_preset(name) == preset
