"""``sparse_mla.vllm_plugin.switches``: the plugin's environment switches read one way -- the documented words on,
off or nothing -- and any other text refused by ``sparse-mla`` before a command starts (tests/test_cli.py) and, inside
an engine, read as unset with one warning naming the variable and the value (issue 47, breaker round 7: ``maybe`` and
``2`` were read as on)."""
from __future__ import annotations

import logging

import pytest

from sparse_mla.errors import UserInputError
from sparse_mla.vllm_plugin import selector, switches


@pytest.mark.parametrize("name", list(switches.SWITCHES))
@pytest.mark.parametrize("raw, read", [("1", True), ("On", True), (" yes ", True), ("TRUE", True), ("0", False),
                                       ("off", False), ("No", False), ("false", False), ("", None), ("  ", None)])
def test_the_documented_words_are_read_as_they_say(monkeypatch, name, raw, read):
    monkeypatch.setenv(name, raw)
    assert switches.switch(name) is read
    switches.check_switches()
    monkeypatch.delenv(name)
    assert switches.switch(name) is None


@pytest.mark.parametrize("name, raw", [(switches.DISABLE_ENV, "maybe"), (switches.PREFER_ENV, "2"),
                                       (switches.FORCE_ENV, "flase"), (switches.COUNT_ENV, "banana")])
def test_another_text_is_refused_up_front_and_read_as_unset_with_a_warning_in_an_engine(monkeypatch, caplog, name,
                                                                                        raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(UserInputError) as e:
        switches.check_switches()
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{name}={raw!r} is no switch value; accepted: 1 / true / yes / on")
    assert "0 / false / no / off" in line and "or unset" in line
    monkeypatch.setattr(switches, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger=switches.__name__):
        assert switches.switch(name) is None and switches.switch(name) is None
    said = [r.getMessage() for r in caplog.records if r.name == switches.__name__]
    assert said == [f"sparse_mla: {line}; read as unset"]           # once per value, not once per selection


def test_the_selector_reads_its_switches_through_the_one_reading(monkeypatch):
    """``SPARSE_MLA_DISABLE_FALLBACK=maybe`` / ``SPARSE_MLA_PREFER_TRITON=2`` were on inside the engine (anything but
    an off word was); now off, as unset, while ``1`` stays on."""
    for name in (selector.DISABLE_ENV, selector.PREFER_ENV):
        monkeypatch.setenv(name, "maybe" if name == selector.DISABLE_ENV else "2")
        assert selector.flag(name) is False
        monkeypatch.setenv(name, "1")
        assert selector.flag(name) is True
