"""The sources' rate limit counts emitted records only (idle calls while waiting are not records)."""

from fstate.runtime.api import sources


def test_rate_limit_counts_only_emitted_records(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(sources.time, "monotonic", lambda: now[0])
    limit = sources._RateLimit(150)
    emitted = 0
    for _ in range(100_000):  # 10 s of simulated time in steps of 0.1 ms, asking at every step
        now[0] += 0.0001
        if not limit.wait():
            emitted += 1
    assert 1499 <= emitted <= 1501  # 150/s over 10 s; before the fix the idle calls starved the source


def test_no_rate_never_waits():
    limit = sources._RateLimit(None)
    assert not any(limit.wait() for _ in range(1000))
