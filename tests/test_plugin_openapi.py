"""The OpenAPI bridge against a real HTTP service on 127.0.0.1 (a stdlib server thread).

The service serves its own OpenAPI document and checks a bearer token; every test that
calls it looks at what the service received. The runs use the real runtime with a scripted
model, so consent, continuous mode and the masking of the token are the core's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import attrs
import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from autogpt_core._config import DEFAULT_GRANTS, Config
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._commands import TOOL_NAME, CommandRegistry
from autogpt_core.plugins._loader import LOADED, load
from autogpt_core.plugins._manifest import BridgedDecl, Manifest, load_manifest, parameter_issues
from autogpt_core.store._storage import Store
from autogpt_plugins.openapi import map_document
from hookspecs import LLMResponse
from tests import strategies
from tests.clirun import autogpt, cli_env
from tests.scripted import Answerer, ScriptedProvider, _reply, _tool_answers

TOKEN = "tok-5ecret-pets-0123456789"
ROOT = Path(__file__).resolve().parent.parent
AGENT_PROTOCOL = ROOT / "autogpt_core" / "server" / "spec" / "agent-protocol-v1.openapi.yml"


def pets_document(base_url: str) -> dict[str, Any]:
    """The service's own OpenAPI document: path, query and body parameters, a $ref'd
    schema, bearer auth, and the parts the bridge cannot map."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "Pets", "version": "1"},
        "servers": [{"url": base_url}],
        "security": [{"token": []}],
        "paths": {
            "/pets/{pet_id}": {
                "parameters": [
                    {"name": "pet_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "get": {
                    "operationId": "getPet",
                    "summary": "Get one pet.",
                    "parameters": [
                        {"name": "verbose", "in": "query", "schema": {"type": "boolean"}},
                    ],
                    "responses": {"200": {"description": "the pet"}},
                },
                "delete": {"summary": "No operationId here.", "responses": {}},
            },
            "/pets": {
                "post": {
                    "operationId": "createPet",
                    "summary": "Add a pet.",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}
                        },
                    },
                    "callbacks": {"born": {}},
                    "responses": {"200": {"description": "added"}},
                },
                "put": {
                    "operationId": "uploadPhoto",
                    "requestBody": {"content": {"multipart/form-data": {"schema": {}}}},
                    "responses": {},
                },
            },
            "/admin": {
                "get": {
                    "operationId": "adminPanel",
                    "security": [{"oauth": ["admin"]}],
                    "responses": {},
                }
            },
        },
        "components": {
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer"},
                "oauth": {"type": "oauth2", "flows": {}},
            },
            "schemas": {
                "Pet": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "owner": {"$ref": "#/components/schemas/Owner"},
                    },
                    "required": ["name"],
                },
                "Owner": {"type": "object", "properties": {"email": {"type": "string"}}},
            },
        },
    }


@attrs.define
class PetService:
    """A real HTTP service: what it received, and its URL."""

    url: str = ""
    requests: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def api_requests(self) -> list[dict[str, Any]]:
        """What reached the API (not the document)."""
        return [r for r in self.requests if not r["path"].startswith(("/openapi", "/.well"))]


def _handler(service: PetService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, value: object) -> None:
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            seen = {
                "method": self.command,
                "path": unquote(parts.path),
                "query": parse_qs(parts.query),
                "authorization": self.headers.get("Authorization"),
                "content_type": self.headers.get("Content-Type"),
                "body": json.loads(raw) if raw else None,
            }
            service.requests.append(seen)
            if parts.path == "/openapi.json":
                return self._answer(200, pets_document(service.url))
            if parts.path == "/.well-known/ai-plugin.json":
                return self._answer(
                    200,
                    {
                        "schema_version": "v1",
                        "name_for_model": "pets",
                        "description_for_model": "Use pets to look pets up by id.",
                        "auth": {"type": "service_http", "authorization_type": "bearer"},
                        "api": {"type": "openapi", "url": "/openapi.json"},
                    },
                )
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._answer(401, {"error": "bad token"})
            # The service echoes the header it was sent: the core must mask it.
            return self._answer(200, {"received": seen})

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    return Handler


@pytest.fixture
def pets() -> Iterator[PetService]:
    service = PetService()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(service))
    service.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _config(tmp_path: Path, spec: str, *, grants: Sequence[str] = ()) -> Config:
    services = {"pets": {"spec": spec, "auth": {"type": "bearer", "env": "PETS_TOKEN"}}}
    return Config(
        path=tmp_path / "config.yaml",
        data_dir=tmp_path / "data",
        enable=frozenset({"openapi"}),
        plugin_settings={"openapi": {"services": services, "timeout": 10}},
        # The service is on 127.0.0.1: network.local is granted, so only the bridge asks.
        grants=DEFAULT_GRANTS | {"network", "network.local", *grants},
    )


