"""``autogpt plugins codeowners --output``: a CODEOWNERS file from the plugins' manifests."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autogpt_core._errors import ConfigError
from autogpt_core.plugins._codeowners import (
    PluginOwners,
    build_codeowners,
    codeowners_path,
    is_owner,
    owner_problem,
)
from tests.clirun import cli_env
from tests.distfactory import write_plugin

MANIFEST = """\
manifest_version: 1
id: {id}
name: {id}
version: "1.0"
codeowners: {owners}
"""


def _plugin(site: Path, plugin_id: str, owners: list[str]) -> Path:
    return write_plugin(
        site, plugin_id, "", manifest=MANIFEST.format(id=plugin_id, owners=json.dumps(owners))
    )


def _codeowners(*args: str, cwd: Path, sites: list[Path], home: Path):  # type: ignore[no-untyped-def]
    env = cli_env(home)
    env["PYTHONPATH"] = os.pathsep.join(map(str, sites))
    return subprocess.run(
        [sys.executable, "-m", "autogpt_core", "plugins", "codeowners", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_codeowners_file_for_a_repository_of_plugins(tmp_path: Path) -> None:
    """Each plugin's source under the root (the current directory) becomes a rule with its
    owners: an editable install's project directory, else its package's; a path with a
    space is escaped; plugins outside the root, or without owners, are left out with a
    note on stderr each."""
    repo = tmp_path / "repo"
    site = repo / "my plugins"
    _plugin(site, "notes", ["@notes-team", "ada@example.org"])
    _plugin(site, "todo", ["@acme/todo"])
    _plugin(site, "orphan", [])
    # An editable install records its project directory (PEP 610): the whole project,
    # pyproject.toml and tests included, belongs to the plugin's owners.
    project = repo / "plugins" / "web-tools"
    project.mkdir(parents=True)
    _plugin(site, "webtools", ["@acme/web"])
    info = next(site.glob("autogpt_plugin_webtools-*.dist-info"))
    (info / "direct_url.json").write_text(
        json.dumps({"url": project.as_uri(), "dir_info": {"editable": True}})
    )
    elsewhere = tmp_path / "elsewhere"
    _plugin(elsewhere, "stray", ["@someone"])
    done = _codeowners("--output", "CODEOWNERS", cwd=repo, sites=[site, elsewhere], home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Wrote 3 rule(s) to CODEOWNERS" in done.stdout
    text = (repo / "CODEOWNERS").read_text()
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules == [
        "/my\\ plugins/plug_notes/ @notes-team ada@example.org",
        "/my\\ plugins/plug_todo/ @acme/todo",
        "/plugins/web-tools/ @acme/web",
    ]
    assert "# notes\n/my\\ plugins/plug_notes/" in text
    notes = done.stderr.splitlines()
    assert (
        f"note: stray: left out, its source {elsewhere / 'plug_stray'} is outside {repo}" in notes
    )
    assert "note: orphan: left out, its manifest names no codeowners" in notes
    # Built-ins live in the core's checkout: outside this repository, each noted too.
    assert any(line.startswith("note: workspace: left out") for line in notes)
    # --root from anywhere gives the same file; without --output the plain listing stays.
    again = _codeowners(
        "--output", "-", "--root", str(repo), cwd=tmp_path, sites=[site, elsewhere], home=tmp_path
    )
    assert again.stdout == text
    plain = _codeowners(cwd=repo, sites=[site, elsewhere], home=tmp_path)
    assert "notes: @notes-team ada@example.org\n" in plain.stdout
    assert "orphan: (none)\n" in plain.stdout
    lonely = _codeowners("--root", str(repo), cwd=repo, sites=[site], home=tmp_path)
    assert lonely.returncode == 2
    assert "give --output FILE too" in lonely.stderr


def test_a_bad_handle_names_the_plugin_and_writes_nothing(tmp_path: Path) -> None:
    """A handle that is neither @user, @org/team nor an e-mail address is an error naming
    the plugin and the handle, with the fix; no file is written."""
    repo = tmp_path / "repo"
    _plugin(repo / "src", "notes", ["@fine", "notes-team"])
    done = _codeowners("--output", "CODEOWNERS", cwd=repo, sites=[repo / "src"], home=tmp_path)
    assert done.returncode == 2
    assert (
        "autogpt: error: plugin 'notes': invalid codeowners in its manifest: 'notes-team' is "
        "not a handle: did you mean '@notes-team'?"
    ) in done.stderr
    assert not (repo / "CODEOWNERS").exists()


def test_the_core_repository_gets_a_rule_per_builtin(tmp_path: Path) -> None:
    """Where the core is installed (its checkout, when editable), every built-in plugin's
    package gets its own rule: one project directory holds them all, so each plugin's
    package is used."""
    from autogpt_core.plugins._discovery import package_dir

    workspace = package_dir("autogpt_plugins.workspace")
    assert workspace is not None
    root = workspace.parent.parent
    done = _codeowners("--output", "-", "--root", str(root), cwd=tmp_path, sites=[], home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "/autogpt_plugins/workspace/ @autogpt-core/maintainers\n" in done.stdout


def test_paths_codeowners_cannot_hold_are_refused(tmp_path: Path) -> None:
    """A glob character or '#' in a plugin's path is an error naming the plugin; the root
    itself is '*'; a path outside the root is None."""
    root = tmp_path / "repo"
    odd = root / "a[1]"
    odd.mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"plugin 'odd': .*a\[1\].*cannot match literally"):
        build_codeowners([PluginOwners("odd", odd, ("@me",))], root)
    assert codeowners_path(root, root) == "*"
    assert codeowners_path(tmp_path, root) is None


# --- the handle validator ----------------------------------------------------------------

ALNUM = string.ascii_letters + string.digits
LOCAL = ALNUM + "!$%&'*+/=?^_`{|}~-"


@st.composite
def github_names(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.text(ALNUM, min_size=1, max_size=8), min_size=1, max_size=5))
    name = "-".join(parts)
    return name[:39].rstrip("-")


@st.composite
def handles(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["user", "team", "email"]))
    if kind == "user":
        return "@" + draw(github_names())
    if kind == "team":
        slug = draw(st.text(ALNUM + "_", min_size=1, max_size=1)) + draw(
            st.text(ALNUM + "_-", max_size=20)
        )
        return f"@{draw(github_names())}/{slug}"
    local = ".".join(draw(st.lists(st.text(LOCAL, min_size=1, max_size=6), min_size=1, max_size=3)))
    labels = draw(st.lists(st.text(ALNUM, min_size=1, max_size=10), min_size=2, max_size=4))
    return f"{local}@{'.'.join(labels)}"


@given(handles())
def test_valid_handles_are_accepted_and_survive_a_codeowners_line(handle: str) -> None:
    """Every @user, @org/team and e-mail address is accepted, and reads back from the
    CODEOWNERS line as the one owner it was."""
    assert owner_problem(handle) == ""
    result = build_codeowners([PluginOwners("p", Path("/r/p"), (handle,))], Path("/r"))
    (rule,) = [line for line in result.text.splitlines() if line and not line.startswith("#")]
    assert rule.split(" ") == ["/p/", handle]


@given(
    handles(),
    st.sampled_from([" ", "\t", "\n", "#", "\x1b", "@", ",", "\\", '"']),
    st.data(),
)
def test_a_handle_with_a_foreign_character_is_refused(handle: str, bad: str, data) -> None:  # type: ignore[no-untyped-def]
    """A space, tab, newline, '#', escape, extra '@', comma, backslash or quote anywhere in
    a handle makes it invalid, and the message quotes the handle."""
    at = data.draw(st.integers(0, len(handle)))
    broken = handle[:at] + bad + handle[at:]
    problem = owner_problem(broken)
    assert problem, broken
    assert repr(broken) in problem


@given(st.text(max_size=40))
def test_whatever_is_accepted_has_a_handles_shape(text: str) -> None:
    """Any text accepted as an owner is one CODEOWNERS word in one of the three shapes:
    no whitespace, no '#', nothing unprintable; '@' first, or one '@' inside."""
    if not is_owner(text):
        return
    assert text.isprintable()
    assert not any(c.isspace() for c in text)
    assert "#" not in text
    assert "\\" not in text
    assert text.startswith("@") or (text.count("@") == 1 and not text.endswith("@"))


@pytest.mark.parametrize(
    ("handle", "fix"),
    [
        ("notes-team", "did you mean '@notes-team'?"),
        ("acme/web", "did you mean '@acme/web'?"),
        ("@acme/web/extra", "a team is '@org/team', with one '/'"),
        ("@-dash", "write '@user', '@org/team' or an e-mail address"),
        ("@double--hyphen", "single hyphens"),
        ("@" + "a" * 40, "write '@user'"),
        ("ada@localhost", "an e-mail address"),
    ],
)
def test_each_bad_handle_gets_its_fix(handle: str, fix: str) -> None:
    """The message for a bad handle says how to write it."""
    assert fix in owner_problem(handle)
