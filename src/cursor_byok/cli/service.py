"""`cursor-byok service install|uninstall|status [--dry-run]`: run the server at login.

Linux: a systemd user unit (absolute ExecStart, Restart=on-failure) whose keys come from an
EnvironmentFile created 0600. macOS: a launchd agent (created 0600: it carries the keys). Windows:
the Task Scheduler commands are printed, not run. `--dry-run` prints the files (keys masked) and
the commands; `--platform` renders another OS's files (dry run only).
"""
from __future__ import annotations

import argparse
import enum
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config, config_path, default_config_path
from .common import GATEWAY_HEALTH_PATH, PROG, CommandError, echo, gateway_url, installed_command, load_config

UNIT_NAME = "cursor-byok.service"
JOURNAL_COMMAND = "journalctl --user -u cursor-byok -f"  # where a systemd user unit's log goes
LAUNCHD_LABEL = "local.cursor-byok"
TASK_NAME = "cursor-byok"
MASK = "********"
# Passed on to the service when set now: requests to providers follow a corporate proxy.
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")


class Platform(str, enum.Enum):
    LINUX = "linux"
    MACOS = "macos"
    WINDOWS = "windows"

    @classmethod
    def current(cls) -> Platform:
        if sys.platform == "darwin":
            return cls.MACOS
        return cls.WINDOWS if os.name == "nt" else cls.LINUX


@dataclass(frozen=True, slots=True)
class ServiceFile:
    path: Path
    text: str
    shown: str  # what --dry-run prints: `text` with the keys masked
    mode: int
    keep_existing: bool = False  # the env file: once written, the user's edits win


@dataclass(frozen=True, slots=True)
class Step:
    argv: list[str]
    check: bool = True  # False: a failure is expected at times (stopping what is not running)


@dataclass(slots=True)
class ServicePlan:
    platform: Platform
    files: list[ServiceFile]
    start: list[Step]  # run by install (printed on Windows)
    stop: list[Step]  # run by uninstall before the files go
    query: list[str]  # status
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what would make the service a bad idea as planned
    run_commands: bool = True


def serve_command(cfg_file: Path, platform: Platform) -> list[str]:
    """The absolute command line the service runs: this installation's `cursor-byok serve`."""
    return [*installed_command(platform is Platform.WINDOWS), "serve", "--config", str(cfg_file)]


def source_checkout(command: Path) -> Path | None:
    """The cursor-byok source checkout `command` lives in (its `.venv`), if it does: `make clean`
    there deletes what a service would run."""
    for parent in command.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "cursor_byok").is_dir():
            return parent
    return None


def _checkout_warnings(command: list[str]) -> list[str]:
    checkout = source_checkout(Path(command[0]))
    if checkout is None:
        return []
    return [
        f"the service would run {command[0]}, inside the source checkout {checkout} "
        "(`make clean` there deletes it): run `make install` in the checkout, then "
        "`cursor-byok service install` with the installed command"
    ]


def key_variables(cfg: Config, environ: dict[str, str]) -> list[str]:
    names = dict.fromkeys(m.api_key_env for m in cfg.models if m.api_key_env)
    names.update(dict.fromkeys(v for v in PROXY_VARIABLES if environ.get(v)))
    return list(names)


