"""The service check and its metrics on hand-built histories with known answers.

Layout (builders.H.layout): t1-0 led by broker 1 with every replica on its broker's d1; t1-1
led by broker 2, broker 1's replica on d2. A disk fault on broker 1's d1 therefore has t1-0
in its domain and leaves t1-1 outside.
"""

import math
from dataclasses import replace

import pytest

from harness.checkers import UNKNOWN, run_checks
from harness.checkers.service import analyse_service, check_service
from harness.checkers.service_windows import MIN_BASELINE_OPS, WARMUP_MS, percentile
from harness.checkers.metrics import compute_metrics
from harness.scenario.model import Scenario
from harness.scenario.sections import Expect
from tests.harness.builders import DIRS, H

pytestmark = pytest.mark.unit

SC = Scenario(id="X", name="x", checks=("service",))
FAULT = 5000


class Ops:
    """Steady produces of one partition every ``step`` ms, with a latency per invoke time."""

    def __init__(self, h: H, partition: int, topic: str = "t1", process: str = "p0") -> None:
        self.h, self.p, self.topic, self.process, self.n = h, partition, topic, process, 0

    def run(self, start: float, end: float, latency, step: float = 50, outcome: str = "ok") -> "Ops":
        t = start
        while t < end:
            lat = latency(t) if callable(latency) else latency
            self.h.produce(t, t + lat, f"{self.topic}-{self.p}-{self.process}-{self.n}", self.p,
                           offset=self.n if outcome == "ok" else None, outcome=outcome, topic=self.topic,
                           process=self.process)
            self.n += 1
            t += step
        return self


def base(fault_mode: str = "error", heal_at: float | None = None) -> H:
    h = H().register_all(0).layout(1)
    h.disk_fault(FAULT, 1, 0, mode=fault_mode, fault_id="f0")
    if heal_at is not None:
        h.harness(heal_at, "fault_healed", 1, fault_id="f0")
    return h


def healthy(h: H, end: float = 15000) -> H:
    """Both partitions at 20 ms before the fault; t1-0 fails for 1 s after it, then 20 ms."""
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, FAULT + 1000, 30, outcome="info").run(FAULT + 1000, end, 20)
    Ops(h, 1).run(0, end, 20)
    return h


def test_percentile_is_type_7():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([10.0], 0.99) == 10.0
    assert percentile([1.0, math.inf], 0.5) == math.inf


def test_true_when_the_failed_dir_recovers_and_the_rest_never_slows():
    a = analyse_service(SC, healthy(base()).build())
    assert a.valid is True, a.summary
    p0, p1 = a.partitions
    assert (p0.outside, p1.outside) == (False, True) and p0.faults == ["f0"]
    assert p0.recovery_ms["f0"] == 1000.0 and p1.recovery_ms["f0"] == 0.0
    assert p0.stats["before"]["p50_ms"] == 20.0 and p0.stats["before"]["n"] == (FAULT - WARMUP_MS) // 50
    assert p0.stats["during"]["failed"] == 20 and p1.degradation_ratio == 1.0
    assert p0.window_ms == 1000  # 20 ops/s: one second already holds 10 ops


def test_false_when_a_partition_outside_the_failed_dir_slows_down():
    h = base()
    Ops(h, 0).run(0, 15000, 20)
    Ops(h, 1).run(0, FAULT, 20).run(FAULT, 15000, lambda t: 20 if t < 9000 else 400)
    a = analyse_service(SC, h.build())
    assert a.valid is False
    p1 = a.partitions[1]
    assert p1.outside and p1.degradation_ratio == 20.0 and p1.worst_p50_ms == 400
    assert "(outside)" in a.summary and "400 ms" in a.summary and "beyond 120 ms" in a.summary
    # the same slowness inside the failed dir is the failover's business, not a degradation
    h = base()
    Ops(h, 1).run(0, 15000, 20)
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, 15000, lambda t: 20 if t < 9000 else 25)
    assert analyse_service(SC, h.build()).valid is True


