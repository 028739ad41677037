"""The error table speaks for groups it has not seen: every group weighs the same, and a cell of too
few groups gives way to a coarser one."""

import pandas as pd

from servopt.calibration.error_bars import build_error_bars
from servopt.costmodels.uncertainty import PredictionKind


def _errors(group: str, runs: int, error: float, gpu_class: str) -> pd.DataFrame:
    return pd.DataFrame({"metric": "mean_tpot", "log_error": [error] * runs, "group": group, "calibrated": True,
                         "gpu_class": gpu_class, "family": "dense", "engine": "v1", "regime": "light"})


def test_a_cell_of_two_groups_gives_way_to_one_of_more():
    errors = pd.concat([_errors("a", 30, 0.0, "hopper"), _errors("b", 30, 0.01, "hopper"),
                        _errors("c", 5, 0.5, "ampere"), _errors("d", 5, -0.5, "ampere")])
    kind = PredictionKind(calibrated=True, gpu_class="hopper", family="dense", engine="v1", regime="light")
    name, cell = build_error_bars(errors).cell("mean_tpot", kind)
    # The Hopper cell has 60 runs but only two groups: the interval comes from all four groups.
    assert "gpu_class" not in name and cell.groups == 4
    assert cell.low < -0.1 and cell.high > 0.1


def test_a_big_group_does_not_outvote_small_ones():
    errors = pd.concat([_errors("big", 200, 0.0, "hopper"), _errors("s1", 10, 0.4, "hopper"),
                        _errors("s2", 10, 0.5, "hopper")])
    kind = PredictionKind(calibrated=True, gpu_class="hopper", family="dense", engine="v1", regime="light")
    _, cell = build_error_bars(errors).cell("mean_tpot", kind)
    assert cell.high >= 0.4  # run-weighted, the 90th percentile would be 0.0
