"""docs/first-hour.md's transcript: every command of the walkthrough run for real in a fresh clone,
as a new user (HOME an empty directory, a plain PATH), with its output.

    python3 scripts/first_hour.py --repo . --branch main --work /tmp/first-hour > transcript.md

Needs ports 8787 and 11500 free. pip keeps the machine's settings (index, download cache).
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# pip's progress lines, folded into a count in the transcript
_PIP_NOISE = re.compile(
    r"^\s*(Collecting|Downloading|Using cached|Requirement already|Obtaining|Installing build|Getting requirements|"
    r"Preparing|Building|Created wheel|Stored in|Attempting|Found existing|Uninstalling|Successfully uninstalled|"
    r"Checking if|  Installing|Looking in|WARNING: Location|Processing|\S+ \S+/\S+ .*(kB|MB)|━)"
)
FIRST_TURN = """.venv/bin/python - <<'EOF'
import asyncio, uuid
from tests.harness.ide import ScriptedIDE, run_request

async def main():
    ide = ScriptedIDE("http://127.0.0.1:8787", "/tmp")
    try:
        log = await ide.turn(run_request("What is cursor-byok?", model="local", conversation_id=str(uuid.uuid4())))
    finally:
        await ide.close()
    print("answer:", log.text)
    print("error:", log.terminal)

