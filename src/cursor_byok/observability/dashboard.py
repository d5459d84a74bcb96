"""The dashboard at /ui/: static pages shipped in this package (no build step) and their JSON API
under /ui/api/. Transport-free: the gateway reads the request (behind its guard) and sends what
`respond` returns."""
from __future__ import annotations

import functools
import importlib.resources
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import msgspec

from ..config import Config, ConfigError, ModelConfig
from ..protocol import ConnectError, error_body, http_status_for
from ..providers import Provider, ProviderCall, ProviderError
from . import views
from .metrics import GatewayGauges
from .probe import measure_model
from .recorder import Recorder

STATIC = {"": "index.html", "index.html": "index.html", "app.js": "app.js", "style.css": "style.css"}
STATIC_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}
JSON_TYPE = "application/json"
# The pages load only their own files and talk only to this server; no other site may frame them.
UI_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
_AGE_UNITS = {"h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


class UiResponse(msgspec.Struct, frozen=True):
    status: int
    content_type: str
    body: bytes


def _json(value: Any, status: int = 200) -> UiResponse:
    return UiResponse(status, JSON_TYPE, msgspec.json.encode(value))


def _error(code: str, message: str, status: int | None = None) -> UiResponse:
    """A Connect-shaped refusal (`{"code", "message"}`), like every other this server sends."""
    return UiResponse(status or http_status_for(code), JSON_TYPE, error_body(ConnectError(code, message)))


def since_ms(text: str, now_ms: int) -> int:
    """`7d`, `12h`, `2w` before now, as a wall-clock ms; ValueError naming the expected form."""
    amount, unit = text[:-1], text[-1:]
    if not amount.isdigit() or unit not in _AGE_UNITS:
        raise ValueError(f"not an age: {text!r} (use e.g. 7d, 24h, 2w)")
    return now_ms - int(amount) * _AGE_UNITS[unit]


def _int_param(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise ValueError(f"{name}: a whole number between {low} and {high}")
    return int(text)


class Dashboard:
    def __init__(
        self, config: Config, store: Any, recorder: Recorder, adapter: Callable[[ModelConfig], Provider],
        gauges: GatewayGauges | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.recorder = recorder
        self._adapter = adapter  # the provider a model's test call uses
        self._gauges = gauges

    @functools.cached_property
    def _static(self) -> dict[str, bytes]:
        """The pages, read when the first is asked for: not by every start (the package's resource
        reader and the files are ~3 ms of it)."""
        files = importlib.resources.files(__package__).joinpath("ui")
        return {name: files.joinpath(name).read_bytes() for name in set(STATIC.values())}

    async def respond(self, method: str, path: str, query: str, body: bytes) -> UiResponse:
        """`path`: what follows /ui/."""
        if not path.startswith("api/"):
            name = STATIC.get(path)
            if name is None:
                return _error("not_found", f"no page /ui/{path}")
            if method not in ("GET", "HEAD"):
                return _error("unimplemented", "pages are read with GET", 405)
            return UiResponse(200, STATIC_TYPES[name.rpartition(".")[2]], self._static[name])
        parts = path.split("/")[1:]
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        try:
            if method == "POST" and len(parts) == 3 and parts[0] == "models" and parts[2] == "test":
                return await self._test_model(urllib.parse.unquote(parts[1]))
            if method != "GET":
                return _error("unimplemented", "the dashboard API is read with GET (POST only for a model test)", 405)
            return await self._read(parts, params)
        except ValueError as exc:
            return _error("invalid_argument", str(exc))

    async def _read(self, parts: list[str], params: dict[str, str]) -> UiResponse:
        now = time.time_ns() // 1_000_000
        match parts:
            case ["overview"]:
                hours = _int_param(params, "hours", 24, 1, 24 * 90)
                return _json(await views.overview(self.store, self.config, now_ms=now, hours=hours))
            case ["usage"]:
                by = params.get("by", "model")
                if by not in ("model", "day", "user"):
                    raise ValueError("by: model, day or user")
                since = since_ms(params["since"], now) if "since" in params else None
                rows = await views.usage(self.store, self.config, since_ms=since, by=by)
                return _json({"rows": rows, "totals": views.totals(rows)})
            case ["conversations"]:
                limit = _int_param(params, "limit", views.PAGE, 1, views.MAX_PAGE)
                return _json(await views.conversations(self.store, cursor=params.get("cursor"), limit=limit))
            case ["conversations", conversation_id]:
                found = await views.conversation(self.store, self.config, urllib.parse.unquote(conversation_id))
                return _json(found) if found is not None else _error("not_found", f"no conversation {conversation_id!r}")
            case ["calls", trace_id, seq, "bodies"] if seq.isdigit():
                call = await self.store.get_call(trace_id, int(seq))
                if call is None:
                    return _error("not_found", f"no call {trace_id}/{seq}")
                return _json({
                    "request": call.request_body.decode("utf-8", "replace") if call.request_body else None,
                    "response": call.response_body.decode("utf-8", "replace") if call.response_body else None,
                })
            case ["live"]:
                return _json(self._live(now))
            case ["models"]:
                return _json([_model_view(m) for m in self.config.models])
        return _error("not_found", f"no API /ui/api/{'/'.join(parts)}")

    def _live(self, now_ms: int) -> dict[str, Any]:
        runs = []
        for run in list(self.recorder.live.values()):
            state = run.observer_state
            runs.append({
                "conversation_id": run.conversation_id,
                "run_id": run.run_id,
                "trace_id": run.trace_id,
                "model_id": run.model.id if run.model is not None else run.requested_model,
                "user": run.developer,  # a team server's developer
                "phase": run.phases[-1][0] if run.phases else "",
                "started_at_ms": run.started_ms,
                "elapsed_ms": now_ms - run.started_ms,
                "calls": state.calls,
                "tool_calls": state.tool_calls,
                **state.tokens,
            })
        gauges = self._gauges
        return {
            "runs": sorted(runs, key=lambda r: r["started_at_ms"]),
            "open_streams": gauges.open_streams() if gauges else 0,
            "active_conversations": gauges.active_conversations() if gauges else 0,
        }

    async def _test_model(self, model_id: str) -> UiResponse:
        model = self.config.model(model_id)
        if model is None or model.id != model_id:
            return _error("not_found", f"no model {model_id!r} in the config")
        try:
            provider = self._adapter(model)
        except ConfigError as exc:  # its key is missing
            return _error("failed_precondition", str(exc))
        call = ProviderCall("test")
        try:
            result = await measure_model(provider, model, call)
        except ProviderError as exc:
            return _error("unavailable", exc.explain(), 502)
        finally:
            self.recorder.test_call(model, call)
        return _json({
            "model_id": model.id, "ttft_ms": result.ttft_ms, "total_ms": result.total_ms,
            "output_tokens": result.output_tokens, "tokens_per_second": result.tokens_per_second, "text": result.text[:500],
        })


def _model_view(model: ModelConfig) -> dict[str, Any]:
    return {
        "id": model.id,
        "provider": model.provider.value,
        "model": model.model,
        "context_window": model.context_window,
        "price": msgspec.structs.asdict(model.price) if model.price is not None else None,
    }
