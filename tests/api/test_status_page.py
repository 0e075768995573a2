"""The status page in real headless Chromium (Playwright, the system browser) against real processes.

Pages load without console errors, a submitted job appears and advances live, training curves and eval
tables grow as their events arrive (a retry's recomputed steps replace the earlier ones), the cancel
button cancels a running job, and an unauthenticated visit is refused when tokens are required.
With ``REELRL_TEST_SCREENSHOTS`` set, each page is saved there (docs/status-*.png are made this way).
"""

import math
import os
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from services.api.tokens import Scope, create_token
from services.common.db.models import utcnow
from services.common.jobs import create_job, get_job, reap_stale_jobs, run_job
from tests.api.stack import free_port, running_stack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.e2e]

CHROMIUM = "/usr/bin/chromium"
PROBLEM_TYPES = ("multiple choice", "temporal grounding", "counting")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, video_dir):
    with running_stack(tmp_path_factory.mktemp("page"), video_dir) as stack:
        # The workers start beside the API; the second API (tokens required, same database) once the
        # first has created the schema (concurrent first migrations of one SQLite file collide).
        stack.start("jobs-worker", "worker", "preprocess-jobs", "-c", "2")
        stack.start("clip-worker", "worker", "preprocess", "-c", "1")
        stack.start_api()
        stack.locked_url = f"http://127.0.0.1:{free_port()}"
        stack.start_api("api-locked", stack.locked_url, REELRL_API_AUTH="required")
        yield stack


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing (scripts/test.sh installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


@contextmanager
def page_of(browser):
    """A page and the console errors and uncaught exceptions it produced."""
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page, errors
    finally:
        page.close()


def screenshot(page, name):
    folder = os.environ.get("REELRL_TEST_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def step_metrics(step):
    """Plausible curves for one step: rising accuracy per type, shrinking KL, per-phase times."""
    rise = 1 - math.exp(-step / 6)
    metrics = {"step": step, "reward/overall": 0.2 + 0.6 * rise, "reward/accuracy": 0.15 + 0.65 * rise}
    for i, ptype in enumerate(PROBLEM_TYPES):
        metrics[f"reward/accuracy/{ptype}"] = 0.1 + (0.8 - 0.2 * i) * rise + 0.03 * math.sin(step + i)
    metrics |= {
        "reward/format": 0.6 + 0.4 * rise,
        "response_length/mean": 180 - 60 * rise,
        "response_length/max": 400 - 100 * rise,
        "actor/kl_ref": 0.002 * step,
        "actor/entropy": 1.2 - 0.4 * rise,
        "timing/gen_s": 4.1 + 0.2 * math.sin(step),
        "timing/reward_s": 0.3,
        "timing/update_s": 2.2 + 0.1 * math.cos(step),
        "timing/weight_sync_s": 0.4,
        "perf/tokens_per_s": 950 + 30 * math.sin(step),
    }
    return metrics


def test_training_page_draws_curves_as_metrics_arrive(stack, browser):
    job_id = create_job("train", {"trainer": {"total_steps": 12}})
    with run_job(job_id) as ctx, page_of(browser) as (page, errors):
        for step in range(1, 9):
            ctx.event("metrics", step_metrics(step))
            ctx.progress(step, 12, f"step {step}")
        page.goto(f"{stack.url}/jobs/{job_id}")
        curve = 'polyline[data-series="reward/overall"]'
        page.wait_for_selector(f'{curve}[data-points="8"]')
        # Live: four more steps arrive over the event stream.
        for step in range(9, 13):
            ctx.event("metrics", step_metrics(step))
            ctx.progress(step, 12, f"step {step}")
        page.wait_for_selector(f'{curve}[data-points="12"]', timeout=20_000)
        assert len(page.get_attribute(curve, "points").split()) == 12
        accuracy = page.locator('polyline[data-series^="reward/accuracy/"]')
        assert accuracy.count() == len(PROBLEM_TYPES)
        titles = page.locator(".chart-panel h3").all_inner_texts()
        for title in (
            "Reward",
            "Accuracy by problem type",
            "Response length (tokens)",
            "KL",
            "Entropy (nats)",
        ):
            assert title in titles, titles
        assert "Step time by phase (s)" in titles
        timing = page.locator('.chart-panel:has(h3:text("Step time by phase")) polyline')
        assert timing.count() == 4
        page.wait_for_selector("#job-progress-text:text('12/12 step 12')")
        screenshot(page, "status-train.png")
    # The job ended (context exit): its page says so.
    with page_of(browser) as (page, errors2):
        page.goto(f"{stack.url}/jobs/{job_id}")
        assert page.inner_text("#job-state") == "succeeded"
        page.wait_for_selector(f'{curve}[data-points="12"]')
    assert errors == [] and errors2 == []


def test_eval_page_shows_per_benchmark_tables(stack, browser):
    job_id = create_job("eval", {"benchmarks": ["mvbench", "videomme", "charades_sta"]})
    summaries = [
        {"benchmark": "mvbench", "overall": 0.512, "samples": 4000,
         "by_task": {"action_sequence": 0.61, "object_shuffle": 0.38, "moving_direction": 0.47}},
        {"benchmark": "videomme", "overall": 0.583, "samples": 2700,
         "by_duration": {"short": {"accuracy": 0.69, "n": 900}, "medium": {"accuracy": 0.56, "n": 900},
                         "long": {"accuracy": 0.50, "n": 900}}},
    ]  # fmt: skip
    with run_job(job_id) as ctx, page_of(browser) as (page, errors):
        ctx.event("result", summaries[0])
        page.goto(f"{stack.url}/jobs/{job_id}")
        assert page.locator("#results-table tr[data-benchmark]").count() == 1
        ctx.event("result", summaries[1])
        ctx.event("result", {"benchmark": "charades_sta", "overall": 0.412, "samples": 3720,
                             "by_iou": {"R@0.3": 0.62, "R@0.5": 0.41, "R@0.7": 0.2}})  # fmt: skip
        page.wait_for_selector('#results-table tr[data-benchmark="charades_sta"]', timeout=20_000)
        rows = page.locator("#results-table tbody tr").all_inner_texts()
        assert [r.split("\t")[0] for r in rows] == ["mvbench", "videomme", "charades_sta"]
        assert "0.583" in rows[1] and "2,700" in rows[1]
        breakdowns = page.locator("details.breakdown summary").all_inner_texts()
        assert breakdowns == ["mvbench · by_task", "videomme · by_duration", "charades_sta · by_iou"]
        assert "0.69" in page.locator("details.breakdown").nth(1).inner_text()
        screenshot(page, "status-eval.png")
    assert errors == []


def test_submitted_job_appears_and_advances_live(stack, browser):
    with page_of(browser) as (page, errors), stack.http() as http:
        page.goto(f"{stack.url}/")
        body = {
            "kind": "preprocess",
            "config": {"dataset": "train.jsonl", "out": "out/live.jsonl", "video_params": {"fps": 1.0, "max_frames": 6}},
        }  # fmt: skip
        job_id = http.post("/v1/jobs", json=body).json()["id"]
        row = f'tr[data-job-id="{job_id}"]'
        # No reload: the row arrives over the event stream, then follows the job.
        page.wait_for_selector(row, timeout=20_000)
        page.wait_for_selector(f'{row}[data-state="running"]', timeout=60_000)
        page.wait_for_selector(f'{row}[data-state="succeeded"]', timeout=120_000)
        assert page.inner_text(f"{row} .count") == "3/3"
        assert page.get_attribute(f"{row} progress", "value") == "3"
        assert http.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded"
        screenshot(page, "status-jobs.png")
        page.goto(f"{stack.url}/jobs/{job_id}")
        assert page.inner_text("#job-state") == "succeeded"
        assert '"succeeded": 3' in page.inner_text("pre.json")
    assert errors == []


def test_cache_page(stack, browser):
    with page_of(browser) as (page, errors), stack.http() as http:
        stats = http.get("/v1/cache/stats").json()
        page.goto(f"{stack.url}/cache")
        assert page.inner_text('[data-stat="assets"]') == f"{stats['assets']:,}"
        for status, n in stats["clips_by_status"].items():
            assert page.inner_text(f'[data-stat="clips-{status}"]') == f"{n:,}"
        assert page.inner_text('[data-stat="hit-ratio"]') == f"{stats['hit_ratio'] * 100:.1f} %"
        screenshot(page, "status-cache.png")
    assert errors == []


def test_unauthenticated_visit_is_refused(stack, browser):
    url = stack.locked_url
    with page_of(browser) as (page, errors):
        response = page.goto(f"{url}/")
        assert response.status == 401
        assert page.locator("#jobs").count() == 0 and page.locator('input[name="token"]').count() == 1
        assert "token is required" in page.inner_text("#auth-error")
        assert page.goto(f"{url}/v1/jobs").status == 401
        # Signing in with a read token shows the jobs.
        page.goto(f"{url}/login")
        page.fill('input[name="token"]', create_token("viewer", [Scope.read]))
        page.click('button[type="submit"]')
        page.wait_for_selector("#jobs")
        assert page.locator("#jobs tbody tr").count() >= 1
        assert page.locator("button[data-cancel]").count() == 0  # reading only: nothing to cancel with
        errors.clear()  # the refused loads above logged their 401s
        page.goto(f"{url}/cache")
        wait_for(lambda: page.locator("#cache-stats").count() == 1, timeout=10, message="cache page")
    assert errors == []


def test_a_retry_replaces_the_steps_it_recomputes(stack, browser):
    job_id = create_job("train", {"trainer": {"total_steps": 6}}, max_retries=1)
    curve = 'polyline[data-series="reward/overall"]'
    with page_of(browser) as (page, errors):
        with run_job(job_id) as ctx:
            for step in range(1, 6):
                ctx.event("metrics", step_metrics(step))
            page.goto(f"{stack.url}/jobs/{job_id}")
            page.wait_for_selector(f'{curve}[data-points="5"]')
            reap_stale_jobs(now=utcnow() + timedelta(seconds=60))  # its worker is lost
        # The retry resumes from step 3's checkpoint: 4 and 5 are superseded, then recomputed.
        with run_job(job_id) as ctx:
            page.wait_for_selector("#job-attempts:text('2')", timeout=20_000)
            ctx.event("metrics_rewind", {"after_step": 3})
            page.wait_for_selector(f'{curve}[data-points="3"]', timeout=20_000)
            for step in range(4, 7):
                ctx.event("metrics", {**step_metrics(step), "reward/overall": 0.95})
            page.wait_for_selector(f'{curve}[data-points="6"]', timeout=20_000)
        # Reloaded, the page draws the same: each step once, the recomputed values.
        page.goto(f"{stack.url}/jobs/{job_id}")
        page.wait_for_selector(f'{curve}[data-points="6"]')
        assert "0.95" in page.inner_text('.chart-panel:has(h3:text("Reward")) ul.legend')
    assert errors == []


def test_cancel_button_cancels_a_running_job_live(stack, browser):
    """Signed in with a submit token (the cookie plus the page's CSRF header), on the API that requires tokens."""
    url = stack.locked_url
    token = create_token("operator", [Scope.read, Scope.submit])
    job_id = create_job("train", {"trainer": {"total_steps": 100}}, owner="operator")
    with page_of(browser) as (page, errors):
        page.goto(f"{url}/login?next=/jobs/{job_id}")
        page.fill('input[name="token"]', token)
        page.click('button[type="submit"]')
        page.wait_for_selector("#job-state")
        with run_job(job_id) as ctx:  # this test plays the worker: it stops when asked
            ctx.progress(1, 100, "step 1")
            page.wait_for_selector("#job-state:text('running')", timeout=20_000)
            # Asked first; "keep it" sends nothing.
            page.click("#cancel-job")
            page.wait_for_selector("#cancel-dialog[open]")
            page.click("#cancel-dialog button[value=keep]")
            page.wait_for_timeout(500)
            assert not get_job(job_id).cancel_requested
            page.click("#cancel-job")
            page.wait_for_selector("#cancel-dialog[open]")
            screenshot(page, "status-cancel.png")
            page.click("#cancel-confirm")
            page.wait_for_selector("#cancel-note:text('(cancel requested)')", timeout=20_000)
            assert page.locator("#cancel-job").is_hidden()
            # The worker learns of it from its next heartbeat.
            wait_for(ctx.cancel_requested, timeout=20, message="cancel reaches the worker")
        page.wait_for_selector("#job-state:text('cancelled')", timeout=20_000)
        assert page.inner_text("#job-reason") == "cancelled on request"
        assert get_job(job_id).state.value == "cancelled"
    assert errors == []


def test_jobs_list_cancels_a_queued_job_after_asking(stack, browser):
    with page_of(browser) as (page, errors):
        page.goto(f"{stack.url}/")
        job_id = create_job("eval", {"benchmarks": ["mvbench"]})  # queued: no eval worker runs here
        row = f'tr[data-job-id="{job_id}"]'
        page.wait_for_selector(f"{row} button[data-cancel]", timeout=20_000)  # arrived live
        page.click(f"{row} button[data-cancel]")
        page.keyboard.press("Escape")  # dismissed: nothing is sent
        page.wait_for_timeout(300)
        assert get_job(job_id).state.value == "queued"
        page.click(f"{row} button[data-cancel]")
        assert page.inner_text("#cancel-dialog-job") == job_id[:8]
        page.click("#cancel-confirm")
        page.wait_for_selector(f'{row}[data-state="cancelled"]', timeout=20_000)
        assert page.locator(f"{row} button[data-cancel]").is_hidden()
        assert get_job(job_id).reason == "cancelled before it started"
        # Reloaded, a finished job has no button.
        page.reload()
        assert page.locator(f"{row} button[data-cancel]").count() == 0
    assert errors == []


def test_job_page_fills_in_started_shows_tracebacks_as_text_and_bidi_visibly(stack, browser):
    job_id = create_job("preprocess", {"n": "trace"})
    with page_of(browser) as (page, errors):
        page.goto(f"{stack.url}/jobs/{job_id}")
        assert page.inner_text("#job-started") == "—"
        with pytest.raises(RuntimeError), run_job(job_id):
            # Left open, the page learns the start from the stream.
            page.wait_for_selector("#job-started:not(:text('—'))", timeout=20_000)
            raise RuntimeError("can't decode 'clip'\u202e evil\nsecond line")
        page.wait_for_selector("#job-state:text('failed')", timeout=20_000)
        assert get_job(job_id).started_at.strftime("%H:%M:%S") in page.inner_text("#job-started")
        # The reason with the override shown, not obeyed; the traceback as lines, quotes as written.
        assert "<U+202E>" in page.inner_text("#job-reason") and "\u202e" not in page.inner_text("#job-reason")
        live = page.inner_text("#events pre.traceback")
        assert "Traceback (most recent call last)" in live
        assert "\nRuntimeError: can't decode 'clip'<U+202E> evil\nsecond line" in live
        assert "\\u0027" not in live
        page.reload()  # server-rendered: the same
        rendered = page.inner_text("#events pre.traceback")
        assert "\nRuntimeError: can't decode 'clip'<U+202E> evil\nsecond line" in rendered
        assert "\\u0027" not in page.inner_text("#events")
        page.goto(f"{stack.url}/")
        row = f'tr[data-job-id="{job_id}"]'
        assert "<U+202E>" in page.inner_text(f"{row} td.message")
    assert errors == []
