"""The dashboard in a real browser (headless chromium), against a real database on both
backends, through a real `queuecore dashboard` process: the counts of a known set of
jobs, the actions acting on the database, escaping, CSRF, read-only.

Each test makes screenshots of the pages it visits; with QUEUECORE_DASHBOARD_SCREENSHOTS
set to a folder, the SQLite run writes them there (that is how docs/dashboard/ is made).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from queuecore.sql.schema import jobs
from tests.dashboard.browser import dashboard, mounted, post, start_chromium

# One chromium for the module: its tests run on one process of a parallel run.
pytestmark = pytest.mark.xdist_group("chromium")

HOSTILE = "<script>window.__queuecore_pwned = 1</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = start_chromium()
    yield driver
    driver.quit()


@pytest.fixture
def shots(backend: str, tmp_path: Path) -> Path:
    wanted = os.environ.get("QUEUECORE_DASHBOARD_SCREENSHOTS")
    if wanted and backend == "sqlite":
        Path(wanted).mkdir(parents=True, exist_ok=True)
        return Path(wanted)
    return tmp_path


@pytest.fixture
def known_jobs(make_queue: Any) -> dict[str, Any]:
    """A known set, on the real clock (the dashboard's): in queue `mail`, 3 ready jobs,
    1 delayed, 1 running, 2 done, 2 dead (one with a traceback); in queue `reports`, 1
    ready job whose payload is hostile HTML, with a dedupe key."""
    queue = make_queue(clock=None, max_attempts=1)
    ready = [
        queue.enqueue("email", {"to": f"user{i}@example.com"}, queue="mail").id for i in range(8)
    ]
    delayed = queue.enqueue("email", {"to": "later@example.com"}, queue="mail", delay=3600).id
    hostile = queue.enqueue("render", {"html": HOSTILE}, queue="reports", dedupe_key="r-1").id
    claimed = queue.claim("browser-test", limit=5, queues=["mail"])
    assert [job.id for job in claimed] == ready[:5]
    queue.complete(claimed[0], result={"receipt": "<b>m-1</b>"})
    queue.complete(claimed[1])
    trace = 'ValueError: no such mailbox\n  File "mail.py", line 12, in send\n    raise ValueError'
    queue.fail(claimed[2], trace)
    queue.fail(claimed[3], "TimeoutError: smtp", permanent=True)
    return {
        "queue": queue,
        "running": claimed[4].id,
        "done": [claimed[0].id, claimed[1].id],
        "dead": [claimed[2].id, claimed[3].id],
        "ready": ready[5:],
        "delayed": delayed,
        "hostile": hostile,
    }


def cells(browser: Any, queue_name: str) -> dict[str, str]:
    """A queue's row, read in one script: the page's live refresh replaces the table
    every few seconds, and a row found first and read cell by cell could be gone by
    the second read (StaleElementReferenceException, seen on a loaded machine)."""
    found: dict[str, str] | None = browser.execute_script(
        """const row = document.querySelector(`tr[data-queue="${arguments[0]}"]`);
        if (!row) return null;
        const cells = {};
        for (const cell of row.querySelectorAll("[data-field]")) {
            cells[cell.dataset.field] = cell.innerText.trim();
        }
        return cells;""",
        queue_name,
    )
    assert found is not None, f"no row for queue {queue_name!r}"
    return found


def listed_ids(browser: Any) -> list[int]:
    """The listed jobs' ids, read in one script (a live refresh cannot come between)."""
    ids: list[str] = browser.execute_script(
        """return Array.from(
            document.querySelectorAll("#job-list tbody tr[data-job]"), row => row.dataset.job
        );"""
    )
    return [int(job_id) for job_id in ids]


def state_of(db: sa.Engine, job_id: int) -> tuple[str, int, float]:
    with db.connect() as conn:
        row = conn.execute(
            sa.select(jobs.c.state, jobs.c.attempts, jobs.c.visible_at).where(jobs.c.id == job_id)
        ).one()
    return row.state, row.attempts, row.visible_at


def navigate(browser: Any, act: Any) -> None:
    """Do what leaves the page (a click, a script), then wait until the next one loaded:
    a click returns before the browser has replaced the page."""
    old = browser.find_element(By.TAG_NAME, "html")
    act()
    wait = WebDriverWait(browser, 20)
    wait.until(lambda _: left_the_document(old))
    wait.until(lambda b: b.execute_script("return document.readyState") == "complete")


def detached(exc: WebDriverException) -> bool:
    """Whether the error says the element is no longer in the page: chromium says so as
    StaleElementReferenceException, or, right after a navigation, as "Node with given id
    does not belong to the document"."""
    return isinstance(exc, StaleElementReferenceException) or (
        "does not belong to the document" in str(exc)
    )


def left_the_document(element: Any) -> bool:
    """selenium's `staleness_of`, knowing both ways chromium says it."""
    try:
        element.is_enabled()
    except WebDriverException as exc:
        if detached(exc):
            return True
        raise
    return False


def click(browser: Any, element_id: str) -> None:
    navigate(browser, lambda: click_when_attached(browser, element_id))


def click_when_attached(browser: Any, element_id: str) -> None:
    """Click the element, found again if chromium replaced the document between finding
    and clicking it (seen right after a navigation)."""
    for _ in range(20):
        try:
            browser.find_element(By.ID, element_id).click()
            return
        except WebDriverException as exc:
            if not detached(exc):
                raise
            last = exc
        time.sleep(0.05)
    raise last


def confirm(browser: Any, expected_question: str) -> None:
    """The confirmation page says what is about to change; confirming does it."""
    question = browser.find_element(By.ID, "question").text
    assert re.search(expected_question, question), question
    click(browser, "confirm")


def test_pages_show_a_known_set_of_jobs(browser, dsn, known_jobs, tmp_path, shots):
    with dashboard(dsn, tmp_path / "dashboard.log") as base:
        browser.get(base + "/")
        assert cells(browser, "mail") == {
            "queued": "4",
            "ready": "3",
            "running": "1",
            "held_ahead": "1",  # claimed, its handler not started (W9)
            "oldest": cells(browser, "mail")["oldest"],
            "dead": "2",
            "cancelled": "0",
            "done_last_hour": "2",
            "dead_last_hour": "2",
        }
        assert cells(browser, "reports")["queued"] == "1"
        assert cells(browser, "(all)")["queued"] == "5"
        assert re.fullmatch(r"\d+\.\d s", cells(browser, "mail")["oldest"])
        bars = browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.done")
        assert len(bars) == 60 and float(bars[-1].get_attribute("height")) > 0
        browser.save_screenshot(str(shots / "queues.png"))

        browser.get(base + "/jobs")  # live jobs, newest first
        live = [*known_jobs["ready"], known_jobs["delayed"], known_jobs["hostile"]]
        assert listed_ids(browser) == sorted([*live, known_jobs["running"]], reverse=True)
        browser.save_screenshot(str(shots / "jobs.png"))
        browser.get(base + "/jobs?state=queued&queue=mail")
        assert listed_ids(browser) == sorted([*known_jobs["ready"], known_jobs["delayed"]])[::-1]
        browser.get(base + "/jobs?state=done")
        assert listed_ids(browser) == sorted(known_jobs["done"], reverse=True)
        browser.get(base + "/jobs?state=live&kind=render")
        assert listed_ids(browser) == [known_jobs["hostile"]]

        browser.get(base + "/jobs?dedupe_key=r-1")  # a lookup lands on the job's page
        assert browser.current_url == f"{base}/jobs/{known_jobs['hostile']}"
        payload = browser.find_element(By.ID, "payload")
        assert HOSTILE in payload.text  # shown as text...
        assert not payload.find_elements(By.CSS_SELECTOR, "script, img")  # ...not as markup
        assert browser.execute_script("return window.__queuecore_pwned") is None

        browser.get(f"{base}/jobs/{known_jobs['done'][0]}")  # a result, escaped too
        result = browser.find_element(By.ID, "result")
        assert '"receipt": "<b>m-1</b>"' in result.text and not result.find_elements(
            By.TAG_NAME, "b"
        )

        browser.get(f"{base}/jobs/{known_jobs['dead'][0]}")
        facts = {
            cell.get_attribute("data-fact"): cell.text
            for cell in browser.find_elements(By.CSS_SELECTOR, "[data-fact]")
        }
        assert facts["state"] == "dead" and facts["attempts"] == "1 of 1"
        assert facts["queue"] == "mail" and facts["kind"] == "email"
        error = browser.find_element(By.ID, "last-error").text
        assert error.startswith("ValueError: no such mailbox") and 'File "mail.py"' in error
        assert browser.find_element(By.ID, "action-requeue")
        browser.save_screenshot(str(shots / "job.png"))

        browser.get(f"{base}/jobs/{known_jobs['running']}")
        started = browser.find_element(By.CSS_SELECTOR, '[data-fact="started"]').text
        assert started == "not yet: held ahead of a free slot", started

        browser.get(base + "/dead")
        assert listed_ids(browser) == sorted(known_jobs["dead"], reverse=True)
        browser.save_screenshot(str(shots / "dead.png"))


def test_requeue_retry_now_and_purge_act_on_the_database(
    browser, dsn, db, known_jobs, tmp_path, shots
):
    first_dead, second_dead = known_jobs["dead"]
    with dashboard(dsn, tmp_path / "dashboard.log") as base:
        browser.get(base + "/dead")
        browser.find_element(By.CSS_SELECTOR, f'input[name="ids"][value="{first_dead}"]').click()
        click(browser, "requeue-selected")
        browser.save_screenshot(str(shots / "confirm.png"))
        assert state_of(db, first_dead)[0] == "dead"  # asking changed nothing
        confirm(browser, rf"Requeue 1 dead job\(s\) \({first_dead}\)")
        assert browser.find_element(By.ID, "flash").text == "requeued 1 dead job(s)"
        assert state_of(db, first_dead)[:2] == ("queued", 0)
        assert state_of(db, second_dead)[0] == "dead"
        assert listed_ids(browser) == [second_dead]  # back on the dead letters

        browser.get(f"{base}/jobs/{known_jobs['delayed']}")
        click(browser, "action-retry")
        confirm(browser, rf"Make queued job {known_jobs['delayed']} ready now")
        state, _, visible_at = state_of(db, known_jobs["delayed"])
        assert state == "queued" and visible_at <= known_jobs["queue"].now()

        cancelled = known_jobs["ready"][0]
        browser.get(f"{base}/jobs/{cancelled}")
        click(browser, "action-cancel")
        confirm(browser, rf"Cancel job {cancelled}\?")
        assert browser.find_element(By.ID, "flash").text == f"job {cancelled} is cancelled"
        assert state_of(db, cancelled)[0] == "cancelled"
        assert not browser.find_elements(By.ID, "action-cancel")  # nothing left to cancel

        browser.get(base + "/dead")
        browser.find_element(By.CSS_SELECTOR, '#purge-form input[name="older_than"]').clear()
        browser.find_element(By.CSS_SELECTOR, '#purge-form input[name="older_than"]').send_keys("0")
        click(browser, "purge")
        confirm(browser, r"Delete every done job that finished more than 0 s ago")
        assert browser.find_element(By.ID, "flash").text == "purged 2 finished job(s)"
    with db.connect() as conn:
        states = dict(
            conn.execute(sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)).all()
        )
    # 5 queued, plus the requeued one, less the cancelled one.
    assert states == {"queued": 5, "running": 1, "dead": 1, "cancelled": 1}