def _systemd_arg(arg: str) -> str:
    """One ExecStart word: `%` and `$` are specifiers to systemd; whitespace and quotes need quotes."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if re.search(r'[\s"\'\\]', arg):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def _env_value(value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9._~:/+=@,-]*", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _env_file(path: Path, names: list[str], environ: dict[str, str]) -> ServiceFile:
    head = "# Environment of the cursor-byok service: API keys and proxy settings. Keep it mode 0600.\n"
    text, shown = head, head
    for name in names:
        if environ.get(name):
            text += f"{name}={_env_value(environ[name])}\n"
            shown += f"{name}={MASK}\n"
        else:
            line = f"# {name}=   (not set when the service was installed: put the value here)\n"
            text += line
            shown += line
    return ServiceFile(path, text, shown, 0o600, keep_existing=True)


def _config_home(environ: dict[str, str]) -> Path:
    return Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def _linux(command: list[str], names: list[str], environ: dict[str, str]) -> ServicePlan:
    env_file = _env_file(default_config_path().parent / "service.env", names, environ)
    unit = (
        "# Written by `cursor-byok service install`; remove it with `cursor-byok service uninstall`.\n"
        "[Unit]\n"
        "Description=cursor-byok: the Cursor agent backend on your own model keys\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={' '.join(_systemd_arg(a) for a in command)}\n"
        f"EnvironmentFile={str(env_file.path).replace('%', '%%')}\n"  # a path, not words: no quoting
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )
    unit_path = _config_home(environ) / "systemd" / "user" / UNIT_NAME
    systemctl = ["systemctl", "--user"]
    return ServicePlan(
        Platform.LINUX,
        [env_file, ServiceFile(unit_path, unit, unit, 0o644)],
        start=[Step([*systemctl, "daemon-reload"]), Step([*systemctl, "enable", UNIT_NAME]), Step([*systemctl, "restart", UNIT_NAME])],
        stop=[Step([*systemctl, "disable", "--now", UNIT_NAME])],
        query=[*systemctl, "is-active", UNIT_NAME],
        notes=[
            f"its log: {JOURNAL_COMMAND}",
            "to keep it running while you are logged out: loginctl enable-linger",
        ],
    )


def _macos(command: list[str], names: list[str], environ: dict[str, str]) -> ServicePlan:
    import plistlib  # only a macOS install writes a plist (the whole help loads this module)

    present = {n: environ[n] for n in names if environ.get(n)}
    log_file = str(Path.home() / "Library" / "Logs" / "cursor-byok.log")
    agent: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": command,
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # restarted when it fails, not after a clean stop
        "EnvironmentVariables": present,
        "StandardOutPath": log_file,
        "StandardErrorPath": log_file,
    }
    text = plistlib.dumps(agent).decode()
    shown = plistlib.dumps({**agent, "EnvironmentVariables": dict.fromkeys(present, MASK)}).decode()
    path = Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    domain = f"gui/{os.getuid() if hasattr(os, 'getuid') else 0}"
    missing = [n for n in names if n not in present]
    return ServicePlan(
        Platform.MACOS,
        [ServiceFile(path, text, shown, 0o600)],
        # A loaded agent is booted out first: bootstrap refuses to load it twice.
        start=[Step(["launchctl", "bootout", f"{domain}/{LAUNCHD_LABEL}"], check=False), Step(["launchctl", "bootstrap", domain, str(path)])],
        stop=[Step(["launchctl", "bootout", f"{domain}/{LAUNCHD_LABEL}"])],
        query=["launchctl", "print", f"{domain}/{LAUNCHD_LABEL}"],
        notes=[f"{n} is not set: add it under EnvironmentVariables in {path}" for n in missing],
    )


def _windows(command: list[str], names: list[str]) -> ServicePlan:
    task = subprocess.list2cmdline(command)
    return ServicePlan(
        Platform.WINDOWS,
        [],
        start=[Step(["schtasks", "/Create", "/F", "/SC", "ONLOGON", "/RL", "LIMITED", "/TN", TASK_NAME, "/TR", task])],
        stop=[Step(["schtasks", "/Delete", "/F", "/TN", TASK_NAME])],
        query=["schtasks", "/Query", "/TN", TASK_NAME],
        notes=[f"set {n} once for your user first: setx {n} <value>" for n in names]
        + ['if schtasks answers "Access is denied", run it from an administrator prompt'],
        run_commands=False,
    )


def service_plan(cfg: Config, cfg_file: Path, platform: Platform, environ: dict[str, str]) -> ServicePlan:
    command = serve_command(cfg_file, platform)
    names = key_variables(cfg, environ)
    if platform is Platform.LINUX:
        plan = _linux(command, names, environ)
    elif platform is Platform.MACOS:
        plan = _macos(command, names, environ)
    else:
        plan = _windows(command, names)
    plan.warnings = _checkout_warnings(command)
    return plan


def _shell_line(cmd: list[str], platform: Platform) -> str:
    return subprocess.list2cmdline(cmd) if platform is Platform.WINDOWS else shlex.join(cmd)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(cmd, 127, "", f"cannot run {cmd[0]}: {exc}")


def _run_all(steps: list[Step], plan: ServicePlan, what: str, *, force: bool = False, hint: str = "") -> None:
    """Run `steps` in order; the first that fails is one line naming what to run once it works.
    With `force` that failure is a warning and the rest of the steps are skipped."""
    for i, step in enumerate(steps):
        done = _run(step.argv)
        if done.returncode != 0 and step.check:
            why = (done.stderr or done.stdout).strip().splitlines()
            failed = f"`{_shell_line(step.argv, plan.platform)}` failed: {why[0] if why else f'exit {done.returncode}'}"
            if force:
                echo(f"{PROG}: warning: {failed} (--force: going on)", file=sys.stderr)
                return
            rest = "; ".join(_shell_line(s.argv, plan.platform) for s in steps[i:])
            raise CommandError(f"{what}, but {failed} (once that works, run: {rest}){hint}")


def _write(file: ServiceFile) -> bool:
    """Write one file with its mode from the start; False when an existing one is kept."""
    if file.keep_existing and file.path.exists():
        return False
    file.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.path.with_name(f".{file.path.name}.new")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file.mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(file.text)
    os.chmod(tmp, file.mode)  # the umask may have taken bits away
    os.replace(tmp, file.path)
    return True


def _plan_for(args: argparse.Namespace) -> tuple[Config, ServicePlan]:
    platform = Platform(args.platform) if args.platform else Platform.current()
    if platform is not Platform.current() and not args.dry_run:
        raise CommandError(f"--platform {platform.value} is not this machine's: add --dry-run to see its files")
    cfg = load_config(args)
    return cfg, service_plan(cfg, config_path(args.config).absolute(), platform, dict(os.environ))


def _warn(plan: ServicePlan) -> None:
    for warning in plan.warnings:
        echo(f"{PROG}: warning: {warning}", file=sys.stderr)


def _print_plan(plan: ServicePlan, steps: list[Step]) -> None:
    _warn(plan)
    for file in plan.files:
        echo(f"# {file.path} (mode {file.mode:04o})")
        echo(file.shown.rstrip("\n"))
        echo()
    if steps:
        echo("# then run:" if plan.run_commands else "# run:")
        for step in steps:
            echo(_shell_line(step.argv, plan.platform))
    for note in plan.notes:
        echo(f"note: {note}")


def cmd_service_install(args: argparse.Namespace) -> int:
    _, plan = _plan_for(args)
    if args.dry_run or not plan.run_commands:
        _print_plan(plan, plan.start)
        return 0
    _warn(plan)
    for file in plan.files:
        echo(f"{'wrote' if _write(file) else 'kept existing'} {file.path}")
    _run_all(plan.start, plan, "the service files are written")
    echo("installed and started: `cursor-byok service status` shows its state")
    for note in plan.notes:
        echo(f"note: {note}")
    return 0


def cmd_service_uninstall(args: argparse.Namespace) -> int:
    _, plan = _plan_for(args)
    definitions = [f for f in plan.files if not f.keep_existing]
    if args.dry_run or not plan.run_commands:
        echo("# run:" if not plan.run_commands else "# would run:")
        for step in plan.stop:
            echo(_shell_line(step.argv, plan.platform))
        for file in definitions:
            echo(f"# would remove {file.path}")
        return 0
    force_hint = " (`cursor-byok service uninstall --force` removes its files anyway)"
    if any(f.path.exists() for f in definitions):
        _run_all(plan.stop, plan, "the service is still installed", force=args.force, hint=force_hint)
    else:
        echo("the service is not installed")
    for file in definitions:
        if file.path.exists():
            file.path.unlink()
            echo(f"removed {file.path}")
    if plan.platform is Platform.LINUX:  # daemon-reload forgets the unit
        _run_all(plan.start[:1], plan, "the unit file is removed", force=args.force)
    for file in plan.files:
        if file.keep_existing and file.path.exists():
            echo(f"kept {file.path} (it holds your keys: delete it if you no longer need it)")
    return 0


def cmd_service_status(args: argparse.Namespace) -> int:
    cfg, plan = _plan_for(args)
    definition = next((f for f in plan.files if not f.keep_existing), None)
    if definition is not None:
        state = "not installed"
        if definition.path.exists():
            same = definition.path.read_text(encoding="utf-8") == definition.text
            state = "installed" if same else "installed for another installation or config (run `cursor-byok service install`)"
        echo(f"service file: {definition.path}: {state}")
    if plan.run_commands:
        done = _run(plan.query)
        lines = (done.stdout or done.stderr).strip().splitlines()
        echo(f"{_shell_line(plan.query, plan.platform)}: {lines[0] if lines else f'exit {done.returncode}'}")
    else:
        echo(f"check it with: {_shell_line(plan.query, plan.platform)}")
    if plan.platform is Platform.LINUX:
        echo(f"log: {JOURNAL_COMMAND}")
    answering = _server_answers(cfg)
    echo(f"server {gateway_url(cfg)}: {'answering' if answering else 'not answering'}")
    return 0 if answering else 3


def _server_answers(cfg: Config) -> bool:
    import httpx

    try:
        return httpx.get(gateway_url(cfg) + GATEWAY_HEALTH_PATH, timeout=1.0, trust_env=False).status_code == 204
    except httpx.HTTPError:
        return False


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    service = sub.add_parser("service", help="run the server at login (systemd user unit, launchd agent, Task Scheduler)")
    service_sub = service.add_subparsers(dest="service_command", metavar="ACTION", required=True)
    options = argparse.ArgumentParser(add_help=False, parents=[common])
    options.add_argument("--dry-run", action="store_true", help="print the files and commands; change nothing")
    options.add_argument("--platform", choices=[p.value for p in Platform], help="another OS's files and commands (with --dry-run)")
    service_sub.add_parser("install", parents=[options], help="write the service files and start it").set_defaults(handler=cmd_service_install)
    uninstall = service_sub.add_parser("uninstall", parents=[options], help="stop it and remove the service files")
    uninstall.add_argument("--force", action="store_true", help="remove the files even where stopping it fails (no systemd, launchd refusing)")
    uninstall.set_defaults(handler=cmd_service_uninstall)
    service_sub.add_parser("status", parents=[options], help="installed? running? (exit 0 when the server answers, else 3)").set_defaults(handler=cmd_service_status)