def test_the_floor_keeps_small_absolute_changes_out():
    h = base()
    Ops(h, 0).run(0, 15000, 2)
    Ops(h, 1).run(0, FAULT, 2).run(FAULT, 15000, 80)      # ×40 but only +78 ms < floor 100 ms
    a = analyse_service(SC, h.build())
    assert a.valid is True and a.partitions[1].degradation_ratio == 40.0
    strict = replace(SC, expect=Expect(service_latency_floor_ms=10))
    assert analyse_service(strict, h.build()).valid is False


def test_false_when_a_partition_never_recovers():
    h = base()
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, 15000, 1200)
    Ops(h, 1).run(0, 15000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid is False and a.partitions[0].recovery_ms == {"f0": None}
    assert "never back within 120 ms" in a.summary
    rows = compute_metrics(h.build(), SC)
    assert [r["value"] for r in rows if r["metric"] == "service_unrecovered"] == [1.0]
    assert not [r for r in rows if r["metric"] == "service_recovery_ms" and r["topic"] is None]


def test_false_when_recovery_is_later_than_the_bound_and_true_with_a_wider_bound():
    h = base()
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, FAULT + 7000, 900).run(FAULT + 7000, 20000, 20)
    Ops(h, 1).run(0, 20000, 20)
    assert analyse_service(SC, h.build()).valid is False
    wide = replace(SC, expect=Expect(service_recovery_within_ms=10000))
    a = analyse_service(wide, h.build())
    assert a.valid is True and a.partitions[0].recovery_ms["f0"] == 7000.0


def test_a_single_good_window_is_not_a_recovery():
    """Back to normal for 300 ms, slow again: the recovery is where it stays good."""
    h = base()
    slow = lambda t: 20 if FAULT + 2000 <= t < FAULT + 2300 or t >= FAULT + 4000 else 900  # noqa: E731
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, 15000, slow)
    Ops(h, 1).run(0, 15000, 20)
    assert analyse_service(SC, h.build()).partitions[0].recovery_ms["f0"] == 4000.0


