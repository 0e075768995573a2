"""The ``reelrl`` console against hostile text and broken files: every command prints a job's,
token's or file's text literally (Rich markup such as ``[/x]`` never crashes it, bidi controls are
shown as code points), a malformed YAML config is exit 2 with file, line and reason, `status` fits
80 columns, `serve api` honours REELRL_API_HOST and says when it is open beyond loopback, `submit`
resends with its idempotency key, and a revoked token's name can be used again."""

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from services.api.tokens import Scope, create_token
from services.cli import app
from services.common.jobs import create_job, fail_job
from tests.api.stack import free_port, running_stack

HOSTILE = "[/x] [bold]b[/bold] \u202eevil"
SHOWN = "[/x] [bold]b[/bold] <U+202E>evil"  # literally, with the override made visible

runner = CliRunner()


def printed(result) -> str:
    return result.stdout + result.stderr


def no_crash(result, code: int | None = None):
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if code is not None:
        assert result.exit_code == code, printed(result)
    return printed(result)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, video_dir):
    with running_stack(tmp_path_factory.mktemp("cli"), video_dir) as stack:
        stack.start_api()
        yield stack


@pytest.fixture
def api_env(stack, monkeypatch):
    monkeypatch.setenv("REELRL_API_URL", stack.url)
    return stack


@pytest.mark.integration
def test_hostile_job_text_on_status_list_detail_and_follow(api_env, monkeypatch):
    from services.api import cli

    monkeypatch.setattr(cli.out, "width", 200)  # the whole message on one line
    job_id = create_job("preprocess", {"dataset": "d.jsonl", "out": "o.jsonl"})
    fail_job(job_id, f"reason {HOSTILE}")
    listing = no_crash(runner.invoke(app, ["status", "--limit", "5"]), 0)
    assert SHOWN in listing
    detail = no_crash(runner.invoke(app, ["status", job_id]), 1)
    assert f"reason: reason {SHOWN}" in detail
    follow = no_crash(runner.invoke(app, ["status", job_id, "--follow"]), 1)
    assert SHOWN in follow


@pytest.mark.integration
def test_hostile_text_in_a_refusal_of_submit(api_env, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("dataset: '[/x].jsonl'\nout: o.jsonl\n")
    refused = no_crash(runner.invoke(app, ["submit", "preprocess", str(config)]), 1)
    assert "[/x].jsonl" in refused and "config.dataset" in refused


@pytest.mark.integration
def test_status_at_80_columns_keeps_kind_and_state_whole(stack):
    job_id = create_job("preprocess", {"dataset": "d.jsonl", "out": "o.jsonl"})
    fail_job(job_id, "a long reason " * 8)
    env = {**stack.env, "REELRL_API_URL": stack.url, "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "status", "--limit", "3"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if job_id in line)
    assert "preprocess" in row and "failed" in row, done.stdout
    assert "…" not in row.split(job_id)[1][:25]


def test_hostile_token_names(reelrl_home):
    created = no_crash(runner.invoke(app, ["token", "create", "--scopes", "read", "--name", "e[/x]"]), 2)
    assert "'e[/x]'" in created
    revoked = no_crash(runner.invoke(app, ["token", "revoke", "[/x]"]), 1)
    assert "no active token named '[/x]'" in revoked
    bad_scope = no_crash(runner.invoke(app, ["token", "create", "--scopes", "[/x]"]), 2)
    assert "unknown scope(s) [/x]" in bad_scope


def test_a_revoked_tokens_name_can_be_used_again(reelrl_home):
    first = runner.invoke(app, ["token", "create", "--scopes", "read", "--name", "ci"])
    assert first.exit_code == 0, printed(first)
    assert runner.invoke(app, ["token", "revoke", "ci"]).exit_code == 0
    again = runner.invoke(app, ["token", "create", "--scopes", "read,submit", "--name", "ci"])
    assert again.exit_code == 0, printed(again)
    from services.api.tokens import authenticate

    assert authenticate(first.stdout.strip().splitlines()[-1]) is None  # the old one stays refused
    assert authenticate(again.stdout.strip().splitlines()[-1]).name == "ci"
    listed = runner.invoke(app, ["token", "list"]).stdout
    assert "ci#revoked-" in listed
    assert runner.invoke(app, ["token", "create", "--scopes", "read", "--name", "ci"]).exit_code == 2


def test_token_create_help_names_every_scope():
    shown = runner.invoke(app, ["token", "create", "--help"], env={"COLUMNS": "200"}).stdout
    for scope in Scope:
        assert scope.value in shown, scope


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("data:\n  train_files: [unclosed\n", 3, "malformed YAML"),
        ("- data\n- actor\n", 1, "the top level is a list"),
        ("a: 1\n  b: 2\n", 2, "malformed YAML"),
        ("rollout:\n  top_p: .inf\n", 2, "rollout.top_p: .inf is not a finite number"),
    ],
    ids=["unclosed", "list", "indent", "inf"],
)
@pytest.mark.parametrize(
    "command",
    [["train", "{f}"], ["submit", "train", "{f}"], ["eval", "run", "--config", "{f}", "--model", "m"]],
    ids=["train", "submit", "eval"],
)
def test_a_broken_yaml_config_is_exit_2_with_file_line_and_reason(
    reelrl_home, tmp_path, command, text, line, reason
):
    (tmp_path / "[").mkdir()
    config = tmp_path / "[" / "x]bad.yaml"  # the path reads as markup: [/x]bad.yaml
    config.write_text(text)
    result = runner.invoke(app, [part.format(f=config) for part in command])
    shown = no_crash(result, 2)
    flat = shown.replace("\n", "")
    assert f"{config}:{line}" in flat and reason in flat, shown
    assert "Traceback" not in shown