async def _run(
    tmp_path: Path,
    config: Config,
    replies: list[LLMResponse],
    *,
    answerer: Answerer | None = None,
    continuous: bool = False,
) -> tuple[Any, ScriptedProvider, list[dict[str, Any]]]:
    plugins = load(config, environ={"PETS_TOKEN": TOKEN})
    assert plugins.records["openapi"].status == LOADED, plugins.records["openapi"].reason
    provider = ScriptedProvider(list(replies))
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    if answerer is not None:
        plugins.pm.register(answerer, name="answerer")
    async with Runtime(config, plugins=plugins) as rt:
        outcome = await rt.run(
            "look up pet 7",
            RunOptions(llm="scripted", workspace=tmp_path / "ws", continuous=continuous),
        )
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        session = store.list_sessions().items[0]
        events = [{"kind": e.kind, "data": e.data} for e in store.list_events(session.id)]
    return outcome, provider, events


GET_PET = _reply("pets__getPet", {"pet_id": "7 & 8", "verbose": True}, "c1")
FINISH = _reply("finish", {"result": "done"}, "f1")


def test_the_service_document_maps_to_commands(pets: PetService, tmp_path: Path) -> None:
    """Operations with an operationId become PREFIX.operationId commands with their path,
    query and JSON-body parameters ($refs inlined); the rest is reported with reasons."""
    plugins = load(_config(tmp_path, f"{pets.url}/openapi.json"), environ={"PETS_TOKEN": TOKEN})
    record = plugins.records["openapi"]
    assert record.status == LOADED, record.reason
    bridged = {c.name: c for c in plugins.commands if c.bridged}
    assert set(bridged) == {"pets.getPet", "pets.createPet"}
    get_pet = bridged["pets.getPet"]
    assert get_pet.decl.parameters == {
        "type": "object",
        "properties": {"pet_id": {"type": "string"}, "verbose": {"type": "boolean"}},
        "additionalProperties": False,
        "required": ["pet_id"],
    }
    assert get_pet.decl.permissions == ("network", "bridge:openapi")
    body = bridged["pets.createPet"].decl.parameters["properties"]["body"]
    assert body["properties"]["owner"] == {
        "type": "object",
        "properties": {"email": {"type": "string"}},
    }
    assert bridged["pets.createPet"].decl.parameters["required"] == ["body"]
    reasons = dict(record.unmapped)
    assert "no operationId" in reasons["pets: DELETE /pets/{pet_id}"]
    assert "not JSON (multipart/form-data)" in reasons["pets: uploadPhoto (PUT /pets)"]
    assert "oauth (oauth2)" in reasons["pets: adminPanel (GET /admin)"]
    assert "callbacks" in reasons["pets: createPet (POST /pets) callbacks"]
    # Tool names may not hold dots: the model sees PREFIX__NAME, which the registry knows.
    tools = {t.name for t in plugins.commands.tool_specs()}
    assert {"pets__getPet", "pets__createPet"} <= tools
    assert all(TOOL_NAME.fullmatch(name) for name in tools)
    assert plugins.commands.get("pets__getPet") is get_pet
    # Only the document was read while loading: no operation was called.
    assert pets.api_requests == []
    assert TOKEN in plugins.secrets


async def test_refused_consent_sends_nothing(pets: PetService, tmp_path: Path) -> None:
    """A bridged call is asked of the user (bridge:openapi); refused, the service sees no
    request, and the model is told."""
    answerer = Answerer(False)
    config = _config(tmp_path, f"{pets.url}/openapi.json")
    outcome, provider, _ = await _run(tmp_path, config, [GET_PET, FINISH], answerer=answerer)
    assert outcome.status == "finished"
    assert [a.missing_permissions for a in answerer.asked] == [("bridge:openapi",)]
    assert answerer.asked[0].call.command == "pets__getPet"
    assert pets.api_requests == []
    answer = _tool_answers(provider.requests[1])[0]
    assert "did not allow command 'pets__getPet'" in answer


