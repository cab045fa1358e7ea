"""A contract fake of the ``herdr`` executable, which the Herdr host is tested against.

Herdr (the terminal multiplexer) cannot be installed in this environment, so this script stands in
for it. It is a *contract* fake: it implements exactly the command lines
:class:`runner.agents.herdr.HerdrHost` runs, with the answers we assume Herdr gives (checked against
Herdr's CLI source and published notes, not against a running Herdr), and rejects anything else
with exit status 2, so a host that drifts from the contract fails its tests::

    tab create [--workspace W] --cwd DIR --label NAME --no-focus
    agent start NAME --kind K --pane P [--timeout MS] [-- ARGS...]
    agent get T | agent list
    agent prompt T TEXT --wait --until working --timeout MS
    agent wait T --until STATUS --timeout MS
    agent read T --source visible|recent|recent-unwrapped|detection --lines N
    pane close P

``T`` is a pane id or an agent name. Success is ``{"id", "result": {"type", ...}}`` on stdout with
exit 0; a refusal is ``{"id", "error": {"code", "message"}}`` on stderr with exit 1; a usage error is
plain text on stderr with exit 2.

State lives in ``$FAKE_HERDR_STATE/state.json`` under an ``fcntl`` lock, so any number of fake
processes (a prompt, several waits) share one world. Every invocation appends its argv and pid to
``argv.log`` there. Time is simulated lazily: each invocation first brings every agent up to date.

Agents: ``agent start`` makes an ``idle`` agent (at seq 2, as if its launch had been observed);
``agent prompt`` moves an idle or done agent to ``working`` at seq + 1, and after its work time it is
``done`` at seq + 2 (``blocked`` if the prompt has a ``block`` line) with its output. The prompt is
read like the demo agent's: ``echo TEXT`` lines are output, ``sleep N`` lines are work time. Work
time, in order: the agent's ``work_seconds`` in the state file, the sum of its ``sleep`` lines, or
``$FAKE_HERDR_WORK_SECONDS`` (default 0.05). ``agent wait`` polls the state every 5 ms.

Test controls: ``$FAKE_HERDR_PANE_BUSY=N`` makes each new pane answer ``agent_pane_busy`` to its
first N starts; ``$FAKE_HERDR_KIND_FIELD=kind`` reports an agent's kind under ``kind`` instead of
``agent``; ``state["inject"]`` is a list of canned answers, each
``{"command": "agent get", "times": N, "error": {"code", "message"}}`` (or ``"usage": TEXT``, or raw
``"stdout"``/``"stderr"``/``"exit"``; ``"sleep": S`` delays it) used before the real handling.

Only the standard library is used: the fixture runs this with ``python -S``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STATUSES = ("idle", "working", "blocked", "done", "unknown")
SOURCES = ("visible", "recent", "recent-unwrapped", "detection")
KINDS = ("claude", "codex", "script", "pi", "opencode", "gemini", "amp")
NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
START_SEQ = 2
POLL = 0.005
BLOCKED_MARKER = "CORRAL-BLOCKED"


class Usage(Exception):
    """The command line is wrong: exit 2."""


class Refused(Exception):
    """Herdr refuses: a JSON error on stderr, exit 1."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- state ---------------------------------------------------------------------------------------


def state_dir() -> Path:
    return Path(os.environ["FAKE_HERDR_STATE"])


def initial_state() -> dict[str, Any]:
    # w1:p1 is the pane corral itself would run in; new tabs start at w1:t2 / w1:p2.
    return {
        "workspaces": {"w1": {"next_tab": 2, "next_pane": 2}},
        "panes": {"w1:p1": {"pane_id": "w1:p1", "tab_id": "w1:t1", "workspace_id": "w1", "cwd": "/", "agent": None}},
        "inject": [],
        "kinds": list(KINDS),
    }


@contextmanager
def locked(directory: Path | None = None) -> Iterator[dict[str, Any]]:
    """The state, exclusively, brought up to date, and written back after the block.

    Also after a refusal, which may have changed it (a busy pane counts down).
    """
    directory = directory or state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = directory / "state.json"
        state = json.loads(path.read_text()) if path.exists() else initial_state()
        advance(state, time.time())
        try:
            yield state
        except Refused:
            save(directory, state)
            raise
        save(directory, state)


def save(directory: Path, state: dict[str, Any]) -> None:
    tmp = directory / "state.json.tmp"
    tmp.write_text(json.dumps(state))
    tmp.replace(directory / "state.json")


def advance(state: dict[str, Any], now: float) -> None:
    """Finish every agent whose work time is up."""
    for pane in state["panes"].values():
        agent = pane.get("agent")
        if agent and agent["status"] == "working" and agent["work_until"] is not None and agent["work_until"] <= now:
            agent["status"] = agent["outcome"]
            agent["seq"] += 1
            agent["output"] += agent["pending"]
            agent["pending"] = []
            agent["work_until"] = None


