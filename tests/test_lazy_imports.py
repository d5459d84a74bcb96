"""What a command imports is what it needs: the light commands never load the server's stack, and
`serve` loads neither the proxy's TLS stack (unless the proxy runs) nor provider kinds its config
does not use. Start-up time is mostly import time; these keep a saving from silently coming back."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

# The server's stack: none of it is needed to parse a command line or print help.
SERVER_STACK = (
    "aiohttp",
    "httpx",
    "google.protobuf",
    "granian",
    "prometheus_client",
    "cursor_byok.gateway",
    "cursor_byok.conversation",
    "cursor_byok.providers",
    "cursor_byok.prompting",
    "cursor_byok.protocol",
    "cursor_byok.store",
)
# What only the intercepting proxy and the CA commands need.
PROXY_STACK = ("cryptography", "h2", "cursor_byok.interceptor.ca", "cursor_byok.interceptor.proxy", "cursor_byok.h2_client")
# httpx's command-line client, which httpx imports whenever these happen to be installed, and the
# metrics exposition, needed from the first counted run or scrape on.
NOT_AT_START = ("click", "pygments", "rich", "prometheus_client")
# What a running server loads only when something asks for it, neither to get ready nor to warm up
# for its first turns: the relay's HTTP/1 dialer (a Run stream relayed through a proxy), the
# instances of a PostgreSQL cluster, a team server's developers, a capture that is on, and what only
# other commands use (a capture's archive, a launchd plist, suggestions for a mistyped config key).
ON_DEMAND = (
    "cursor_byok.interceptor.dialer", "cursor_byok.cluster.node", "cursor_byok.team.access",
    "cursor_byok.capture.control", "tarfile", "plistlib", "difflib",
)


def loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter has loaded after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True, env=env)
    return set(json.loads(out.stdout.splitlines()[-1]))


def among(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in loaded)


def reported_by_a_started_server(tmp_path: Path, report: str, *, warmed: bool) -> object:
    """In a fresh interpreter, a server's gateway loaded and started as `serve` does it (`warmed`:
    and its warm-up done), then the lines `report`: the JSON of the `value` they set."""
    probe = (
        "import asyncio, dataclasses, json, sys\n"
        "from cursor_byok.config import ModelConfig, parse\n"
        "from cursor_byok.gateway.front import LoadingFront\n"
        "async def main():\n"
        f"    front = LoadingFront(parse({{'server': {{'host': '127.0.0.1', 'port': 9, 'data_dir': {str(tmp_path)!r}}}}}), 'cursor_byok.server')\n"
        "    server = await front.load()\n"
        + ("    await front.warmed\n" if warmed else "")
        + "".join(f"    {line}\n" for line in report.splitlines())
        + "    await server.stop()\n"
        "    print(json.dumps(value))\n"
        "asyncio.run(main())"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def run_cli(*argv: str) -> str:
    return f"from cursor_byok.cli import main\ntry:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass"


def test_help_and_version_load_nothing_of_the_server() -> None:
    for argv in (("--help",), ("--version",), ("serve", "--help"), ("conversations", "--help")):
        loaded = loaded_after(run_cli(*argv))
        assert among(loaded, SERVER_STACK + PROXY_STACK + ("asyncio", "ssl")) == [], argv


def test_a_command_loads_no_other_command_group() -> None:
    """`serve` (and every command named on its command line) imports its own group only."""
    others = tuple(f"cursor_byok.cli.{group}" for group in ("connect", "doctor", "service", "ca", "capture", "conversations", "db", "users"))
    assert among(loaded_after(run_cli("serve", "--help")), others) == []
    assert among(loaded_after(run_cli("--help")), others) == sorted(others)  # the whole help lists them all


def test_doctor_loads_nothing_of_the_server(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(ServerConfig(data_dir=tmp_path, models=[ModelSpec("m", "openai-chat", "http://127.0.0.1:9/v1")]).toml(9))
    loaded = loaded_after(run_cli("doctor", "--config", str(config)))
    assert "cursor_byok.cli.doctor" in loaded
    assert among(loaded, SERVER_STACK) == []


def test_the_gateway_loads_no_proxy_stack_and_no_unused_provider_kind() -> None:
    loaded = loaded_after(
        "import cursor_byok.cli, cursor_byok.gateway.app, granian.server.embed\n"
        "from cursor_byok.config import ModelConfig\n"
        "from cursor_byok.http_client import streaming_client\n"
        "from cursor_byok.providers import make_provider\n"
        "make_provider(ModelConfig(id='m', provider='openai-chat', model='x'), '', streaming_client())"
    )
    assert "cursor_byok.gateway.app" in loaded and "cursor_byok.providers.openai_chat" in loaded
    assert among(loaded, PROXY_STACK + NOT_AT_START) == []
    assert among(loaded, ("cursor_byok.providers.anthropic", "cursor_byok.providers.openai_responses")) == []


def test_serve_loads_no_http_client_no_protobuf_and_no_gateway_before_it_listens() -> None:
    """Its start checks and what answers the health probe: the gateway itself (the conversation
    runtime, the store, the HTTP clients, protobuf and the wire messages) is loaded behind the probe."""
    no_proxy = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    loaded = loaded_after(
        "import cursor_byok.cli, cursor_byok.gateway, granian.server.embed, uvloop\n"
        "from cursor_byok.cli.serve import refuse_unusable_relay_proxy\n"
        "from cursor_byok.config import parse\n"
        "refuse_unusable_relay_proxy(parse({}))",
        env=no_proxy,
    )
    assert "cursor_byok.gateway.front" in loaded
    heavy = (
        "aiohttp", "httpx", "google.protobuf", "cursor_byok.protocol.messages", "cursor_byok.protocol.compat",
        "cursor_byok.gateway.app", "cursor_byok.conversation", "cursor_byok.store", "cursor_byok.providers",
        "ctypes.util",  # its find_library runs ldconfig in a child process
        "importlib.readers",  # the package resource reader: the warm-up's, for the prompt's assets
    )
    assert among(loaded, heavy + PROXY_STACK + NOT_AT_START + ON_DEMAND) == []


def test_a_provider_kind_loads_when_a_model_uses_it() -> None:
    loaded = loaded_after(
        "from cursor_byok.config import ModelConfig\n"
        "from cursor_byok.http_client import streaming_client\n"
        "from cursor_byok.providers import make_provider\n"
        "make_provider(ModelConfig(id='m', provider='anthropic', model='x'), '', streaming_client())"
    )
    assert "cursor_byok.providers.anthropic" in loaded


def test_a_running_server_without_the_proxy_never_mapped_the_tls_stack(tmp_path: Path) -> None:
    """The real `serve`, healthy: cryptography's compiled core is not in its memory map."""
    server = ServerProcess(ServerConfig(data_dir=tmp_path, models=[ModelSpec("m", "openai-chat", "http://127.0.0.1:9/v1")]))
    server.start()
    try:
        assert server.proc is not None
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    finally:
        server.stop()
    assert "/aiohttp/" in maps  # the map does show the server's own compiled modules
    assert "/cryptography/" not in maps


