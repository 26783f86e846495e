"""Fixtures: a real kraft-controller and kraft-brokers (3 temp log dirs each) on loopback."""

import pytest

from testkit.cluster import Cluster


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(n_brokers: int = 2, broker_extra: dict | None = None, controller_extra: dict | None = None):
        cluster = Cluster(tmp_path, n_brokers, broker_extra, controller_extra=controller_extra, replicated=False)
        made.append(cluster)
        cluster.ctrl.format()
        cluster.start(wait=False)
        return cluster.ctrl, cluster.brokers

    yield make
    for cluster in reversed(made):
        cluster.kill()


@pytest.fixture
def cluster(make_cluster):
    return make_cluster()
