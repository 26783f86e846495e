"""Fixtures: a real kraft-controller and kraft-brokers (3 temp log dirs each) on loopback."""

import pytest

from testkit.processes import BrokerProcess
from testkit.processes import ControllerProcess


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(n_brokers: int = 2, broker_extra: dict | None = None, controller_extra: dict | None = None):
        ctrl = ControllerProcess(str(tmp_path / "controller"),
                                 extra={"broker.session.timeout.ms": "3000", **(controller_extra or {})})
        ctrl.format()
        ctrl.start()
        made.append(ctrl)
        brokers = [BrokerProcess(str(tmp_path / f"broker{i}"), i, ctrl, extra=dict(broker_extra or {}))
                   for i in range(1, n_brokers + 1)]
        made.extend(brokers)
        for b in brokers:
            b.format()
            b.start()
        return ctrl, brokers

    yield make
    for p in reversed(made):
        p.kill()


@pytest.fixture
def cluster(make_cluster):
    return make_cluster()
