"""`cursor-byok ca init|show|install`: the local CA the proxy signs *.cursor.sh certificates with."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from .common import CommandError, echo, load_config


def cmd_ca_init(args: argparse.Namespace) -> int:
    from ..interceptor import CAError, LocalCA

    cfg = load_config(args)
    try:
        if args.rotate and LocalCA.exists(cfg.data_path):
            return _rotate(cfg.data_path)
        ca, created = LocalCA.load_or_create(cfg.data_path)
    except CAError as exc:
        raise CommandError(str(exc)) from None
    echo(f"{'created' if created else 'exists'}: {ca.paths.cert}")
    echo(f"sha256 fingerprint: {ca.fingerprint}")
    echo(f"valid until: {ca.not_valid_after:%Y-%m-%d}")
    if created:
        echo("next: `cursor-byok ca install` shows the command that makes your system trust it")
    elif not ca.name_constrained:
        echo(
            "warning: this CA (made by an older release) can sign for any host; "
            "replace it with one limited to *.cursor.sh: `cursor-byok ca init --rotate`",
            file=sys.stderr,
        )
    return 0


def _rotate(data_dir: Path) -> int:
    from ..interceptor import LocalCA

    ca, old = LocalCA.rotate(data_dir)
    echo(f"replaced: {ca.paths.cert} (the old key is deleted)")
    echo(f"old sha256 fingerprint: {old or 'unreadable'}")
    echo(f"new sha256 fingerprint: {ca.fingerprint} (signs only for *.cursor.sh)")
    echo("next: trust the new CA with `cursor-byok ca install --run` (on Linux it replaces the old file); on macOS "
         "delete the old \"cursor-byok local CA\" in Keychain Access, on Windows "
         "`certutil -delstore Root \"cursor-byok local CA\"` first; then restart `cursor-byok serve` and Cursor")
    return 0


def cmd_ca_show(args: argparse.Namespace) -> int:
    from ..interceptor import CAError, LocalCA, ca_trust_state

    cfg = load_config(args)
    try:
        ca = LocalCA.load(cfg.data_path)
    except CAError as exc:
        raise CommandError(str(exc)) from None
    if args.pem:
        sys.stdout.write(ca.cert_pem.decode("ascii"))
        return 0
    trust = ca_trust_state(cfg.data_path)
    echo(f"certificate: {ca.paths.cert}")
    echo(f"key: {ca.paths.key} (never leaves this machine)")
    echo(f"sha256 fingerprint: {ca.fingerprint}")
    echo(f"valid until: {ca.not_valid_after:%Y-%m-%d}")
    echo(f"signs for: {'*.cursor.sh only (name constraints)' if ca.name_constrained else 'any host (run `cursor-byok ca init --rotate`)'}")
    echo(f"trust: {trust.state.value}{f' ({trust.detail})' if trust.detail else ''}")
    return 0


def cmd_ca_install(args: argparse.Namespace) -> int:
    from ..interceptor import (
        CAError,
        CAState,
        LocalCA,
        ca_trust_state,
        format_commands,
        trust_commands,
    )

    cfg = load_config(args)
    try:
        ca, created = LocalCA.load_or_create(cfg.data_path)
    except CAError as exc:
        raise CommandError(str(exc)) from None
    if created:
        echo(f"created: {ca.paths.cert} (sha256 {ca.fingerprint})", file=sys.stderr)
    commands = trust_commands(ca.paths.cert)
    if not args.run:
        for line in format_commands(commands):
            echo(line)
        if sys.platform.startswith("linux"):
            echo(
                "# optional, if Cursor still rejects the certificate (Chromium's NSS store):\n"
                f"# certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n cursor-byok -i {ca.paths.cert}"
            )
        return 0
    for argv in commands:
        echo(f"running: {format_commands([argv])[0]}", file=sys.stderr)
        try:
            done = subprocess.run(argv, check=False)
        except OSError as exc:
            raise CommandError(f"{argv[0]}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            raise CommandError(f"`{format_commands([argv])[0]}` failed with exit status {done.returncode}")
    trust = ca_trust_state(cfg.data_path)
    echo(f"trust: {trust.state.value}{f' ({trust.detail})' if trust.detail else ''}")
    return 0 if trust.state in (CAState.TRUSTED, CAState.UNKNOWN) else 1


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    ca = sub.add_parser("ca", help="the local CA the proxy signs *.cursor.sh certificates with")
    ca_sub = ca.add_subparsers(dest="ca_command", metavar="ACTION", required=True)
    p = ca_sub.add_parser("init", parents=[common], help="create the CA if missing; print path and fingerprint")
    p.add_argument("--rotate", action="store_true", help="replace the existing CA with a new one (re-trust it afterwards)")
    p.set_defaults(handler=cmd_ca_init)
    p = ca_sub.add_parser("show", parents=[common], help="path, fingerprint and trust state")
    p.add_argument("--pem", action="store_true", help="print the certificate (PEM) only")
    p.set_defaults(handler=cmd_ca_show)
    p = ca_sub.add_parser("install", parents=[common], help="print (or --run) the command that trusts the CA")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--print", action="store_true", dest="print_only", help="print the commands (default)")
    mode.add_argument("--run", action="store_true", help="run them (asks for sudo / admin rights)")
    p.set_defaults(handler=cmd_ca_install)