@pytest.mark.parametrize(
    "command",
    [
        ["train", "{f}", "actor.optim.lr=.inf"],
        ["submit", "train", "{f}", "actor.optim.lr=.nan"],
        ["eval", "run", "--config", "{f}", "--model", "m", "rollout.temperature=.inf"],
    ],
    ids=["train", "submit", "eval"],
)
def test_a_non_finite_override_is_exit_2_naming_the_key(reelrl_home, tmp_path, command):
    config = tmp_path / "c.yaml"
    config.write_text("trainer: {total_steps: 1}\n")
    shown = no_crash(runner.invoke(app, [part.format(f=config) for part in command]), 2)
    assert (
        "actor.optim.lr:" in shown or "rollout.temperature:" in shown
    ) and "is not a finite number" in shown


def test_submit_sends_an_idempotency_key_and_resends_it_after_a_timeout(tmp_path):
    from services.api.cli import submit_command
    from services.api.client import ApiClient

    config = tmp_path / "job.yaml"
    config.write_text("dataset: train.jsonl\nout: o.jsonl\n")
    bodies = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:  # created, but the answer never arrives in time
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(202, json={"id": "a" * 32, "state": "queued", "created": False})

    api = ApiClient("http://127.0.0.1:9", transport=httpx.MockTransport(answer))
    assert submit_command("preprocess", config, [], None, False, api=api) == 0
    keys = [b.get("idempotency_key") for b in bodies]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith("reelrl-submit-")


def test_a_resend_that_finds_the_job_failed_is_not_a_success(tmp_path, monkeypatch):
    """A broker outage answers 503 and fails the job it recorded; the resend with the same key names
    that failed job (202, created false). Exit 1 with its reason (before: exit 0, "job … failed")."""
    from services.api.cli import submit_command
    from services.api.client import ApiClient

    monkeypatch.setattr("time.sleep", lambda s: None)
    config = tmp_path / "job.yaml"
    config.write_text("dataset: train.jsonl\nout: o.jsonl\n")
    job_id, reason = "b" * 32, "could not enqueue on the broker: Connection refused"
    answers = iter([
        httpx.Response(503, json={"detail": f"job {job_id}: {reason}"}),
        httpx.Response(202, json={"id": job_id, "state": "failed", "created": False}),
    ])  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"id": job_id, "state": "failed", "reason": reason})
        return next(answers)

    api = ApiClient("http://127.0.0.1:9", transport=httpx.MockTransport(answer))
    assert submit_command("preprocess", config, [], None, False, api=api) == 1


@pytest.mark.integration
def test_serve_api_honours_reelrl_api_host_and_says_when_open_is_not_loopback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELRL_") or k.startswith("REELRL_TEST_")}
    env["REELRL_HOME"] = str(tmp_path / "home")

    def serve(**extra):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "serve", "api"],
            env={**env, "REELRL_API_PORT": str(port), **extra}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        return proc, port

    proc, port = serve(REELRL_API_HOST="127.0.0.2")
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.2:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, (
                    "the API did not start on 127.0.0.2"
                )
                time.sleep(0.3)
    finally:
        proc.terminate()
        banner = proc.communicate(timeout=30)[0]
    assert "on http://127.0.0.2:" in banner and "loopback only" in banner
    proc, _ = serve(REELRL_API_HOST="0.0.0.0", REELRL_API_AUTH="open")
    try:
        first = proc.stdout.readline() + proc.stdout.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert "NOT loopback-only" in first and "loopback only)" not in first, first