def test_a_post_without_the_csrf_token_is_refused(browser, dsn, db, known_jobs, tmp_path):
    with dashboard(dsn, tmp_path / "dashboard.log") as base:
        # Another site's form (no session, no token), even with `confirmed` set.
        assert post(base + "/actions/requeue", {"all": "1", "confirmed": "1"}) == 403
        # This browser's own session, with the token taken out of the form.
        browser.get(base + "/dead")
        browser.execute_script(
            "document.querySelectorAll('input[name=csrf_token]').forEach(e => e.remove())"
        )
        click(browser, "requeue-all")
        assert "CSRF token is missing" in browser.find_element(By.ID, "problem").text
        # A wrong token, through the confirmation step.
        browser.get(base + "/dead")
        click(browser, "requeue-all")
        browser.execute_script("document.querySelector('input[name=csrf_token]').value = 'forged'")
        click(browser, "confirm")
        assert "CSRF token is missing" in browser.find_element(By.ID, "problem").text
    assert [state_of(db, i)[0] for i in known_jobs["dead"]] == ["dead", "dead"]


def test_read_only_hides_and_refuses_actions(browser, dsn, db, known_jobs, tmp_path, shots):
    with dashboard(dsn, tmp_path / "dashboard.log", "--read-only") as base:
        for page in (f"/jobs/{known_jobs['dead'][0]}", f"/jobs/{known_jobs['delayed']}", "/dead"):
            browser.get(base + page)
            assert browser.find_element(By.ID, "read-only").text == "read-only"
            assert not browser.find_elements(By.CSS_SELECTOR, "form[method=post], button")
        browser.save_screenshot(str(shots / "read-only.png"))
        # A form made by hand, in the browser's session: refused all the same.
        script = """const f = document.createElement('form'); f.method = 'post';
            f.action = '/actions/requeue';
            for (const [k, v] of [['all', '1'], ['confirmed', '1']]) {
              const i = document.createElement('input'); i.name = k; i.value = v;
              f.appendChild(i);
            }
            document.body.appendChild(f); f.submit();"""
        navigate(browser, lambda: browser.execute_script(script))
        assert browser.find_element(By.ID, "problem").text == "this dashboard is read-only"
        assert post(base + "/actions/purge", {"states": "done", "older_than": "0"}) == 403
    assert [state_of(db, i)[0] for i in known_jobs["dead"]] == ["dead", "dead"]
    assert [state_of(db, i)[0] for i in known_jobs["done"]] == ["done", "done"]


