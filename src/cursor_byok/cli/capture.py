"""`cursor-byok capture start|stop|status|list|show|export` and `cursor-byok replay`.

    cursor-byok capture start [--with-content]   record every agent RPC stream (redacted by default)
    cursor-byok capture stop                     stop; the running server writes what is left first
    cursor-byok capture status | list | show PATH | export [SESSION] [--output FILE]
    cursor-byok replay FILE|DIR... --against URL  play a capture's client side, diff the answers

`start` and `stop` write the data dir's capture settings (so capture outlives a restart, and works
before the server does), then tell a running server to read them again through its local admin
route (`/ui/api/capture`, behind the same guard and token as the dashboard).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..capture import CaptureSettings, captures_dir, clear_active, read_active, write_active
from ..config import Config
from ..local_trust import AUTH_TOKEN_HEADER, auth_token
from .common import CommandError, echo, gateway_url, load_config, table

ADMIN_PATH = "/ui/api/capture"


def _ask_server(cfg: Config, method: str) -> dict[str, Any] | None:
    """The running server's capture status (after it read the settings again, for POST); None
    when no server answers."""
    import httpx

    headers = {"content-type": "application/json"}
    token = auth_token(cfg)
    if token:
        headers[AUTH_TOKEN_HEADER] = token
    try:
        with httpx.Client(timeout=60.0) as client:
            answer = client.request(method, gateway_url(cfg) + ADMIN_PATH, headers=headers, content=b"{}" if method == "POST" else None)
    except httpx.TransportError:
        return None
    if answer.status_code != 200:
        raise CommandError(f"the server at {gateway_url(cfg)} refused the capture request: HTTP {answer.status_code} {answer.text[:200]}")
    return answer.json()


def cmd_start(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    current = read_active(cfg.data_path)
    settings = current if current is not None and current.with_content == args.with_content else CaptureSettings.new(args.with_content)
    write_active(cfg.data_path, settings)
    where = captures_dir(cfg.data_path) / settings.session
    what = "WITH CONTENT (file contents, shell output and text kept; secrets removed)" if args.with_content else "redacted"
    status = _ask_server(cfg, "POST")
    if status is None:
        echo(f"capture on ({what}): takes effect when `cursor-byok serve` starts; files go to {where}")
    else:
        echo(f"capture on ({what}): the server at {gateway_url(cfg)} records every agent RPC stream to {where}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    was_on = clear_active(cfg.data_path)
    status = _ask_server(cfg, "POST")
    if status is not None and "streams_written" in status:
        cut = f"; {status['unfinished']} still open, not recorded" if status.get("unfinished") else ""
        echo(f"capture off: {status['streams_written']} stream(s) written to {status['directory']}{cut}")
    else:
        echo("capture off" if was_on else "capture was off")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    settings = read_active(cfg.data_path)
    status = _ask_server(cfg, "GET")
    if settings is None:
        echo("capture: off")
    elif status is None or not status.get("on"):
        echo(f"capture: on for the next start (session {settings.session}); no server records now")
    else:
        echo(f"capture: on, {status['streams_written']} stream(s) written to {status['directory']}" + (" (with content)" if status["with_content"] else " (redacted)"))
    return 0


def _sessions(cfg: Config) -> list[Path]:
    root = captures_dir(cfg.data_path)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def cmd_list(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    active = read_active(cfg.data_path)
    rows = [["SESSION", "STREAMS", "BYTES", "PATH"]]
    for session in _sessions(cfg):
        files = sorted(session.glob("*.json"))
        mark = " (recording)" if active is not None and active.session == session.name else ""
        rows.append([session.name + mark, str(len(files)), str(sum(f.stat().st_size for f in files)), str(session)])
    if len(rows) == 1:
        echo(f"no captures in {captures_dir(cfg.data_path)} (`cursor-byok capture start` records some)")
        return 0
    for line in table(rows):
        echo(line)
    return 0


def _summary(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    lines = [f"{path.name}: {doc['kind']} {doc['key']} started {doc['started_at']} ({'redacted' if doc['redacted'] else 'with content'})"]
    for exchange in doc["exchanges"]:
        lines.append(f"  +{exchange['at_ms']:.1f}ms {exchange['method']} {exchange['path']} -> {exchange['status']} ({exchange['duration_ms']:.1f}ms)")
        for frame in exchange["frames"]:
            append = frame.get("append")
            seqno = f" seqno {append['append_seqno']}" if append else ""
            lines.append(f"    +{frame['at_ms']:.1f}ms {frame['dir']:<6} {_frame_label(frame)}{seqno}")
    return lines


def _frame_label(frame: dict[str, Any]) -> str:
    if "kind" in frame:
        return frame["kind"]
    if "end_stream" in frame:
        return "end " + (frame["end_stream"].get("code") or "ok")
    if "status" in frame:
        return f"status {frame['status']}" + (f" {frame['error'].get('code', '')}" if "error" in frame else "")
    return f"{frame.get('bytes', 0)} bytes"


def cmd_show(args: argparse.Namespace) -> int:
    target = Path(args.path)
    if not target.exists():
        target = captures_dir(load_config(args).data_path) / args.path
    files = sorted(target.glob("*.json")) if target.is_dir() else [target]
    if not files or not files[0].exists():
        raise CommandError(f"no capture at {args.path}")
    for path in files:
        for line in _summary(path):
            echo(line)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    import tarfile  # only an export writes an archive (the whole help loads this module)

    cfg = load_config(args)
    sessions = _sessions(cfg)
    if args.session:
        chosen = [s for s in sessions if s.name == args.session]
    else:
        chosen = sessions[-1:]
    if not chosen:
        raise CommandError(f"no capture session {args.session or ''} in {captures_dir(cfg.data_path)}".replace("  ", " "))
    session = chosen[0]
    output = Path(args.output or f"cursor-byok-capture-{session.name}.tar.gz")
    with tarfile.open(output, "w:gz") as tar:
        for path in sorted(session.glob("*.json")):
            tar.add(path, arcname=f"{session.name}/{path.name}")
    echo(f"wrote {output} ({len(list(session.glob('*.json')))} stream(s) of session {session.name})")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from ..capture import replay_files
    from .common import run_async

    files: list[Path] = []
    for name in args.files:
        path = Path(name)
        files.extend(sorted(path.glob("*.json")) if path.is_dir() else [path])
    missing = [str(p) for p in files if not p.is_file()]
    if missing or not files:
        raise CommandError(f"no capture file {', '.join(missing) or 'given'}")
    try:
        report = run_async(replay_files(files, args.against, token=args.token, timing_slack=args.timing_slack))
    except (ValueError, KeyError) as exc:  # JSON that is not a capture this build can read
        raise CommandError(f"cannot replay {', '.join(map(str, files))}: {type(exc).__name__}: {exc}") from None
    for line in report.lines():
        echo(line)
    if not report.replayed:
        return 2  # nothing was compared: never a pass
    return 1 if report.diverged else 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("capture", parents=[common], help="record the IDE's agent RPCs (redacted) for a bug report or a test")
    verbs = p.add_subparsers(dest="capture_command", metavar="VERB", required=True)
    start = verbs.add_parser("start", parents=[common], help="record every agent RPC stream from now on")
    start.add_argument("--with-content", action="store_true", help="keep file contents, shell output and text (secrets are still removed)")
    start.set_defaults(handler=cmd_start)
    verbs.add_parser("stop", parents=[common], help="stop recording").set_defaults(handler=cmd_stop)
    verbs.add_parser("status", parents=[common], help="whether capture is on").set_defaults(handler=cmd_status)
    verbs.add_parser("list", parents=[common], help="the capture sessions").set_defaults(handler=cmd_list)
    show = verbs.add_parser("show", parents=[common], help="what a capture file or session holds, frame by frame")
    show.add_argument("path", metavar="PATH|SESSION", help="a capture file, or a session folder's name")
    show.set_defaults(handler=cmd_show)
    export = verbs.add_parser("export", parents=[common], help="one session as a .tar.gz to attach to a bug report")
    export.add_argument("session", nargs="?", help="default: the latest")
    export.add_argument("--output", "-o", metavar="FILE", help="where to write the archive (default: cursor-byok-capture-SESSION.tar.gz here)")
    export.set_defaults(handler=cmd_export)

    r = sub.add_parser("replay", parents=[common], help="play a capture's client side against a server and diff its answers")
    r.add_argument("files", nargs="+", metavar="FILE|DIR", help="capture files, or folders of them")
    r.add_argument("--against", required=True, metavar="URL", help="the server to replay against, e.g. http://127.0.0.1:8787")
    r.add_argument("--token", default="", help="the server's auth token, if it needs one")
    r.add_argument("--timing-slack", type=float, default=None, metavar="FACTOR",
                   help="also count as divergence a stream that took more than FACTOR times as long as recorded (+1 s)")
    r.set_defaults(handler=cmd_replay)
