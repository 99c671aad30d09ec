"""A replica's health probe: Ray Serve calls check_health and replaces a replica that raises."""
import pytest

from orthrus_rag.serving.ray_serve import EngineReplica


class StubEngine:
    def __init__(self, reason):
        self.reason = reason

    def health(self):
        return self.reason

    def shutdown(self):  # called when the replica is collected
        pass


def replica(reason) -> EngineReplica:
    r = EngineReplica.__new__(EngineReplica)  # no engine load: only the probe is under test
    r.engine = StubEngine(reason)
    return r


def test_a_healthy_engine_passes_the_probe():
    replica(None).check_health()


def test_a_dead_engine_fails_the_probe_with_its_reason():
    with pytest.raises(RuntimeError, match="cannot serve: the engine thread stopped"):
        replica("the engine thread stopped (AssertionError('block 3 freed twice'))").check_health()