def log(argv: list[str]) -> None:
    with (state_dir() / "argv.log").open("a") as handle:
        handle.write(json.dumps({"argv": argv, "pid": os.getpid(), "t": time.time()}) + "\n")


# --- answers -------------------------------------------------------------------------------------


def reply(request: str, result: dict[str, Any]) -> int:
    sys.stdout.write(json.dumps({"id": f"cli:{request}", "result": result}) + "\n")
    return 0


def agent_info(pane: dict[str, Any]) -> dict[str, Any]:
    agent = pane["agent"]
    info = {
        "pane_id": pane["pane_id"],
        "terminal_id": f"term_{pane['pane_id'].replace(':', '_')}",
        "workspace_id": pane["workspace_id"],
        "tab_id": pane["tab_id"],
        "cwd": pane["cwd"],
        "foreground_cwd": pane["cwd"],
        "focused": False,
        "name": agent["name"],
        "agent_status": agent["status"],
        "state_change_seq": agent["seq"],
        "completion_seq": agent["seq"] if agent["status"] in ("idle", "done") else None,
    }
    info[os.environ.get("FAKE_HERDR_KIND_FIELD", "agent")] = agent["kind"]
    return info


def find_agent(state: dict[str, Any], target: str) -> dict[str, Any]:
    for pane in state["panes"].values():
        agent = pane.get("agent")
        if agent and (pane["pane_id"] == target or agent["name"] == target):
            return pane
    raise Refused("agent_not_found", f"agent {target} not found")


# --- command lines -------------------------------------------------------------------------------

# (words) -> (positionals, {flag: takes_value}, required flags, accepts "-- args")
GRAMMAR: dict[tuple[str, str], tuple[int, dict[str, bool], set[str], bool]] = {
    ("tab", "create"): (
        0,
        {"--workspace": True, "--cwd": True, "--label": True, "--no-focus": False},
        {"--cwd", "--label", "--no-focus"},
        False,
    ),
    ("agent", "start"): (1, {"--kind": True, "--pane": True, "--timeout": True}, {"--kind", "--pane"}, True),
    ("agent", "get"): (1, {}, set(), False),
    ("agent", "list"): (0, {}, set(), False),
    ("agent", "prompt"): (
        2,
        {"--wait": False, "--until": True, "--timeout": True},
        {"--wait", "--until", "--timeout"},
        False,
    ),
    ("agent", "wait"): (1, {"--until": True, "--timeout": True}, {"--until", "--timeout"}, False),
    ("agent", "read"): (1, {"--source": True, "--lines": True}, {"--source", "--lines"}, False),
    ("pane", "close"): (1, {}, set(), False),
}


def parse(argv: list[str]) -> tuple[tuple[str, str], list[str], dict[str, str], list[str]]:
    """``(words, positionals, flags, extra)``; positionals come first, as Herdr's CLI takes them."""
    words = (argv[0], argv[1]) if len(argv) >= 2 else ("", "")
    if words not in GRAMMAR:
        raise Usage(f"unknown command: {' '.join(argv[:2]) or '(none)'}")
    count, flags, required, takes_extra = GRAMMAR[words]
    rest = argv[2:]
    if len(rest) < count:
        raise Usage(f"usage: herdr {' '.join(words)} needs {count} argument(s)")
    positionals, rest = rest[:count], rest[count:]
    found: dict[str, str] = {}
    extra: list[str] = []
    index = 0
    while index < len(rest):
        token = rest[index]
        if token == "--" and takes_extra:
            extra = rest[index + 1 :]
            break
        if token not in flags:
            raise Usage(f"unknown option: {token}")
        if token in found:
            raise Usage(f"{token} given twice")
        if flags[token]:
            if index + 1 >= len(rest):
                raise Usage(f"missing value for {token}")
            found[token] = rest[index + 1]
            index += 2
        else:
            found[token] = ""
            index += 1
    missing = sorted(required - set(found))
    if missing:
        raise Usage(f"missing required {', '.join(missing)}")
    for flag in ("--timeout", "--lines"):
        if flag in found and not found[flag].isdigit():
            raise Usage(f"invalid {flag}: {found[flag]}")
    if "--until" in found and found["--until"] not in STATUSES:
        raise Usage(f"invalid status: {found['--until']}")
    if "--source" in found and found["--source"] not in SOURCES:
        raise Usage(f"invalid source: {found['--source']}")
    return words, positionals, found, extra


def injected(state: dict[str, Any], words: tuple[str, str]) -> dict[str, Any] | None:
    """Take the first canned answer for this command, if a test left one."""
    for entry in state["inject"]:
        if entry["command"] == " ".join(words) and entry.get("times", 1) > 0:
            entry["times"] = entry.get("times", 1) - 1
            state["inject"] = [e for e in state["inject"] if e.get("times", 1) > 0]
            return entry
    return None


