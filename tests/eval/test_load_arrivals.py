"""Arrival times: the requested rate, burstiness as variance, the same offsets for the same seed."""
import numpy as np
import pytest

from orthrus_rag.eval.load.arrivals import Load, arrival_gaps, arrival_offsets


@pytest.mark.parametrize("rate, burstiness", [(0.5, 1.0), (4.0, 1.0), (2.0, 4.0), (2.0, 0.25)])
def test_mean_gap_matches_rate(rate, burstiness):
    gaps = arrival_gaps(200_000, rate, burstiness, seed=1)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.02)
    # gamma with shape 1/b and mean 1/rate: variance b / rate^2
    assert gaps.var() == pytest.approx(burstiness / rate**2, rel=0.05)


def test_poisson_counts():
    """burstiness 1: counts per unit window are Poisson (mean = variance = rate)."""
    offsets = np.array(arrival_offsets(100_000, 3.0, 1.0, seed=7))
    counts = np.bincount(offsets.astype(int))[:-1]
    assert counts.mean() == pytest.approx(3.0, rel=0.02) and counts.var() == pytest.approx(3.0, rel=0.05)


def test_burstiness_changes_variance_not_mean():
    regular, poisson, bursty = (arrival_gaps(50_000, 1.0, b, seed=0) for b in (0.1, 1.0, 8.0))
    assert regular.var() < poisson.var() / 5 < bursty.var() / 40
    for gaps in (regular, poisson, bursty):
        assert gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_same_seed_same_offsets_other_seed_other_offsets():
    a = Load(rate=0.7, burstiness=2.0, seed=11).arrivals(50)
    b = Load(rate=0.7, burstiness=2.0, seed=11).arrivals(50)
    c = Load(rate=0.7, burstiness=2.0, seed=12).arrivals(50)
    assert a == b and a != c
    assert all(x < y for x, y in zip(a, a[1:])) and a[0] > 0


def test_closed_loop_has_no_arrivals():
    load = Load(rate=None, clients=4)
    assert load.arrivals(10) is None and load.concurrency() == 4 and load.label == "closed C=4"
    assert Load(rate=2.0).concurrency() is None and Load(rate=2.0, max_in_flight=3).concurrency() == 3
    assert Load(rate=0.5).label == "rate 0.5/s" and Load(rate=0.5, burstiness=2).label == "rate 0.5/s b=2"


@pytest.mark.parametrize("kwargs, match", [({"rate": 0}, "rate"), ({"rate": -1.0}, "rate"),
                                           ({"rate": 1.0, "burstiness": 0}, "burstiness"),
                                           ({"rate": None, "clients": 0}, "clients"),
                                           ({"rate": 1.0, "max_in_flight": 0}, "max_in_flight")])
def test_bad_loads_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Load(**kwargs)