def test_what_the_first_turn_imports_on_first_use_is_imported_once_the_server_is_up(tmp_path: Path) -> None:
    """Not at start (above), but by the warm-up right after the gateway is up, before any turn."""
    loaded = loaded_after(
        "import asyncio\n"
        "from cursor_byok.config import parse\n"
        "from cursor_byok.gateway.front import LoadingFront\n"
        "async def main():\n"
        f"    front = LoadingFront(parse({{'server': {{'host': '127.0.0.1', 'port': 9, 'data_dir': {str(tmp_path)!r}}}}}), 'cursor_byok.server')\n"
        "    server = await front.load()\n"
        "    await front.warmed\n"
        "    await server.stop()\n"
        "asyncio.run(main())"
    )
    assert "cursor_byok.gateway.app" in loaded
    assert among(loaded, NOT_AT_START) == ["prometheus_client"]
    assert among(loaded, ON_DEMAND) == []
    # The PostgreSQL backend only where a [store] url asks for it: the local server never loads it.
    assert among(loaded, ("psycopg", "cursor_byok.store.postgres")) == []


def test_the_composition_root_loads_the_store_and_leaves_the_rest_to_its_start() -> None:
    """The gateway's loader imports the composition root, then its `start` opens the store beside the
    import of everything else (the store's file work lets go of the interpreter lock; a first start
    waits on the disk for its schema): so importing the root loads the store and nothing else of the stack."""
    loaded = loaded_after("import cursor_byok.server")
    assert "cursor_byok.store" in loaded
    assert among(loaded, ("cursor_byok.conversation", "cursor_byok.gateway.app", "cursor_byok.providers", "aiohttp", "httpx")) == []