def answer_injected(entry: dict[str, Any], words: tuple[str, str]) -> int:
    time.sleep(entry.get("sleep", 0))
    if "error" in entry:
        raise Refused(entry["error"]["code"], entry["error"].get("message", ""))
    if "usage" in entry:
        raise Usage(entry["usage"])
    sys.stdout.write(entry.get("stdout", ""))
    sys.stderr.write(entry.get("stderr", ""))
    return int(entry.get("exit", 0))


# --- commands ------------------------------------------------------------------------------------


def tab_create(state: dict[str, Any], flags: dict[str, str]) -> int:
    workspace_id = flags.get("--workspace", "w1")
    workspace = state["workspaces"].get(workspace_id)
    if workspace is None:
        raise Refused("workspace_not_found", f"workspace {workspace_id} not found")
    if not Path(flags["--cwd"]).is_dir():
        raise Refused("invalid_cwd", f"{flags['--cwd']} is not a directory")
    tab_id = f"{workspace_id}:t{workspace['next_tab']}"
    pane_id = f"{workspace_id}:p{workspace['next_pane']}"
    workspace["next_tab"] += 1
    workspace["next_pane"] += 1  # closed ids are never reused
    pane = {
        "pane_id": pane_id,
        "tab_id": tab_id,
        "workspace_id": workspace_id,
        "cwd": flags["--cwd"],
        "label": flags["--label"],
        "busy_left": int(os.environ.get("FAKE_HERDR_PANE_BUSY", "0")),
        "agent": None,
    }
    state["panes"][pane_id] = pane
    tab = {"tab_id": tab_id, "workspace_id": workspace_id, "label": flags["--label"], "focused": False}
    root = {k: pane[k] for k in ("pane_id", "tab_id", "workspace_id", "cwd")}
    return reply("tab:create", {"type": "tab_created", "tab": tab, "root_pane": root})


def agent_start(state: dict[str, Any], name: str, flags: dict[str, str], extra: list[str]) -> int:
    if not NAME.fullmatch(name):
        raise Refused("invalid_agent_name", f"invalid agent name {name}")
    pane = state["panes"].get(flags["--pane"])
    if pane is None:
        raise Refused("pane_not_found", f"pane {flags['--pane']} not found")
    kind = flags["--kind"]
    if kind not in state["kinds"]:
        raise Refused("unsupported_agent_kind", f"unsupported interactive agent kind {kind}")
    if any(p.get("agent") and p["agent"]["name"] == name for p in state["panes"].values()):
        raise Refused("agent_name_taken", f"agent name {name} is already taken")
    if pane.get("busy_left", 0) > 0 or pane.get("agent"):
        pane["busy_left"] = max(0, pane.get("busy_left", 0) - 1)
        raise Refused("agent_pane_busy", f"pane {pane['pane_id']} is not an available shell")
    pane["agent"] = {
        "name": name,
        "kind": kind,
        "args": extra,
        "status": "idle",
        "seq": START_SEQ,
        "work_until": None,
        "work_seconds": None,
        "outcome": "done",
        "pending": [],
        "output": [],
    }
    return reply("agent:start", {"type": "agent_started", "agent": agent_info(pane), "argv": [kind, *extra]})


def agent_prompt(state: dict[str, Any], target: str, text: str, flags: dict[str, str]) -> int:
    if flags["--until"] != "working":
        raise Usage("this fake only implements --until working for agent prompt")
    pane = find_agent(state, target)
    agent = pane["agent"]
    if agent["status"] == "blocked":
        raise Refused("agent_blocked", f"agent {agent['name']} is blocked")
    if agent["status"] == "unknown":
        raise Refused("agent_not_ready", f"agent {agent['name']} is not ready")
    if agent["status"] == "working":
        # Herdr types into a working agent too; no state change follows within the wait.
        raise Refused("agent_prompt_stalled", f"state_change_seq remained {agent['seq']}")
    pending: list[str] = []
    sleep = 0.0
    outcome = "done"
    for line in (raw.strip() for raw in text.splitlines()):
        word, _, rest = line.partition(" ")
        if word == "echo":
            pending.append(rest)
        elif word == "sleep":
            sleep += float(rest or 0)
        elif word == "block":
            pending.append(f"{BLOCKED_MARKER}: the fake agent needs an operator's decision")
            outcome = "blocked"
    pending.append(f"fake agent: handled {len(text)} characters")
    if agent["work_seconds"] is not None:
        work = float(agent["work_seconds"])
    elif sleep:
        work = sleep
    else:
        work = float(os.environ.get("FAKE_HERDR_WORK_SECONDS", "0.05"))
    agent.update(status="working", seq=agent["seq"] + 1, work_until=time.time() + work, outcome=outcome)
    agent["pending"] = pending
    agent.setdefault("prompts", []).append(text)
    return reply("agent:prompt", {"type": "agent_prompted", "agent": agent_info(pane)})