async def test_granted_consent_calls_the_service(pets: PetService, tmp_path: Path) -> None:
    """Consented, the call reaches the service with the path, query, body and bearer token;
    the token never appears in an event, although the service echoed it."""
    answerer = Answerer(True)
    create = _reply("pets__createPet", {"body": {"name": "Rex", "owner": {"email": "a@b"}}}, "c2")
    config = _config(tmp_path, f"{pets.url}/openapi.json")
    outcome, provider, events = await _run(
        tmp_path, config, [GET_PET, create, FINISH], answerer=answerer
    )
    assert outcome.status == "finished"
    assert len(answerer.asked) == 2
    got, posted = pets.api_requests
    assert (got["method"], got["path"], got["query"]) == (
        "GET",
        "/pets/7 & 8",
        {"verbose": ["true"]},
    )
    assert got["authorization"] == f"Bearer {TOKEN}"
    assert (posted["method"], posted["path"]) == ("POST", "/pets")
    assert posted["body"] == {"name": "Rex", "owner": {"email": "a@b"}}
    assert posted["content_type"] == "application/json"
    answer = _tool_answers(provider.requests[1])[0]
    assert "status: 200 OK" in answer
    assert '"path": "/pets/7 & 8"' in answer  # JSON, pretty-printed
    assert TOKEN not in json.dumps(events)
    assert TOKEN not in json.dumps([m.content for r in provider.requests for m in r.messages])
    results = [e["data"] for e in events if e["kind"] == "result" and e["data"]["ok"]]
    assert any("Bearer ***" in r["output"] for r in results)
    commands = [e["data"]["command"] for e in events if e["kind"] == "command"]
    assert commands == ["pets.getPet", "pets.createPet", "finish"]


async def test_granting_bridge_openapi_skips_the_question(pets: PetService, tmp_path: Path) -> None:
    """With bridge:openapi granted in the config, the call runs without asking."""
    answerer = Answerer(False)
    config = _config(tmp_path, f"{pets.url}/openapi.json", grants=["bridge:openapi"])
    outcome, _, _ = await _run(tmp_path, config, [GET_PET, FINISH], answerer=answerer)
    assert outcome.status == "finished"
    assert answerer.asked == []
    assert [r["path"] for r in pets.api_requests] == ["/pets/7 & 8"]


async def test_unattended_runs_refuse_bridged_commands(pets: PetService, tmp_path: Path) -> None:
    """In continuous mode an ungranted bridged command is refused without asking."""
    answerer = Answerer(True)
    config = _config(tmp_path, f"{pets.url}/openapi.json")
    outcome, provider, _ = await _run(
        tmp_path, config, [GET_PET, FINISH], answerer=answerer, continuous=True
    )
    assert outcome.status == "finished"
    assert answerer.asked == []
    assert pets.api_requests == []
    assert "continuous mode" in _tool_answers(provider.requests[1])[0]


async def test_ai_plugin_manifest_is_followed_and_described(
    pets: PetService, tmp_path: Path
) -> None:
    """An ai-plugin.json leads to its OpenAPI document; its description_for_model reaches
    the model as data from outside, not in the system message."""
    config = _config(tmp_path, f"{pets.url}/.well-known/ai-plugin.json", grants=["bridge:openapi"])
    outcome, provider, _ = await _run(tmp_path, config, [GET_PET, FINISH])
    assert outcome.status == "finished"
    first = provider.requests[0].messages
    assert "Use pets to look pets up by id." not in first[0].content
    assert any("Use pets to look pets up by id." in m.content for m in first[1:])
    assert [r["path"] for r in pets.api_requests] == ["/pets/7 & 8"]


def test_a_missing_token_is_reported(pets: PetService, tmp_path: Path) -> None:
    """A service whose token variable is unset is not mapped, and says which variable."""
    plugins = load(_config(tmp_path, f"{pets.url}/openapi.json"), environ={})
    record = plugins.records["openapi"]
    assert record.status == LOADED
    assert not [c for c in plugins.commands if c.bridged]
    assert "PETS_TOKEN" in dict(record.unmapped)["pets"]


# --- the Agent Protocol document ----------------------------------------------------------


def test_agent_protocol_document_maps() -> None:
    """The Agent Protocol's operations map to commands with the expected schemas; the
    multipart upload is reported, not dropped."""
    mapped = map_document(yaml.safe_load(AGENT_PROTOCOL.read_text()))
    ops = {o.name: o for o in mapped.operations}
    assert set(ops) == {
        "createAgentTask",
        "listAgentTasks",
        "getAgentTask",
        "listAgentTaskSteps",
        "executeAgentTaskStep",
        "getAgentTaskStep",
        "listAgentTaskArtifacts",
        "downloadAgentTaskArtifact",
    }
    listing = ops["listAgentTasks"].parameters_schema
    assert listing["properties"]["page_size"]["minimum"] == 1
    assert "required" not in listing
    step = ops["executeAgentTaskStep"].parameters_schema
    assert step["required"] == ["task_id"]
    assert step["properties"]["body"]["properties"]["input"]["type"] == ["string", "null"]
    assert ops["getAgentTaskStep"].parameters_schema["required"] == ["task_id", "step_id"]
    assert (ops["createAgentTask"].method, ops["createAgentTask"].path) == (
        "POST",
        "/ap/v1/agent/tasks",
    )
    for op in mapped.operations:
        assert parameter_issues(dict(op.parameters_schema), op.name, "test") == []
    assert [(u.what, u.reason) for u in mapped.unmapped] == [
        (
            "uploadAgentTaskArtifacts (POST /ap/v1/agent/tasks/{task_id}/artifacts)",
            "its request body is not JSON (multipart/form-data); only JSON bodies are sent",
        )
    ]