def test_a_server_gets_ready_without_making_a_dataclass(tmp_path: Path) -> None:
    """Each dataclass generates and compiles its methods when its module is imported (~0.4 ms a
    class, ~24 ms over the ~60 that a start loaded); a msgspec Struct is made in C (~10 µs). None of
    the modules a server has loaded once it is ready defines one."""
    made = (
        "value = sorted(f'{name}.{kind.__qualname__}' for name, module in list(sys.modules.items()) if name.startswith('cursor_byok')"
        " for kind in vars(module).values() if isinstance(kind, type) and kind.__module__ == name and dataclasses.is_dataclass(kind))"
    )
    assert reported_by_a_started_server(tmp_path, made, warmed=False) == []


def test_serve_runs_no_collection_before_its_gateway_loads(tmp_path: Path) -> None:
    """What the command line and `serve`'s start checks import and make lives as long as the
    process: the cycle collector would walk it ~40 times on the way to listening (~8 ms). It is
    paused from the CLI's import until the gateway is up, and on again for every other command."""
    config = tmp_path / "config.toml"
    config.write_text(ServerConfig(data_dir=tmp_path, models=[ModelSpec("m", "openai-chat", "http://127.0.0.1:9/v1")]).toml(free_port()))
    probe = (
        "import gc, importlib, json, os, sys\n"
        "passes, begun = [], []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and passes.append(info['generation']))\n"
        # counted from the moment the CLI's own code runs (not while its source may be compiled)
        "cli_code = os.path.join('cursor_byok', 'cli', '__init__.py')\n"
        "sys.addaudithook(lambda event, args: event == 'exec' and not begun\n"
        "                 and getattr(args[0], 'co_filename', '').endswith(cli_code) and begun.append(len(passes)))\n"
        "import cursor_byok.cli as cli\n"
        "seen = {'import': len(passes) - begun[0], 'collecting after import': gc.isenabled()}\n"
        "import_module = importlib.import_module\n"
        "def gateway_loads(cfg, listener, config_file):\n"
        "    listener.close()\n"
        "    seen['serve'] = len(passes) - begun[0] - seen['import']\n"
        "    return 0\n"
        "def hooked(name, *args):\n"
        "    module = import_module(name, *args)\n"
        "    if name == 'cursor_byok.cli.serve':\n"
        "        module._serve = gateway_loads\n"
        "    return module\n"
        "importlib.import_module = hooked\n"
        f"cli.main(['serve', '--config', {str(config)!r}])\n"
        "print(json.dumps({**seen, 'collecting after serve': gc.isenabled()}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == {
        "import": 0, "collecting after import": True, "serve": 0, "collecting after serve": True
    }


def test_a_first_turn_after_the_warm_up_reads_its_prompt_without_importing(tmp_path: Path) -> None:
    """The system prompt's text is the package's assets, read on first use through the package
    resource reader (~4 ms on the first turn's way to the model, on the event loop): the warm-up
    right after start reads them, so the first turn's prompts import nothing."""
    first_turn_imports = (
        "from cursor_byok import prompting\n"
        "before = set(sys.modules)\n"
        "for mode in prompting.Mode:\n"
        "    prompting.compile_request(mode, ModelConfig(id='m', provider='openai-chat', model='x'), ['Read'])\n"
        "prompting.compaction_prompt()\n"
        "value = sorted(set(sys.modules) - before)"
    )
    assert reported_by_a_started_server(tmp_path, first_turn_imports, warmed=True) == []