@pytest.mark.parametrize(
    "command",
    [
        ["train", "{f}"],
        ["eval", "run", "--config", "{f}", "--model", "m"],
        ["eval", "score", "--benchmark", "mvbench", "--annotations", "{d}", "--predictions", "{f}"],
        ["eval", "samples", "--benchmark", "mvbench", "--annotations", "{d}"],
    ],
    ids=["train", "eval-run", "eval-score", "eval-samples"],
)
def test_hostile_file_names_in_train_and_eval_errors(reelrl_home, tmp_path, command):
    """The file a config or annotation error names is printed literally, its bidi override visible."""
    folder = tmp_path / HOSTILE  # "/" in the text makes folders: [ / x] [bold]b[ / bold] ‮evil
    folder.mkdir(parents=True)
    config = folder / "c.yaml"
    config.write_text("a: [unclosed\n")
    result = runner.invoke(app, [part.format(f=config, d=folder) for part in command])
    shown = no_crash(result, 2)
    assert SHOWN in shown.replace("\n", ""), shown
    assert "\u202e" not in shown


@pytest.mark.parametrize(
    "command",
    [
        ["train", "{f}", "actor.model_path=m", "data.train_files=[t.jsonl]"],
        ["eval", "run", "--config", "{f}", "--model", "m", "--benchmarks", "mvbench", "--data-root", "d"],
    ],
    ids=["train", "eval"],
)
def test_a_number_yaml_reads_as_a_string_is_still_refused_when_not_finite(reelrl_home, tmp_path, command):
    """YAML reads 1e400 (no dot) as the string "1e400", which pydantic turns into infinity."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "actor: {optim: {lr: 1e400}}\n" if command[0] == "train" else "preprocess_timeout_s: 1e400\n"
    )
    shown = no_crash(runner.invoke(app, [part.format(f=config) for part in command]), 2)
    assert "finite number" in shown and ("actor.optim.lr" in shown or "timeout_s" in shown), shown


@pytest.mark.integration
def test_a_job_result_shows_bidi_controls_visibly_and_json_escapes_them(api_env, monkeypatch):
    """`status ID` printed a result's U+202E raw; `--json` keeps the text, escaped."""
    from services.common.db import session_scope
    from services.common.db.models import Job

    job_id = create_job("preprocess", {"dataset": "d.jsonl", "out": "o.jsonl"})
    fail_job(job_id, "done")
    with session_scope() as session:
        session.get(Job, job_id).result = {"note": HOSTILE, HOSTILE: 1}
    detail = no_crash(runner.invoke(app, ["status", job_id]), 1)
    assert "\u202e" not in detail and "<U+202E>evil" in detail
    as_json = no_crash(runner.invoke(app, ["status", job_id, "--json"]), 1)
    assert "\u202e" not in as_json and json.loads(as_json)["result"]["note"] == HOSTILE


@pytest.mark.integration
def test_following_with_a_submit_only_token_says_what_it_needs(stack, monkeypatch):
    """`submit --follow` with a token that may submit but not read crashed on ApiError: HTTP 403."""
    url = f"http://127.0.0.1:{free_port()}"
    stack.start_api(name="locked", url=url, REELRL_API_AUTH="required")
    token = create_token("submit-only", [Scope.submit])
    monkeypatch.setenv("REELRL_API_URL", url)
    monkeypatch.setenv("REELRL_API_TOKEN", token)
    config = stack.root / "follow.yaml"
    config.write_text("dataset: train.jsonl\nout: follow.jsonl\n")
    shown = no_crash(runner.invoke(app, ["submit", "preprocess", str(config), "--follow"]), 1)
    assert "Traceback" not in shown and "following needs a token with the read scope" in " ".join(
        shown.split()
    )
    assert "reelrl status" in shown


_UNSENDABLE = [
    (["video_params=["], "overrides ['video_params=[']: while parsing a flow node"),
    (["=1"], "override '=1' names no key"),
    (["a..b=1"], "override 'a..b=1' names no key"),
    (["fps=\udcff"], "is not UTF-8 text"),
]


@pytest.mark.parametrize(
    ("command", "args", "reason"),
    [("submit", *case) for case in _UNSENDABLE]
    + [("train", *case) for case in _UNSENDABLE]
    + [("submit", ["--key", "k\udcff"], "--key 'k\\udcff' is not UTF-8 text")],
)
def test_overrides_and_keys_that_cannot_be_sent_are_exit_2(reelrl_home, tmp_path, command, args, reason):
    """Each gave a traceback and exit 1, or a round trip to the API for a 422."""
    config = tmp_path / "c.yaml"
    config.write_text("trainer: {total_steps: 1}\n" if command == "train" else "dataset: d.jsonl\n")
    argv = (
        ["submit", "preprocess", str(config), *args] if command == "submit" else ["train", str(config), *args]
    )
    shown = no_crash(runner.invoke(app, argv), 2)
    assert reason in " ".join(shown.split()) and "Traceback" not in shown, shown