def test_plugins_check_and_info_list_the_bridge(tmp_path: Path) -> None:
    """'plugins check' lists what was not mapped; 'plugins info' lists the bridged commands."""
    config = {
        "plugins": {
            "enable": ["openapi"],
            "settings": {"openapi": {"services": {"ap": {"spec": str(AGENT_PROTOCOL)}}}},
        }
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = cli_env(tmp_path)
    check = autogpt("plugins", "check", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (
        "! openapi: not mapped: ap: uploadAgentTaskArtifacts (POST "
        "/ap/v1/agent/tasks/{task_id}/artifacts): its request body is not JSON" in check.stdout
    )
    info = autogpt("plugins", "info", "openapi", "--json", env=env)
    bridged = json.loads(info.stdout)["bridged"]
    assert bridged["prefixes_from"] == "services"
    names = [c["name"] for c in bridged["commands"]]
    assert "ap.createAgentTask" in names
    assert len(names) == 8
    assert {c["tool"] for c in bridged["commands"]} >= {"ap__createAgentTask"}


def test_a_relative_spec_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    """'specs/ap.yml' in the config means the file beside the config, wherever autogpt is
    started; the message for a missing one names the path it looked at."""
    home = tmp_path / "home"
    (home / "specs").mkdir(parents=True)
    shutil.copy(AGENT_PROTOCOL, home / "specs" / "ap.yml")
    services = {"ap": {"spec": "specs/ap.yml"}, "gone": {"spec": "specs/missing.yml"}}
    config = {"plugins": {"enable": ["openapi"], "settings": {"openapi": {"services": services}}}}
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = cli_env(tmp_path, AUTOGPT_CONFIG=str(home / "config.yaml"))
    info = subprocess.run(
        [sys.executable, "-m", "autogpt_core", "plugins", "info", "openapi", "--json"],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert info.returncode == 0, info.stderr
    names = [c["name"] for c in json.loads(info.stdout)["bridged"]["commands"]]
    assert "ap.createAgentTask" in names
    check = subprocess.run(
        [sys.executable, "-m", "autogpt_core", "plugins", "check"],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"{home / 'specs' / 'missing.yml'} cannot be read" in check.stdout


def test_manifest_declares_a_bounded_bridge() -> None:
    """The manifest is valid, off by default, and bounds its bridged commands to network."""
    manifest = load_manifest(ROOT / "autogpt_plugins" / "openapi" / "autogpt-plugin.yaml")
    assert manifest.enabled_by_default is False
    assert manifest.commands == ()
    assert manifest.bridged is not None
    assert manifest.bridged.prefixes_from == "services"
    assert manifest.bridged.permissions == ("network",)
    assert manifest.permissions == ("network", "network.local")


# --- any document ------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.openapi_documents())
def test_any_operation_set_maps_or_gives_reasons(document: dict[str, Any]) -> None:
    """Whatever the operations hold, mapping and registering never raise: each operation
    becomes a command with a valid schema, or is reported with a reason naming it."""
    mapped = map_document(document)
    count = sum(len(item) for item in document["paths"].values())
    reported = [u for u in mapped.unmapped if not u.what.endswith(" callbacks")]
    assert len(mapped.operations) + len(reported) == count
    assert all(u.reason for u in mapped.unmapped)
    manifest = Manifest(
        id="bridge",
        name="Bridge",
        version="1",
        permissions=("network",),
        bridged=BridgedDecl(prefixes_from="services", permissions=("network",)),
    )
    registry = CommandRegistry()
    skipped: list[tuple[str, str]] = []
    register = registry.bridge_binder(manifest, ["svc"], lambda n, r: skipped.append((n, r)))

    async def run(**arguments: Any) -> str:
        return "ok"

    for op in mapped.operations:
        done = register(
            f"svc.{op.name}",
            run,
            description=op.description,
            parameters=op.parameters_schema,
            permissions=["network"],
        )
        if done:
            command = registry.get(f"svc__{op.name}")
            assert parameter_issues(dict(command.decl.parameters), "p", "test") == []
            assert TOOL_NAME.fullmatch(command.tool_name)
        else:
            name, reason = skipped[-1]
            assert name == f"svc.{op.name}"
            assert f"bridged command 'svc.{op.name}'" in reason
    assert len(registry) + len(skipped) == len(mapped.operations)
