"""The Rollouts view in real headless Chromium against the API in its own process: from the train job's
page to its rollouts, pick a step, and see each group's frames as thumbnails (their pixels are the stored
frames' colours), the responses coloured by reward, and model text shown as text, never run as HTML.
With ``REELRL_TEST_SCREENSHOTS`` set, the view is saved there as status-rollouts.png."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

from services.common.frames.store import FrameStore
from services.common.jobs import create_job
from tests.api.rollout_log import IMAGE_KEY, XSS, left_colour, right_colour, write_run
from tests.api.stack import running_stack
from tests.api.test_status_page import browser, page_of, screenshot  # noqa: F401 (browser: a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.e2e]

ALL_LOADED = """() => {
  const imgs = [...document.querySelectorAll('.rollout-group img')];
  return imgs.length > 0 && imgs.every((img) => img.complete && img.naturalWidth > 0);
}"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory, video_dir):
    with running_stack(tmp_path_factory.mktemp("rollouts"), video_dir) as stack:
        stack.start_api()
        yield stack


@pytest.fixture(scope="module")
def chromium(request):
    """The status page tests' headless Chromium (their ``browser`` fixture)."""
    return request.getfixturevalue("browser")


def rgb(css: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def near(pixel, colour, tolerance=30):
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, colour, strict=True))


def test_rollouts_view_shows_frames_and_responses_of_the_picked_step(stack, chromium):
    run = stack.data / "runs" / "page"
    write_run(run, FrameStore.from_settings())  # the API's store: this process shares its settings
    job_id = create_job("train", {"trainer": {"output_dir": str(run)}})
    with page_of(chromium) as (page, errors):
        page.goto(f"{stack.url}/jobs/{job_id}")
        page.click("#rollouts-link")
        page.wait_for_selector("#rollout-status:text('step 6: 2 groups')")  # the newest step first
        assert page.locator("#rollout-step option").all_inner_texts() == ["6", "3"]

        # Model and dataset text is text: the XSS response and the answer's markup are shown, not parsed.
        xss = page.locator('.rollout-group[data-group="0"] tr.response[data-index="1"]')
        assert xss.locator("pre.response-text").inner_text() == XSS
        assert "offline" in xss.inner_text()
        assert (
            page.locator("#rollout-groups script, #rollout-groups b, #rollout-groups img[src='x']").count()
            == 0
        )
        assert page.evaluate("window.__xss") is None
        answer = page.locator('.rollout-group[data-group="0"] dd.answer')
        assert answer.inner_text() == '{"choice":"A","note":"<i>json</i>"}'
        assert page.locator("#rollout-groups i").count() == 0
        parts = page.locator('.rollout-group[data-group="0"] tr.response[data-index="0"] td.parts')
        assert parts.inner_text() == "builtin 1 · brevity 0.4"
        still = page.locator(f'.rollout-group[data-group="1"] .clip[data-key="{IMAGE_KEY}"]')
        assert still.inner_text() == f"{IMAGE_KEY[:12]}…: no stored frames"
        page.wait_for_function(ALL_LOADED)
        screenshot(page, "status-rollouts.png")

        # Pick step 3: its one group and the four frames of its clip.
        page.select_option("#rollout-step", "3")
        page.wait_for_selector("#rollout-status:text('step 3: 1 group')")
        assert page.url.endswith(f"/jobs/{job_id}/rollouts?step=3")
        page.wait_for_function(ALL_LOADED)
        images = page.locator(".rollout-group img")
        assert images.count() == 4
        widths = page.eval_on_selector_all(".rollout-group img", "imgs => imgs.map((i) => i.naturalWidth)")
        assert widths == [160] * 4  # drawn by the server at 160 px, not the stored 200
        for index in range(4):
            shot = Image.open(io.BytesIO(images.nth(index).screenshot())).convert("RGB")
            w, h = shot.size
            left, right = shot.getpixel((w // 4, h // 2)), shot.getpixel((3 * w // 4, h // 2))
            # not blank and not uniform: frame i's two colours, each where the store has it
            assert near(left, left_colour(index)), (index, left)
            assert near(right, right_colour(index)), (index, right)
        assert page.locator("figcaption").all_inner_texts() == ["0 s", "0.5 s", "1 s", "1.5 s"]

        # Rows coloured by overall reward: 1.0 green, 0.0 red.
        rows = page.eval_on_selector_all(
            ".rollout-group tr.response",
            "rows => rows.map((r) => [r.dataset.overall, getComputedStyle(r).backgroundColor])",
        )
        (best, good), (worst, bad) = ((o, rgb(c)) for o, c in rows)
        assert (best, worst) == ("1", "0")
        assert good[1] > good[0] + 30 and bad[0] > bad[1] + 30, (good, bad)
        assert page.locator(".rollout-group td.advantage").all_inner_texts() == ["0.87", "-0.87"]

        # Reloaded with ?step=3, the same step is shown.
        page.reload()
        page.wait_for_selector("#rollout-status:text('step 3: 1 group')")
        assert page.input_value("#rollout-step") == "3"
    assert errors == []


def test_rollouts_view_of_a_run_without_a_log_says_how_to_get_one(stack, chromium):
    job_id = create_job("train", {"trainer": {"output_dir": str(stack.data / "runs" / "quiet")}})
    with page_of(chromium) as (page, errors):
        page.goto(f"{stack.url}/jobs/{job_id}/rollouts")
        page.wait_for_selector("#rollouts-empty:visible")
        assert "trainer.rollout_log" in page.inner_text("#rollouts-empty")
        assert page.locator("#rollout-step").is_disabled()
    assert errors == []