def agent_wait(target: str, flags: dict[str, str]) -> int:
    """Block (polling the shared state) until the agent shows the status; ``timeout`` error if not."""
    deadline = time.monotonic() + int(flags["--timeout"]) / 1000
    while True:
        with locked() as state:
            pane = find_agent(state, target)
            if pane["agent"]["status"] == flags["--until"]:
                return reply("agent:wait", {"type": "agent_waited", "agent": agent_info(pane)})
        if time.monotonic() >= deadline:
            raise Refused("timeout", f"timed out waiting for {target} to be {flags['--until']}")
        time.sleep(POLL)


def agent_read(state: dict[str, Any], target: str, flags: dict[str, str]) -> int:
    output = find_agent(state, target)["agent"]["output"]
    lines = int(flags["--lines"])
    shown = output[-lines:] if lines else []
    sys.stdout.write("".join(line + "\n" for line in shown))
    return 0


def pane_close(state: dict[str, Any], pane_id: str) -> int:
    if pane_id not in state["panes"]:
        raise Refused("pane_not_found", f"pane {pane_id} not found")
    del state["panes"][pane_id]
    return reply("pane:close", {"type": "ok"})


def run(argv: list[str]) -> int:
    words, positionals, flags, extra = parse(argv)
    if words == ("agent", "wait"):
        with locked() as state:
            entry = injected(state, words)
        return answer_injected(entry, words) if entry else agent_wait(positionals[0], flags)
    with locked() as state:
        entry = injected(state, words)
        if entry is None:
            if words == ("tab", "create"):
                return tab_create(state, flags)
            if words == ("agent", "start"):
                return agent_start(state, positionals[0], flags, extra)
            if words == ("agent", "get"):
                return reply(
                    "agent:get", {"type": "agent_info", "agent": agent_info(find_agent(state, positionals[0]))}
                )
            if words == ("agent", "list"):
                agents = [agent_info(p) for p in state["panes"].values() if p.get("agent")]
                return reply("agent:list", {"type": "agent_list", "agents": agents})
            if words == ("agent", "prompt"):
                return agent_prompt(state, positionals[0], positionals[1], flags)
            if words == ("agent", "read"):
                return agent_read(state, positionals[0], flags)
            return pane_close(state, positionals[0])
    return answer_injected(entry, words)


def main() -> int:
    argv = sys.argv[1:]
    try:
        log(argv)
        return run(argv)
    except Usage as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except Refused as exc:
        request = ":".join(argv[:2])
        sys.stderr.write(
            json.dumps({"id": f"cli:{request}", "error": {"code": exc.code, "message": exc.message}}) + "\n"
        )
        return 1


# --- the test's side --------------------------------------------------------------------------------


class FakeHerdr:
    """A test's handle on one fake Herdr: the ``herdr`` executable, its state and its argv log.

    :meth:`install` writes ``bin/herdr``, a two-line script whose ``#!`` line is this interpreter
    (``-S``: the fake needs only the standard library) and which runs this file.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.state_dir = root / "state"

    @property
    def executable(self) -> Path:
        return self.bin / "herdr"

    def install(self) -> None:
        self.bin.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        script = str(Path(__file__).resolve())
        self.executable.write_text(
            f"#!{sys.executable} -S\nimport runpy\nrunpy.run_path({script!r}, run_name='__main__')\n"
        )
        self.executable.chmod(0o755)

    @contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        """Change the fake's world (under its lock), e.g. an agent's ``work_seconds``."""
        with locked(self.state_dir) as state:
            yield state

    def state(self) -> dict[str, Any]:
        with self.edit() as state:
            return state

    def agent(self, target: str) -> dict[str, Any]:
        """The fake's own record of one agent (``args``, ``prompts``, ``status``…)."""
        with self.edit() as state:
            return dict(find_agent(state, target)["agent"])

    def inject(self, command: str, times: int = 1, **answer: Any) -> None:
        """Make the next ``times`` calls of ``command`` (``"agent get"``) give a canned answer."""
        with self.edit() as state:
            state["inject"].append({"command": command, "times": times, **answer})

    def records(self) -> list[dict[str, Any]]:
        """Every invocation so far: ``{"argv", "pid", "t"}``, oldest first."""
        path = self.state_dir / "argv.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def calls(self, *prefix: str) -> list[list[str]]:
        """The argv of every invocation (those starting with ``prefix``, if given)."""
        argvs = [record["argv"] for record in self.records()]
        return [argv for argv in argvs if argv[: len(prefix)] == list(prefix)]

    def forget_calls(self) -> None:
        (self.state_dir / "argv.log").unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