def test_mounted_under_a_prefix_with_workers_and_attempt_history(
    browser, dsn, db, known_jobs, tmp_path, shots
):
    """The dashboard in a FastAPI application under `/queue` (`create_app`): every link,
    form and redirect stays under the prefix, CSRF still guards actions, and the new
    pages (Workers, a job's failed attempts) escape what they show."""
    queue = known_jobs["queue"]
    record = {"host": "web-1", "pid": 42, "queues": ["mail"], "kinds": ["email"]}
    queue.report_worker(
        "mail-1", {**record, "concurrency": 4, "heartbeat_seconds": 600, "running": 0}
    )
    dead = known_jobs["dead"][0]
    [hostile] = queue.claim("browser-test", queues=["reports"])
    queue.fail(hostile, HOSTILE)
    with mounted(dsn, tmp_path / "app.log") as base:
        browser.get(base + "/queue/")
        assert cells(browser, "mail")["queued"] == "4"
        links = [a.get_attribute("href") for a in browser.find_elements(By.TAG_NAME, "a")]
        assert links and all(link.startswith(f"{base}/queue/") for link in links), links

        browser.get(base + "/queue/workers")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-worker="mail-1"]')
        assert [cell.text for cell in row.find_elements(By.TAG_NAME, "td")][:7] == [
            "mail-1",
            "alive",
            "web-1",
            "42",
            "mail",
            "email",
            "0 / 4",
        ]
        browser.save_screenshot(str(shots / "workers.png"))

        browser.get(f"{base}/queue/jobs/{dead}")
        [attempt] = browser.find_elements(By.CSS_SELECTOR, "#attempts tbody tr")
        assert attempt.get_attribute("data-attempt") == "1"
        assert "ValueError: no such mailbox" in attempt.text
        browser.save_screenshot(str(shots / "job-history.png"))
        browser.get(f"{base}/queue/jobs/{hostile.id}")
        history = browser.find_element(By.ID, "attempts")
        assert HOSTILE in history.text and not history.find_elements(By.CSS_SELECTOR, "script, img")
        assert browser.execute_script("return window.__queuecore_pwned") is None

        cancelled = known_jobs["ready"][0]
        browser.get(f"{base}/queue/jobs/{cancelled}")
        click(browser, "action-cancel")
        confirm(browser, rf"Cancel job {cancelled}\?")
        assert browser.current_url == f"{base}/queue/jobs/{cancelled}"
        assert browser.find_element(By.ID, "flash").text == f"job {cancelled} is cancelled"
        assert post(base + "/queue/actions/requeue", {"all": "1", "confirmed": "1"}) == 403
    assert state_of(db, cancelled)[0] == "cancelled"
    assert state_of(db, dead)[0] == "dead"
