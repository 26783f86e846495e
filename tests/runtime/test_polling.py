"""poll_until: the first truthy answer, asked again until the deadline; None after it."""

import time

import pytest

from kafka_runtime.polling import poll_until

pytestmark = pytest.mark.unit


def test_the_first_truthy_answer_is_returned_after_the_falsy_ones():
    answers = iter([0, "", None, [1], "later"])
    assert poll_until(lambda: next(answers), 5.0, interval_s=0.001) == [1]
    assert next(answers) == "later"   # not asked again once one was truthy


def test_none_when_nothing_truthy_came_within_the_timeout():
    calls = []
    start = time.monotonic()
    assert poll_until(lambda: calls.append(1), 0.05, interval_s=0.01) is None
    assert time.monotonic() - start >= 0.05 and len(calls) >= 2


def test_a_zero_timeout_still_asks_once():
    assert poll_until(lambda: "ready", 0) == "ready"
