"""The notebooks' own figures: what each draws, read back from the figure."""
import math

import matplotlib
import pandas as pd
import pytest

from sparse_mla.workbook import plots

matplotlib.use("Agg")


def _stages():
    return pd.DataFrame([dict(stage=1, run="a", planted_fault=None, worst_error_over_limit=0.0, within_limits=True),
                         dict(stage=1, run="f", planted_fault="x", worst_error_over_limit=40.0, within_limits=False),
                         dict(stage=2, run="b", planted_fault=None, worst_error_over_limit=0.3, within_limits=True),
                         dict(stage=2, run="g", planted_fault="y", worst_error_over_limit=math.nan,
                              within_limits=False),
                         dict(stage=2, run="e", planted_fault=None, worst_error_over_limit=None, within_limits=True)])


def test_stage_errors_draws_runs_and_faults_apart_against_the_limit():
    fig = plots.stage_errors(_stages(), ["one", "two"])
    ax = fig.axes[0]
    series = {c.get_label(): c.get_offsets() for c in ax.collections}
    assert sorted(series) == ["correct run", "planted fault"]
    runs, faults = series["correct run"], series["planted fault"]
    assert [round(x) for x in runs[:, 0]] == [1, 2, 2]
    assert list(runs[:, 1]) == [plots.FLOOR, 0.3, plots.FLOOR]         # error 0, an exact check that held: the floor
    assert faults[0, 1] == 40.0 and faults[1, 1] == ax.get_ylim()[1] / 2    # unwritten (NaN): drawn at the top
    assert [line.get_ydata()[0] for line in ax.lines] == [1.0]
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"correct run", "planted fault"}


def test_stage_errors_refuses_a_stage_without_a_title():
    with pytest.raises(ValueError, match="need 2 titles"):
        plots.stage_errors(_stages(), ["one"])


def test_roofline_places_the_ridge_at_peak_over_bandwidth():
    fig = plots.roofline({"ours": ([2.0, 20.0], [1.0, 9.0]), "peer": ([2.0, 20.0], [0.5, 8.0])}, 4000.0,
                         peak_TFLOPs=100.0, peak_label="datasheet")
    ax = fig.axes[0]
    (roof,) = ax.lines
    x, y = roof.get_xdata(), roof.get_ydata()
    assert x[1] == pytest.approx(25.0) and y[1] == pytest.approx(100.0) and y[0] == pytest.approx(x[0] * 4)
    assert y[2] == pytest.approx(100.0)                                 # flat past the ridge
    assert [c.get_label() for c in ax.collections] == ["ours", "peer"]
    assert "datasheet" in ax.get_legend().get_texts()[0].get_text()


@pytest.mark.parametrize("bw, points", [(0, {"a": ([1], [1])}), (-5.0, {"a": ([1], [1])}),
                                        (100.0, {"a": ([1, 2], [1])})])
def test_roofline_refuses_bad_input(bw, points):
    with pytest.raises(ValueError):
        plots.roofline(points, bw)
