"""The web console in a real headless Chromium (Playwright's sync API), against a real
``autogpt serve`` (tests/serverkit.py): a task created, watched, approved, finished and
its artifact downloaded from the page; a plugin enabled and configured from the page, in
the config file on disk. Then the plugins endpoints the page uses, over plain HTTP.

The browser is the system's Chromium (Debian's ``chromium`` package), never one that
Playwright downloads: without it the test fails, saying how to install it
(tests/systemparts.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect, sync_playwright

from autogpt_core._config import load_config

from .serverkit import TOKENS, WRITE_AND_FINISH, recording, running
from .systemparts import missing

PLUGINS = "/ap/v1/plugins"

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Milliseconds any one thing the page should do may take.
TIMEOUT = 30_000


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        missing(
            "chromium",
            "this test drives the system's Chromium, and there is no 'chromium' on PATH: "
            "install it (Debian/Ubuntu: apt-get install -y chromium); "
            "'playwright install' is not needed",
        )
    return found


@pytest.fixture
def browser_context(tmp_path: Path) -> Iterator[Any]:
    """A fresh Chromium profile (its own user data directory), downloads allowed."""
    executable = chromium()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
            accept_downloads=True,
        )
        context.set_default_timeout(TIMEOUT)
        try:
            yield context
        finally:
            context.close()


@pytest.mark.slow
def test_the_console_runs_a_task_and_configures_a_plugin(
    tmp_path: Path, browser_context: Any
) -> None:
    expect.set_options(timeout=TIMEOUT)
    replay = recording(tmp_path / "recording.json", *WRITE_AND_FINISH)
    home = tmp_path / "home"
    home.mkdir()
    # fs.write is not granted: the task's write_file waits for consent.
    with running(home, replay, grant=["fs.read"]) as server:
        page = browser_context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on(
            "console",
            lambda message: (
                problems.append(f"console {message.type}: {message.text}")
                if message.type == "error" and not message.text.startswith("Failed to load")
                else None
            ),
        )
        # Every request the page makes succeeds (a browser asks for /favicon.ico of itself).
        page.on(
            "response",
            lambda response: (
                problems.append(f"{response.status} {response.request.method} {response.url}")
                if response.status >= 400 and not response.url.endswith("/favicon.ico")
                else None
            ),
        )
        page.goto(server.url + "/")
        expect(page.locator("#status")).to_contain_text("token")
        token = page.locator("#token")
        token.fill(TOKENS["alice"])
        token.dispatch_event("change")

        # -- a task, from the page to its artifact -----------------------------------------
        # The first event stream ends after one event, as a restarting server or a proxy
        # would end it: the page reconnects and resumes after the event it saw.
        streams: list[str | None] = []

        def events_route(route: Any) -> None:
            streams.append(route.request.headers.get("last-event-id"))
            if len(streams) > 1:
                route.continue_()
                return
            route.fulfill(
                status=200,
                headers={"Content-Type": "text/event-stream"},
                body='retry: 100\n\nid: 1\nevent: session_start\ndata: {"cycle": 0}\n\n',
            )

        page.route("**/events", events_route)
        page.locator("#goal").fill("write out.txt")
        expect(page.locator("#autonomous")).to_be_checked()
        page.get_by_role("button", name="Create").click()
        expect(page.locator("#task-title")).to_have_text("write out.txt")
        expect(page.locator("#tasks li.task.active")).to_contain_text("write out.txt")

        approve = page.locator('#pending button[data-decision="approve"]')
        expect(approve).to_be_visible()
        expect(page.locator("#pending")).to_contain_text("write_file")
        expect(page.locator("#pending")).to_contain_text("fs.write")
        # A cycle's events are stored when it completes: so far, the start.
        expect(page.locator("#events .event-session_start")).to_have_count(1)
        approve.click()

        expect(page.locator("#events .event-finished")).to_contain_text("wrote out.txt")
        expect(page.locator("#task-status")).to_have_text("Status: finished")
        expect(page.locator("#pending")).to_be_empty()
        events = page.locator("#events .event").all_text_contents()
        kinds = [text.partition(":")[0] for text in events]
        assert streams[:2] == ["0", "1"], streams
        assert kinds.count("session_start") == 1, events
        assert kinds[0] == "session_start", events
        assert kinds[-1] == "finished", events
        assert "plan: Step 1: write_file." in events, events
        assert "confirmation: write_file approved" in events, events
        assert kinds.index("confirmation") < kinds.index("result"), events
        assert any("Wrote" in text for text in events if text.startswith("result")), events

        link = page.locator("#artifacts a", has_text="out.txt")
        expect(link).to_be_visible()
        expect(page.locator("#artifacts a")).to_have_count(1)
        with page.expect_download() as download_info:
            link.click()
        download = download_info.value
        assert download.suggested_filename == "out.txt"
        assert Path(download.path()).read_text("utf-8") == "hello from the agent\n"

        # -- plugins: enable shell, change its setting -------------------------------------
        config_path = home / "config.yaml"
        before = load_config(config_path)
        assert "shell" not in before.enable
        assert "shell" not in before.plugin_settings

        page.locator("#tab-plugins").click()
        expect(page.locator("#plugins-view")).to_be_visible()
        expect(page.locator("#tasks-view")).to_be_hidden()
        shell = page.locator('#plugins li[data-plugin-id="shell"]')
        expect(shell).to_contain_text("disabled")
        shell.click()
        expect(page.locator("#plugin-title")).to_contain_text("shell")
        expect(page.locator("#plugin-running")).to_contain_text("disabled")
        expect(page.locator("#plugin-commands")).to_contain_text("run_shell")
        expect(page.locator("#plugin-permissions")).to_contain_text("shell")

        page.locator("#plugin-toggle").click()
        # Enabling shows the permissions first.
        expect(page.locator("#plugin-confirm")).to_contain_text("run shell commands")
        expect(page.locator("#plugin-confirm")).to_contain_text("not granted")
        page.locator("#plugin-confirm-enable").click()
        expect(page.locator("#plugin-message")).to_contain_text("Enabled shell")
        expect(page.locator("#plugin-message")).to_contain_text("at each task's next step")
        expect(page.locator("#plugin-state")).to_contain_text("enabled")
        # Loaded at once, without a restart.
        expect(page.locator("#plugin-running")).to_contain_text("loaded")
        expect(shell).not_to_contain_text("restart needed")
        assert "shell" in load_config(config_path).enable

        field = page.locator("#setting-max_output")
        expect(field).to_have_attribute("placeholder", "default: 10000")
        field.fill("12.5")
        page.locator("#plugin-save").click()
        expect(page.locator("#setting-error-max_output")).to_have_text("must be a whole number")
        # The manifest's bounds: shown, and a value outside them refused by the server.
        expect(page.locator('[data-setting="max_output"] .hint')).to_contain_text("At least 1.")
        field.fill("0")
        page.locator("#plugin-save").click()
        expect(page.locator("#setting-error-max_output")).to_contain_text(
            "in the config is 0, but it must be at least 1"
        )
        assert "shell" not in load_config(config_path).plugin_settings
        refused = f"422 PUT {server.url}/ap/v1/plugins/shell/settings"
        assert problems == [refused]  # that answer, and nothing else, was an error
        problems.clear()
        field.fill("5000")
        page.locator("#plugin-save").click()
        expect(page.locator("#plugin-message")).to_contain_text("Saved max_output")
        expect(field).to_have_value("5000")

        after = load_config(config_path)
        assert "shell" in after.enable
        assert "shell" not in after.disable
        assert after.plugin_settings["shell"] == {"max_output": 5000}
        # The rest of the file is kept.
        assert after.plugin_settings["llm_replay"] == before.plugin_settings["llm_replay"]
        assert after.server_tokens == before.server_tokens
        assert after.grants == before.grants

        # A secret is never shown nor written: the page says where it is set.
        page.locator('#plugins li[data-plugin-id="llm_openai"]').click()
        expect(page.locator("#setting-api_key")).to_contain_text("set $OPENAI_API_KEY")
        expect(page.locator("input#setting-api_key")).to_have_count(0)

        assert problems == []


# -- the plugins endpoints, over HTTP ------------------------------------------------------


def test_the_plugins_endpoints_need_a_token(tmp_path: Path) -> None:
    with running(tmp_path, recording(tmp_path / "r.json", *WRITE_AND_FINISH)) as server:
        with server.client(None) as client:
            for method, path in [
                ("GET", PLUGINS),
                ("GET", f"{PLUGINS}/shell"),
                ("POST", f"{PLUGINS}/shell/enable"),
                ("POST", f"{PLUGINS}/shell/disable"),
                ("PUT", f"{PLUGINS}/shell/settings"),
            ]:
                response = client.request(method, path, json={})
                assert response.status_code == 401, (method, path)
        with server.client() as client:
            missing = client.get(f"{PLUGINS}/nope")
            assert missing.status_code == 404
            assert "nope" in missing.json()["message"]
        assert "shell" not in load_config(tmp_path / "config.yaml").enable


def test_enabling_and_settings_write_the_config_file_and_say_when_they_apply(
    tmp_path: Path,
) -> None:
    with (
        running(tmp_path, recording(tmp_path / "r.json", *WRITE_AND_FINISH)) as server,
        server.client() as client,
    ):
        listed = client.get(PLUGINS).json()
        web = next(p for p in listed["plugins"] if p["id"] == "web")
        assert (web["enabled"], web["status"], web["running"]["status"]) == (
            False,
            "disabled",
            "disabled",
        )
        assert "next step" in listed["takes_effect"]

        enabled = client.post(f"{PLUGINS}/web/enable")
        assert enabled.status_code == 200, enabled.text
        body = enabled.json()
        assert body["enabled"] is True
        assert body["running"]["status"] == "loaded"  # at once: no restart
        assert body["restart_needed"] is False
        assert "web" in server.handle.tasks.runtime.plugins.loaded
        assert {p["name"]: p["granted"] for p in body["permissions"]} == {
            "network": False,
            "network.local": False,
        }
        assert [c["name"] for c in body["commands"]] == ["fetch_url"]

        changed = client.put(f"{PLUGINS}/web/settings", json={"settings": {"timeout": 7.5}})
        assert changed.status_code == 200, changed.text
        timeout = next(s for s in changed.json()["settings"] if s["name"] == "timeout")
        assert (timeout["value"], timeout["default"], timeout["source"]) == (7.5, 20, "config")
        assert (timeout["minimum"], timeout["maximum"], timeout["enum"]) == (0, None, None)
        config = load_config(tmp_path / "config.yaml")
        assert "web" in config.enable
        assert config.plugin_settings["web"] == {"timeout": 7.5}
        assert config.plugin_settings["llm_replay"] == {"strict": False}

        # null puts a setting back to its default.
        reset = client.put(f"{PLUGINS}/web/settings", json={"settings": {"timeout": None}})
        assert reset.status_code == 200, reset.text
        assert "web" not in load_config(tmp_path / "config.yaml").plugin_settings

        disabled = client.post(f"{PLUGINS}/web/disable")
        assert disabled.status_code == 200, disabled.text
        assert disabled.json()["restart_needed"] is False
        assert disabled.json()["running"]["status"] == "disabled"
        assert "web" not in server.handle.tasks.runtime.plugins.loaded
        config = load_config(tmp_path / "config.yaml")
        assert "web" in config.disable
        assert "web" not in config.enable


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"settings": {"timeout": "soon"}}, "settings.timeout: must be a number"),
        ({"settings": {"max_bytes": 1.5}}, "settings.max_bytes: must be a whole number"),
        ({"settings": {"max_bytes": True}}, "settings.max_bytes: must be a whole number"),
        ({"settings": {"colour": "red"}}, "settings.colour: plugin 'web' has no such setting"),
        (
            {"settings": {"timeout": -1}},
            "settings.timeout: plugin 'web': setting 'timeout' in the config is -1, but it must "
            "be at least 0",
        ),
        ({"settings": {"max_bytes": 0}}, "settings.max_bytes: plugin 'web'"),
        ({"settings": []}, "settings: give the settings"),
        ({}, "settings: give the settings"),
    ],
)
def test_a_wrong_setting_is_422_naming_it_and_changes_nothing(
    tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    with (
        running(tmp_path, recording(tmp_path / "r.json", *WRITE_AND_FINISH)) as server,
        server.client() as client,
    ):
        before = (tmp_path / "config.yaml").read_bytes()
        response = client.put(f"{PLUGINS}/web/settings", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["message"].startswith(field), response.text
        not_finite = client.put(
            f"{PLUGINS}/web/settings",
            content=b'{"settings": {"timeout": NaN}}',
            headers={"Content-Type": "application/json"},
        )
        assert not_finite.status_code == 422, not_finite.text
        assert (tmp_path / "config.yaml").read_bytes() == before


def test_secrets_are_never_returned_nor_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-0123456789abcdefghij"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with (
        running(tmp_path, recording(tmp_path / "r.json", *WRITE_AND_FINISH)) as server,
        server.client() as client,
    ):
        shown = client.get(f"{PLUGINS}/llm_openai")
        assert shown.status_code == 200
        assert key not in shown.text
        api_key = next(s for s in shown.json()["settings"] if s["name"] == "api_key")
        assert api_key["secret"] is True
        assert api_key["set"] is True
        assert api_key["source"] == "environment"
        assert api_key["value"] is None
        assert api_key["editable"] is False

        written = client.put(
            f"{PLUGINS}/llm_openai/settings", json={"settings": {"api_key": "sk-other-key-0123456"}}
        )
        assert written.status_code == 422
        assert written.json()["message"].startswith("settings.api_key: a secret")
        assert "$OPENAI_API_KEY" in written.json()["message"]
        assert "sk-other" not in (tmp_path / "config.yaml").read_text("utf-8")


def test_an_invalid_config_file_is_not_rewritten(tmp_path: Path) -> None:
    with (
        running(tmp_path, recording(tmp_path / "r.json", *WRITE_AND_FINISH)) as server,
        server.client() as client,
    ):
        path = tmp_path / "config.yaml"
        path.write_text(path.read_text("utf-8") + "colour: red\n", "utf-8")
        before = path.read_bytes()
        response = client.post(f"{PLUGINS}/shell/enable")
        assert response.status_code == 409, response.text
        assert "colour" in response.json()["message"]
        assert path.read_bytes() == before


def test_a_plugin_that_would_not_load_is_broken_with_the_reason(tmp_path: Path) -> None:
    with (
        running(tmp_path, recording(tmp_path / "r.json", *WRITE_AND_FINISH)) as server,
        server.client() as client,
    ):
        path = tmp_path / "config.yaml"
        path.write_text(
            path.read_text("utf-8").replace("{llm_replay:", "{web: {timeout: soon}, llm_replay:")
            + "\n",
            "utf-8",
        )
        assert client.post(f"{PLUGINS}/web/enable").status_code == 200
        web = client.get(f"{PLUGINS}/web").json()
        assert web["status"] == "broken"
        assert "timeout" in web["reason"]
        # Loaded anew at once: the server says it did not load, and why.
        assert web["running"]["status"] == "broken"
        assert "timeout" in web["running"]["reason"]
        listed = {p["id"]: p for p in client.get(PLUGINS).json()["plugins"]}
        assert listed["web"]["status"] == "broken"