def test_unknown_with_too_few_samples_or_when_the_history_ends_early():
    h = base()
    Ops(h, 0).run(2000, 15000, 20, step=400)              # 8 ops before the fault
    Ops(h, 1).run(0, 15000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid == UNKNOWN and "too few samples" in a.summary
    assert a.partitions[0].stats["before"]["n"] < MIN_BASELINE_OPS
    h = base()
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, FAULT + 3000, 900)   # ends 3 s after the fault, still slow
    Ops(h, 1).run(0, FAULT + 3000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid == UNKNOWN and "not recovered in the" in a.summary


def test_false_when_the_baseline_itself_is_slow():
    h = base()
    Ops(h, 0).run(0, 15000, 1500)                         # the same 1.5 s before and after
    Ops(h, 1).run(0, 15000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid is False and "baseline p50 1500 ms before any fault (p50 bound 500 ms)" in a.summary
    h = base()                                            # half the produces time out before the fault
    Ops(h, 0).run(0, FAULT, 20, step=100).run(50, FAULT, 20000, step=100, outcome="info").run(FAULT, 15000, 20)
    Ops(h, 1).run(0, 15000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid is False and "40 of 80 produces not acked before any fault" in a.summary


def test_a_slow_disk_is_judged_from_its_heal():
    h = base(fault_mode="delay", heal_at=FAULT + 6000)
    Ops(h, 0).run(0, FAULT, 20).run(FAULT, FAULT + 6000, 400).run(FAULT + 6000, 16000, 20)
    Ops(h, 1).run(0, 16000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid is True, a.summary
    assert a.partitions[0].recovery_ms["f0"] == 6000.0       # 0 ms after the heal, measured from the fault
    assert a.partitions[0].recovery_judged_ms["f0"] == 0.0   # judged from the heal
    assert "recovered within 6000 ms of the fault (1 held by a slow dir: within 0 ms of its heal)" in a.summary
    assert a.windows.to_dict()["after"] == [6000.0, 10950.0]   # rounded: the last invoke + 1 ns
    assert a.partitions[0].stats["after"]["p50_ms"] == 20.0
    # outside partitions must not slow down because of someone else's slow disk
    h = base(fault_mode="delay", heal_at=FAULT + 6000)
    Ops(h, 0).run(0, 16000, 20)
    Ops(h, 1).run(0, FAULT, 20).run(FAULT, FAULT + 6000, 400).run(FAULT + 6000, 16000, 20)
    assert analyse_service(SC, h.build()).valid is False


def test_partitions_created_after_the_fault_are_not_judged():
    h = healthy(base())
    Ops(h, 0, topic="t2").run(8000, 15000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid is True and a.not_judged == {"t2-0": "first produced after the first fault: no baseline"}


def test_unknown_without_faults_or_ops():
    h = H().register_all(0).layout(1)
    Ops(h, 0).run(0, 10000, 20)
    assert check_service(SC, h.build()).valid == UNKNOWN
    assert check_service(SC, base().build()).valid == UNKNOWN


def test_windows_end_at_the_last_heal_and_instant_faults_end_where_they_start():
    h = base(heal_at=9000)
    h.harness(7000, "fault_injected", 2, fault_id="f1", kind="process", action="restart", fault_kind="restart",
              node_ref="broker:2")
    healthy(h)
    w = analyse_service(SC, h.build()).windows.to_dict()
    assert w["before"] == [-4000.0, 0.0] and w["during"] == [0.0, 4000.0] and w["after"][0] == 4000.0
    h = base()                                             # never healed: during lasts to the end
    healthy(h)
    w = analyse_service(SC, h.build()).windows.to_dict()
    assert w["after"] is None and w["during"][1] > 9900


def test_broker_wide_faults_put_every_replica_of_the_broker_in_their_domain():
    h = H().register_all(0).layout(1)
    h.harness(FAULT, "fault_injected", 3, fault_id="f0", kind="process", action="kill", fault_kind="kill(SIGKILL)",
              node_ref="broker:3")
    healthy(h)
    a = analyse_service(SC, h.build())
    assert [p.outside for p in a.partitions] == [False, False]


def test_metric_rows_per_partition_and_for_the_run():
    h = healthy(base())
    rows = compute_metrics(h.build(), SC)
    by = {}
    for r in rows:
        by.setdefault((r["metric"], r["topic"], r["partition"]), []).append(r)
    assert by[("produce_before_p50_ms", "t1", 0)][0]["value"] == 20.0
    assert by[("produce_during_p99_ms", "t1", 1)][0]["value"] == 20.0
    assert by[("produce_before_per_s", "t1", 0)][0]["unit"] == "per_s"
    rec = by[("service_recovery_ms", "t1", 0)][0]
    assert rec["value"] == 1000.0 and rec["fault_id"] == "f0" and rec["node_id"] == 1
    run = by[("service_recovery_ms", None, None)][0]
    assert run["value"] == 1000.0 and run["fault_id"] == "f0"
    assert by[("latency_degradation_ratio", None, None)][0]["value"] == 1.0   # the worst outside partition
    assert by[("latency_degradation_ratio", "t1", 1)][0]["unit"] == "ratio"
    assert by[("service_unrecovered", None, None)][0]["value"] == 0.0
    assert ("produce_after_p50_ms", "t1", 0) not in by                     # never healed: no after window


def test_run_checks_reports_service_with_the_others():
    report = run_checks(replace(SC, checks=("service",)), healthy(base()).build())
    assert [r.name for r in report.results] == ["service"] and report.valid is True
    d = report.results[0].to_dict()["details"]
    assert d["outside"] == ["t1-1"] and d["partitions"]["t1-0"]["recovery_ms"] == {"f0": 1000.0}
    assert d["bounds"]["latency_factor"] == 2.0 and d["windows"]["relative_to"] == "first fault"


def test_several_producers_keep_durability_exact():
    """Two producers interleave on one partition: ordering is judged per producer only."""
    from harness.checkers import check_durability
    h = H()
    h.produce(0, 10, "a", 0, offset=1, process="p0").produce(20, 30, "b", 0, offset=0, process="p1")
    h.produce(40, 50, "c", 0, offset=2, process="p0")
    for vid, off in (("b", 0), ("a", 1), ("c", 2)):
        h.consume(100 + off, vid, 0, off)
    h.drained(200, 0, 3)
    r = check_durability(SC, h.build())
    assert r.valid is True and r.details["acked"] == 3
    h.produce(60, 70, "d", 0, offset=3, process="p1").produce(80, 90, "e", 0, offset=4, process="p0")
    h.produce(95, 99, "f", 0, offset=0, process="p1")   # p1's f acked after its d, at a smaller offset
    h.consume(103, "d", 0, 3).consume(104, "e", 0, 4).drained(210, 0, 5)
    r = check_durability(SC, h.build())
    assert r.valid is False and r.details["reordered_count"] == 1
    assert r.details["examples"]["reordered"][0]["process"] == "p1"


def test_partitions_the_metadata_does_not_place_count_as_inside():
    h = healthy(base())
    Ops(h, 5).run(0, 15000, 20)                       # t1-5: no partition_change
    a = analyse_service(SC, h.build())
    assert {p.name: p.outside for p in a.partitions} == {"t1-0": False, "t1-1": True, "t1-5": False}


def test_dir_of_unknown_counts_as_in_the_domain():
    h = H().register_all(0)
    h.partition(1, 0, 1, [1, 2, 3], [1, 2, 3], ["AAAAAAAAAAAAAAAAAAAAAA", DIRS[2][0], DIRS[3][0]])
    h.partition(1, 1, 2, [2, 3, 1], [2, 3, 1], [DIRS[2][1], DIRS[3][1], DIRS[1][1]])
    h.disk_fault(FAULT, 1, 0, fault_id="f0")
    healthy(h)
    a = analyse_service(SC, h.build())
    assert [p.outside for p in a.partitions] == [False, True]


def test_a_slow_dir_holds_what_its_broker_leads_and_postpones_recovery_from_other_faults():
    """S10's shape: broker 1's d1 goes flaky (t1-0 fails over to broker 2 at +228 ms) while broker
    2's d2 is slow; broker 2's produce responses wait for its slow partitions, so everything it
    leads stalls until the heal at +10 s, then recovers at once: true (the slowness is judged
    from its heal), and a partition only on the flaky dir is judged from the fault."""
    h = H().register_all(0).layout(1)
    h.partition(1, 2, 3, [3, 1, 2], [3, 1, 2], [DIRS[3][2], DIRS[1][2], DIRS[2][2]])   # t1-2: elsewhere
    h.disk_fault(FAULT, 1, 0, mode="flaky", fault_id="f0")
    h.disk_fault(FAULT + 200, 2, 1, mode="delay", fault_id="f1")
    h.partition(FAULT + 228, 0, 2, [2, 3], reason="log_dir_offline")
    for fid in ("f0", "f1"):
        h.harness(FAULT + 10_000, "fault_healed", None, fault_id=fid)
    stall = lambda t: FAULT + 10_000 - t + 20 if FAULT <= t < FAULT + 10_000 else 20  # noqa: E731
    Ops(h, 0).run(0, 20000, stall)
    Ops(h, 1).run(0, 20000, stall)
    Ops(h, 2).run(0, 20000, 20)
    a = analyse_service(SC, h.build())
    by = {p.name: p for p in a.partitions}
    assert by["t1-0"].faults == ["f0", "f1"] and by["t1-1"].faults == ["f1"] and by["t1-2"].outside
    assert a.valid is True, a.summary
    assert by["t1-0"].recovery_ms == {"f0": 10000.0, "f1": 9800.0}
    # without the slow dir the same stall of t1-0 is a recovery 5 s too late
    h = H().register_all(0).layout(1)
    h.disk_fault(FAULT, 1, 0, mode="flaky", fault_id="f0")
    h.harness(FAULT + 10_000, "fault_healed", None, fault_id="f0")
    Ops(h, 0).run(0, 20000, stall)
    Ops(h, 1).run(0, 20000, 20)
    a = analyse_service(SC, h.build())
    assert a.valid is False and "only after 9900 ms" in a.summary   # latency ≤ 120 ms from +9.9 s on


def test_brokers_own_produce_time_per_window_from_their_request_metrics():
    """Each broker second (request_metrics, window 1 s) counts in the service window that
    holds it whole; the mean is weighted by requests, the p99 is the worst second; the
    controller's, other APIs' and malformed events are not figures."""
    h = healthy(base())

    def second(t_ms, node, count, mean, p99, role="broker", api="0"):
        h.node(t_ms, node, role, "request_metrics", listener="PLAINTEXT", window_ms=1000.0,
               apis={api: {"count": count, "total": {"mean": mean, "p50": mean, "p99": p99, "max": p99}}})

    second(2000, 1, 100, 4.0, 9.0)
    second(2000, 2, 300, 2.0, 5.0)
    second(3000, 1, 100, 4.0, 30.0)
    second(5500, 1, 50, 40.0, 200.0)       # straddles the fault at 5000: in no window
    second(7000, 2, 10, 80.0, 400.0)       # during
    second(7000, 3001, 500, 1.0, 1.0, role="controller")
    second(8000, 2, 999, 1.0, 1.0, api="1")  # Fetch: not Produce
    h.node(9000, 3, "broker", "request_metrics", listener="PLAINTEXT", window_ms=1000.0, apis={"0": {"count": "x"}})
    a = analyse_service(SC, h.build())
    before, during = a.brokers["before"], a.brokers["during"]
    assert before["requests"] == 500 and before["windows"] == 3
    assert before["mean_ms"] == pytest.approx((100 * 4 + 300 * 2 + 100 * 4) / 500) and before["p99_ms"] == 30.0
    assert during == {"requests": 10, "windows": 1, "mean_ms": 80.0, "p99_ms": 400.0}
    assert "after" not in a.brokers and a.details()["broker_produce"]["during"]["p99_ms"] == 400.0
    rows = {r["metric"]: r for r in compute_metrics(h.build(), SC) if r["metric"].startswith("broker_produce_")}
    assert rows["broker_produce_during_p99_ms"]["value"] == 400.0 and rows["broker_produce_before_mean_ms"]["topic"] is None
    assert set(rows) == {"broker_produce_before_mean_ms", "broker_produce_before_p99_ms",
                         "broker_produce_during_mean_ms", "broker_produce_during_p99_ms"}


def test_a_slow_follower_in_an_isr_holds_up_what_its_leader_leads():
    """Kafka's layout puts followers on every dir. Broker 2's slow d2 holds an in-sync follower
    of t1-2, led by broker 3; broker 3's acks=all answers for t1-2 wait for it until it leaves
    the ISR, and its answers for t1-3 on the same client connections wait behind them (in
    request order, Kafka's too). So t1-3, with no replica in the slow dir, is in the fault's
    domain and judged from the heal (stop 28: S10 on that layout, outside partitions at p50
    1.3 s for the whole slowness). Without the in-sync follower there, t1-3 is outside and the
    same stall is false."""
    def run(isr_of_2):
        h = H().register_all(0).layout(1)
        h.partition(1, 2, 3, isr_of_2, [3, 2, 1], [DIRS[3][0], DIRS[2][1], DIRS[1][0]])   # broker 2's copy on d2
        h.partition(1, 3, 3, [3, 1, 2], [3, 1, 2], [DIRS[3][1], DIRS[1][2], DIRS[2][2]])  # nothing on d2
        h.disk_fault(FAULT, 2, 1, mode="delay", fault_id="f0")
        h.harness(FAULT + 6000, "fault_healed", None, fault_id="f0")
        stall = lambda t: FAULT + 6000 - t + 20 if FAULT <= t < FAULT + 6000 else 20  # noqa: E731
        for p in range(4):
            Ops(h, p).run(0, 16000, stall if p in (1, 2, 3) else 20)
        return analyse_service(SC, h.build())
    a = run([3, 2, 1])
    by = {p.name: p for p in a.partitions}
    assert not by["t1-3"].outside and by["t1-3"].faults == ["f0"]
    assert a.valid is True, a.summary
    a = run([3, 1])                      # broker 2's copy out of the ISR: nothing waits for it
    by = {p.name: p for p in a.partitions}
    assert by["t1-3"].outside and a.valid is False


# ---------------------------------------------------------------- the peers' tail (S15's shape)
SLOW_FAULT = 23000     # 1 op/s per partition: 22 baseline ops after the warm-up
PEERS = range(2, 22)   # 20 partitions led by broker 2, every replica on each broker's d2 (outside)


def many(blip_after: float, slow_partition: int | None = None) -> H:
    """S15's shape in small: t1-0 in the failed dir (alone on its leader, 1 s without acks after
    the fault), 20 outside partitions of one leader at 1 op/s and 20 ms. The leader has an
    occasional slow second: before the fault half of its partitions saw one 150 ms produce (so
    the other half's own 22-op baselines never did), and ``blip_after`` ms after it every
    partition sees one. ``slow_partition``: every third of its produces takes 350 ms for 15 s
    after the fault (its p50 unchanged: only the tail can tell)."""
    h = H().register_all(0).layout(1)
    for p in PEERS:
        h.partition(1, p, 2, [2, 3, 1], [2, 3, 1], [DIRS[2][1], DIRS[3][1], DIRS[1][1]])
    h.disk_fault(SLOW_FAULT, 1, 0, fault_id="f0")
    end = SLOW_FAULT + 40000
    blip = SLOW_FAULT + blip_after
    Ops(h, 0).run(0, SLOW_FAULT, 20, step=1000).run(SLOW_FAULT, SLOW_FAULT + 1000, 30, step=1000, outcome="info") \
        .run(SLOW_FAULT + 1000, end, 20, step=1000)
    for p in PEERS:
        def lat(t, p=p):
            if slow_partition == p and SLOW_FAULT <= t < SLOW_FAULT + 15000 and int(t // 1000) % 3 == 0:
                return 350
            if (p < 12 and 10000 <= t < 11000) or blip <= t < blip + 1000:
                return 150
            return 20
        Ops(h, p).run(p * 10, end, lat, step=1000)
    return h


def test_one_slow_second_of_the_leader_is_not_a_lost_recovery():
    a = analyse_service(SC, many(blip_after=6000).build())
    assert a.valid is True, a.summary
    by = {p.partition: p for p in a.partitions}
    quiet, blipped = by[12], by[2]        # its own baseline never saw a slow second / did
    assert quiet.stats["before"]["n"] >= MIN_BASELINE_OPS and quiet.stats["before"]["p99_ms"] == 20.0
    assert quiet.peer_p99_ms == 150.0 and quiet.bound_p99_ms == 300.0 and quiet.recovery_ms["f0"] == 0.0
    assert blipped.stats["before"]["p99_ms"] > 100 and blipped.bound_p99_ms == 300.0
    assert by[0].peer_p99_ms is None       # 22 pooled ops: too few for a p99, its own is used


def test_with_its_own_baseline_alone_the_same_second_was_a_lost_recovery(monkeypatch):
    # what the check did before the peers' tail: 20 ms baselines, a bound of 120 ms, and the
    # 150 ms second kept every window of the next 10 s "not recovered"
    import harness.checkers.service as service
    monkeypatch.setattr(service, "_peer_baseline_p99", lambda *a: {})
    a = analyse_service(SC, many(blip_after=6000).build())
    assert a.valid is False and "t1-12 (outside): f0: rolling p99 back within 120 ms only after" in a.summary


def test_a_partition_slower_than_its_leaders_tail_still_fails():
    a = analyse_service(SC, many(blip_after=6000, slow_partition=12).build())
    assert a.valid is False
    p = {p.partition: p for p in a.partitions}[12]
    assert p.bound_p99_ms == 300.0 and p.recovery_ms["f0"] >= 13000
    assert p.worst_p50_ms <= p.bound_p50_ms and len(p.problems) == 1   # only the tail tells
    assert "t1-12 (outside): f0: rolling p99 back within 300 ms only after" in a.summary and all(q.valid is True for q in a.partitions if q.partition != 12)