asyncio.run(main())
EOF"""
CONFIG_WITH_TYPOS = """mkdir -p ~/.config/cursor-byok && cat > ~/.config/cursor-byok/config.toml <<'EOF'
[[models]]
id = "local"
provider = "openai-chatt"
base_url = "http://127.0.0.1:11500/v1"
model = "stand-in"
contxt_window = 32000
EOF
cursor-byok config validate"""


def fold_pip(text: str) -> str:
    out: list[str] = []
    run = 0
    for line in text.splitlines():
        if _PIP_NOISE.match(line):
            run += 1
            continue
        if run:
            out.append(f"[... {run} lines of pip progress ...]")
            run = 0
        out.append(line)
    if run:
        out.append(f"[... {run} lines of pip progress ...]")
    return "\n".join(out)


class Walkthrough:
    """A new user's shell session; each command and its output become one section."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.home = work / "home"
        self.home.mkdir(parents=True)
        self.cwd = work
        self.env = {
            "HOME": str(self.home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb",
            **{name: value for name, value in os.environ.items() if name.startswith("PIP_")},
        }
        self.env.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
        self.sections: list[str] = []
        self.running: dict[str, tuple[subprocess.Popen[bytes], int]] = {}  # name → process, log shown so far

    def _section(self, title: str, note: str, body: str, tail: str = "") -> None:
        self.sections.append(f"### {title}\n\n{note + chr(10) + chr(10) if note else ''}```console\n{body}\n```\n{tail}")

    def step(self, title: str, shown: str, command: str = "", *, note: str = "", fold: bool = False) -> None:
        """Run `command` (`shown` when empty) to its end."""
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", command or shown], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=900)
        took = time.monotonic() - started
        text = (done.stdout + done.stderr).rstrip("\n")
        status = f"exit status {done.returncode} · " if done.returncode else ""
        self._section(title, note, f"$ {shown}\n{fold_pip(text) if fold else text}", f"\n{status}({took:.1f} s)\n")

    def start(self, name: str, shown: str, command: str, ready: str, *, title: str, note: str = "", fold: bool = False) -> None:
        """A command that keeps running: shown up to the line holding `ready` (and a second after)."""
        log_path = self.work / f"{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(["bash", "-c", "exec " + command], cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 900
        while ready not in log_path.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # as a person watches a terminal; nothing else waits on this
        time.sleep(1.0)
        text = log_path.read_text()
        self.running[name] = (proc, len(text))
        self._section(title, note, f"$ {shown}\n{fold_pip(text.rstrip()) if fold else text.rstrip()}")

    def stop(self, name: str, title: str) -> None:
        """Ctrl-C to a command `start` began; shows what it printed since it was last shown."""
        proc, shown = self.running.pop(name)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
        later = (self.work / f"{name}.log").read_text()[shown:].strip("\n")
        note = "What it printed since, then Ctrl-C:" if later else "Ctrl-C:"
        self._section(title, note, f"{later}\n^C" if later else "^C")


def run(repo: str, branch: str, work: Path) -> str:
    w = Walkthrough(work)
    source = str(Path(repo).absolute()) if Path(repo).exists() else repo
    w.step("Clone", f"git clone -b {branch} {repo} cursor-byok && cd cursor-byok",
           f"git clone -q -b {branch} {source} cursor-byok && cd cursor-byok && git log --oneline -1")
    w.cwd = work / "cursor-byok"
    w.start("make-serve", "make serve", "make serve", "INFO cursor_byok.gateway: serving", title="Set up and start: `make serve`", fold=True,
            note="Runtime dependencies only, pip's progress shown (folded here), then the server and its banner.")
    w.stop("make-serve", "Stop it")
    w.step("The command the banner names", ".venv/bin/cursor-byok --version")
    w.step("Put it on PATH: `make install`", "make install", fold=True,
           note="A venv of its own in ~/.local/share/cursor-byok-venv and a link in ~/.local/bin, which is not on this shell's PATH yet: it says so.")
    w.env["PATH"] = f"{w.home}/.local/bin:{w.env['PATH']}"
    w.step("As it says: `~/.local/bin` on PATH", 'export PATH="$HOME/.local/bin:$PATH"; cursor-byok --version', "cursor-byok --version")
    w.step("No arguments: the help", "cursor-byok")
    w.step("Shell completion", "cursor-byok completion bash > ~/.local/share/bash-completion/completions/cursor-byok",
           "mkdir -p ~/.local/share/bash-completion/completions && cursor-byok completion bash > ~/.local/share/bash-completion/completions/cursor-byok"
           " && wc -l ~/.local/share/bash-completion/completions/cursor-byok")
    w.step("Where the config goes", "cursor-byok config path")
    w.step("A config for a local model, with two typos", CONFIG_WITH_TYPOS)
    w.step("Fix both, validate again", "sed -i -e 's/openai-chatt/openai-chat/' -e 's/contxt_window/context_window/' ~/.config/cursor-byok/config.toml && cursor-byok config validate")
    w.start("stand-in", "python3 scripts/stand_in_provider.py --port 11500 &", "python3 -u scripts/stand_in_provider.py --port 11500", "stand-in provider:",
            title="A local stand-in provider (OpenAI Chat Completions)",
            note="In place of Ollama, vLLM or a hosted API: `scripts/stand_in_provider.py` answers every chat completion with one sentence.")
    w.step("One prompt to the model", 'cursor-byok models test local --prompt "ping"')
    w.start("serve", "cursor-byok serve &", "cursor-byok serve", "INFO cursor_byok.gateway: serving", title="Start the server")
    w.step("Check the chain", "cursor-byok doctor")
    w.step("The dashboard is where the banner says", "curl -s http://127.0.0.1:8787/ ; curl -sI http://127.0.0.1:8787/ui | head -3")
    w.step("A turn, answered by the stand-in", FIRST_TURN,
           note="Cursor itself is not on this machine: the project's scripted IDE (`tests/harness/ide.py`) sends the turn as Cursor does (RunSSE + BidiAppend).")
    w.step("The turn, as stored", "cursor-byok conversations list && cursor-byok usage")
    w.stop("serve", "Stop the server")
    w.stop("stand-in", "Stop the stand-in")
    return "\n".join(w.sections)


def main() -> None:
    cli = argparse.ArgumentParser(description="run the first-hour walkthrough and print its transcript")
    cli.add_argument("--repo", required=True, help="what to clone (a path or URL)")
    cli.add_argument("--branch", default="main", help="the branch to clone (default: %(default)s)")
    cli.add_argument("--work", type=Path, required=True, help="an empty directory to work in")
    args = cli.parse_args()
    sys.stdout.write(run(args.repo, args.branch, args.work.absolute()) + "\n")


if __name__ == "__main__":
    main()
