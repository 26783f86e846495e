import argparse

import pytest

from harness.cli import bench as bench_cmd

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("argv,names,extra", [
    (["replication", "--", "--part", "scale"], ["replication"], ["--part", "scale"]),
    (["replication", "controller"], ["replication", "controller"], []),
    ([], [], []),
])
def test_names_end_at_the_first_option(argv, names, extra):
    parser = argparse.ArgumentParser()
    bench_cmd.configure(parser)
    args = parser.parse_args(argv)
    assert bench_cmd.split_names([*args.names, *args.rest]) == (names, extra)
