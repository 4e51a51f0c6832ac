def test_r01_enqueue_creates_a_queued_job(queue, clock):
    res = queue.enqueue("email", {"to": "a"}, delay=5)
    assert res.created
    snap = queue.get(res.id)
    assert snap.state == "queued" and snap.attempts == 0
    assert snap.visible_at.timestamp() == clock.now + 5
