"""A contract fake of the ``herdr`` executable, modelled on Herdr 0.8.2's source.

Herdr (the terminal multiplexer) cannot be installed here, so this script stands in for it. It is a
*contract* fake: it implements the command lines :class:`runner.agents.herdr.HerdrHost` runs, with
the answers Herdr 0.8.2 gives (read in ``github.com/herdrdev/herdr`` at 0.8.2, for facts only), and
refuses anything else as Herdr's client does (plain text on stderr, exit status 2)::

    herdr --version                                                  -> "herdr 0.8.2"
    tab create [--workspace W] --cwd DIR --label NAME --no-focus
    agent start NAME --kind K --pane P [--timeout MS] [-- ARGS...]
    agent get T | agent list
    agent prompt T TEXT [--wait] [--until STATUS]... [--timeout MS]
    agent wait T [--until STATUS]... [--timeout MS]
    agent read T [--source visible|recent|recent-unwrapped|detection] [--lines N]
    pane close P                   (plus --if-terminal-id T --if-state-change-seq N: see below)

What it models, and where Herdr 0.8.2 says so:

- **Answers** (``src/cli.rs`` ``print_response``): success is one compact JSON line
  ``{"id":"cli:agent:get","result":{"type":"agent_info",...}}`` on stdout, exit 0; a refusal is
  ``{"id":...,"error":{"code","message"}}`` on stderr, exit 1; a usage error is plain text on stderr,
  exit 2 (``src/cli/agent.rs``, ``src/cli/pane.rs``). Result types: ``src/api/schema/response.rs``.
- **Agent records** (``src/api/schema/agents.rs`` ``AgentInfo``, ``src/app/agents.rs``
  ``agent_info``): ``terminal_id``, ``pane_id``, ``workspace_id``, ``tab_id``, ``agent_status``,
  ``state_change_seq``, ``revision``, ``focused`` always; ``name``, ``agent`` (the kind) and ``cwd``
  only when known (an unnamed agent is listed too); ``launch_pending``/``interactive_ready`` only
  when true.
- **One counter for the whole server** (``src/app/actions.rs``, ``next_agent_state_change_seq``):
  every status change of any agent increments it, and the changed agent's ``state_change_seq`` becomes
  its value; an agent's own ``state_change_seq`` therefore moves only when *it* changes, but by jumps.
  It starts at 0 with every server (``src/app/state.rs``) and an agent that never changed reports 0.
- **``revision``** is the pane's presentation revision (``src/terminal/state.rs``: title and metadata
  token changes), not a count of status changes; the fake bumps it when a prompt changes the title.
- **``terminal_id``** (``src/terminal/id.rs``) is allocated per terminal and never reused; a server
  restart gives every pane a new one, and the agents lose their names (:meth:`FakeHerdr.restart`).
- **Kinds** are parsed by the client (``src/cli/agent.rs`` ``agent_start``): an unknown one is plain
  text ``unsupported interactive agent kind: K`` with exit 2. (``script`` is accepted too: a test-only
  kind, so the contract suite can run the demo agent's directives; Herdr has none.)
- **Start** (``src/app/agents.rs`` ``start_agent``, ``src/cli/agent.rs`` ``wait_for_named_agent``):
  ``invalid_agent_name``, ``agent_name_taken``, ``agent_pane_not_found``, ``agent_pane_busy``,
  ``invalid_agent_timeout`` (over 3000 and at most 300000 ms; default 30000); then the client waits
  for the agent idle and ``interactive_ready``: ``timeout``, ``agent_kind_mismatch``,
  ``agent_name_not_found`` (the name no longer owns the terminal), ``agent_not_ready`` (blocked).
- **Prompt** (``src/app/api/agents.rs`` ``handle_agent_prompt``, ``src/api/wait.rs``
  ``prompt_agent``): ``empty_agent_prompt``, ``agent_not_found``, ``agent_blocked``,
  ``agent_not_ready`` (launch pending); a *working* agent is typed into. With ``--wait`` the client
  first waits up to min(timeout, 5000 ms) for any change past the prompt's seq (none:
  ``agent_prompt_stalled``, or ``timeout`` if the timeout was at most 5000 ms), then for ``--until``.
- **Wait** (``src/api/wait.rs`` ``wait_for_agent``): ``--until`` may repeat (default idle, done,
  blocked); it answers at once if the status already matches (no cursor), counts a status seen in
  passing, ends ``agent_not_running`` when the pane closes, the agent vanishes or its terminal
  changes, and ``timeout`` at its timeout (none: it waits for ever).
- **Close** (``src/app/api/panes.rs`` ``close_pane``): unconditional; ``pane_not_found``,
  ``confirmation_required`` (a worktree group; a test injects it). Herdr 0.8.2 has no conditional
  close (upstream issue 4031); :meth:`FakeHerdr.set_version` with ``conditional_close=True`` models a
  later one taking ``--if-terminal-id``/``--if-state-change-seq`` and answering
  ``precondition_failed``.

State lives in ``$FAKE_HERDR_STATE/state.json`` under an ``fcntl`` lock, so any number of fake
processes share one server. Every invocation appends its argv and pid to ``argv.log`` there. Time is
simulated lazily: each invocation first plays every due change of every agent, in time order, each
one incrementing the shared counter.

Agents started by corral: ``unknown`` while launching (``$FAKE_HERDR_LAUNCH_SECONDS``, default
0.02), then ``idle`` and interactive. A prompt makes an idle or done agent ``working`` a moment later
(``$FAKE_HERDR_REACT_SECONDS``, default 0.005; ``state["stall"]`` true: never), then after its work
time ``done`` (``blocked`` if the prompt has a ``block`` line) with its output. Prompt lines are read
like the demo agent's: ``echo TEXT`` is output, ``sleep N`` work time, ``wait-file PATH`` holds the
work until PATH (relative to the pane's cwd) exists, as the demo agent does (a test releases the
agent when it is done checking what a working agent refuses, rather than guessing a long enough
sleep). Work time: the agent's ``work_seconds``, else the sum of ``sleep`` lines, else
``$FAKE_HERDR_WORK_SECONDS`` (default 0.05).
Background agents (:meth:`FakeHerdr.add_background_agents`) flip between working and idle or done
on their own timers, so the counter moves under corral's feet.

Other test controls: ``$FAKE_HERDR_PANE_BUSY=N`` makes each new pane answer ``agent_pane_busy`` to
its first N starts; ``$FAKE_HERDR_DETECT_KIND=K`` makes a start detect kind K;
``state["inject"]`` holds canned answers, each ``{"command": "agent get", "times": N, "error":
{"code", "message"}}`` (or ``"usage": TEXT``, or raw ``"stdout"``/``"stderr"``/``"exit"``;
``"sleep": S`` delays it) used before the real handling.

Only the standard library is used: the fixture runs this with ``python -S``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

VERSION = "0.8.2"
STATUSES = ("idle", "working", "blocked", "done", "unknown")
DEFAULT_UNTIL = ("idle", "done", "blocked")
SOURCES = ("visible", "recent", "recent-unwrapped", "detection")
KINDS = ("claude", "codex", "pi", "opencode", "gemini", "amp", "cursor", "copilot", "script")
ALIASES = {"claude-code": "claude", "open-code": "opencode", "github-copilot": "copilot", "amp-local": "amp"}
NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
POLL = 0.005
HISTORY = 64
PROMPT_EFFECT_MS = 5_000  # src/api/wait.rs AGENT_PROMPT_EFFECT_TIMEOUT_MS
START_MIN_MS, START_MAX_MS, START_DEFAULT_MS = 3_000, 300_000, 30_000  # src/app/agents.rs
BLOCKED_MARKER = "CORRAL-BLOCKED"


class Usage(Exception):
    """The command line is wrong: plain text, exit 2."""


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
    state: dict[str, Any] = {
        "version": VERSION,
        "conditional_close": False,
        "lifetime": 1,
        "seq": 0,
        "next_terminal": 1,
        "workspaces": {"w1": {"next_tab": 2, "next_pane": 2}},
        "panes": {},
        "inject": [],
        "kinds": list(KINDS),
        "stall": False,
    }
    state["panes"]["w1:p1"] = new_pane(state, "w1:p1", "w1:t1", "w1", "/", "coordinator")
    return state


def new_pane(
    state: dict[str, Any], pane_id: str, tab_id: str, workspace_id: str, cwd: str, label: str
) -> dict[str, Any]:
    return {
        "pane_id": pane_id,
        "tab_id": tab_id,
        "workspace_id": workspace_id,
        "cwd": cwd,
        "label": label,
        "terminal_id": new_terminal_id(state),
        "busy_left": int(os.environ.get("FAKE_HERDR_PANE_BUSY", "0")),
        "agent": None,
    }


def new_terminal_id(state: dict[str, Any]) -> str:
    state["next_terminal"] += 1
    return f"term_{state['lifetime']:x}{state['next_terminal']:04x}"


def new_agent(name: str | None, kind: str | None, status: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "cwd_known": True,
        "status": status,
        "seq": 0,
        "revision": 0,
        "launch_until": None,
        "react_at": None,
        "work_until": None,
        "work_seconds": None,
        "work": 0.0,
        "hold": None,
        "outcome": "done",
        "pending": [],
        "output": [],
        "prompts": [],
        "typed_while_working": [],
        "history": [],
        "background": None,
        "args": [],
    }


@contextmanager
def locked(directory: Path | None = None) -> Iterator[dict[str, Any]]:
    """The state, exclusively, brought up to date, and written back after the block (also after a
    refusal, which may have changed it: a busy pane counts down)."""
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


def change(state: dict[str, Any], agent: dict[str, Any], status: str, when: float) -> None:
    """One status change: the server's counter moves and this agent's seq takes its value."""
    if agent["status"] == status:
        return
    state["seq"] += 1
    agent["status"] = status
    agent["seq"] = state["seq"]
    agent["history"] = [*agent["history"], [state["seq"], status, when]][-HISTORY:]


def due(agent: dict[str, Any]) -> tuple[float, str] | None:
    """The agent's next scheduled change: ``(when, what)``; work held by ``wait-file`` is not due."""
    keys = ("launch_until", "react_at") if agent.get("hold") else ("launch_until", "react_at", "work_until")
    candidates = [(agent[key], key) for key in keys if agent.get(key) is not None]
    if agent.get("background"):
        candidates.append((agent["background"]["next"], "background"))
    return min(candidates) if candidates else None


def advance(state: dict[str, Any], now: float) -> None:
    """Play every change that is due, of every agent, in time order."""
    for pane in state["panes"].values():
        agent = pane.get("agent")
        if agent and agent.get("hold") and (Path(pane["cwd"]) / agent["hold"]).exists():
            agent["hold"] = None  # released: the work ends now at the earliest (time is played lazily)
            if agent["work_until"] is not None:
                agent["work_until"] = max(agent["work_until"], now)
    while True:
        pending = [
            (d, pane["agent"]) for pane in state["panes"].values() if pane.get("agent") and (d := due(pane["agent"]))
        ]
        pending = [(d, a) for d, a in pending if d[0] <= now]
        if not pending:
            return
        (when, what), agent = min(pending, key=lambda item: item[0][0])
        if what == "launch_until":
            agent["launch_until"] = None
            change(state, agent, "idle", when)
        elif what == "react_at":
            agent["react_at"] = None
            change(state, agent, "working", when)
            agent["work_until"] = when + agent["work"]
        elif what == "work_until":
            agent["work_until"] = None
            change(state, agent, agent["outcome"], when)
            agent["output"] += agent["pending"]
            agent["pending"] = []
        else:
            background = agent["background"]
            background["next"] = when + background["period"]
            nxt = "working" if agent["status"] != "working" else background["settle"]
            change(state, agent, nxt, when)


def log(argv: list[str]) -> None:
    with (state_dir() / "argv.log").open("a") as handle:
        handle.write(json.dumps({"argv": argv, "pid": os.getpid(), "t": time.time()}) + "\n")


# --- answers -------------------------------------------------------------------------------------


def compact(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"))


def reply(request: str, result: dict[str, Any]) -> int:
    sys.stdout.write(compact({"id": request, "result": result}) + "\n")
    return 0


def agent_info(pane: dict[str, Any]) -> dict[str, Any]:
    agent = pane["agent"]
    info: dict[str, Any] = {"terminal_id": pane["terminal_id"]}
    if agent["name"] is not None:
        info["name"] = agent["name"]
    if agent["kind"] is not None:
        info["agent"] = agent["kind"]
    info.update(
        agent_status=agent["status"],
        workspace_id=pane["workspace_id"],
        tab_id=pane["tab_id"],
        pane_id=pane["pane_id"],
        focused=False,
    )
    if agent["launch_until"] is not None:
        info["launch_pending"] = True
    elif agent["status"] in ("idle", "done") and agent["background"] is None:
        info["interactive_ready"] = True
    info["state_change_seq"] = agent["seq"]
    if agent["cwd_known"]:
        info["cwd"] = pane["cwd"]
        info["foreground_cwd"] = pane["cwd"]
    info["revision"] = agent["revision"]
    return info


def find_agent(state: dict[str, Any], target: str) -> dict[str, Any]:
    for pane in state["panes"].values():
        agent = pane.get("agent")
        if agent and (pane["pane_id"] == target or (agent["name"] is not None and agent["name"] == target)):
            return pane
    raise Refused("agent_not_found", f"agent target {target} not found")


# --- command lines (the client's own checks: plain text, exit 2) ----------------------------------


def parse_flags(
    args: list[str], flags: dict[str, bool], repeatable: frozenset[str] = frozenset()
) -> tuple[dict[str, list[str]], list[str]]:
    """``({flag: [values]}, extra after --)``; unknown or valueless flags are usage errors."""
    found: dict[str, list[str]] = {}
    extra: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--" and "--" in flags:
            extra = args[index + 1 :]
            break
        if token not in flags or token == "--":
            raise Usage(f"unknown option: {token}")
        if token in found and token not in repeatable:
            raise Usage(f"{token} given twice")
        if flags[token]:
            if index + 1 >= len(args):
                raise Usage(f"missing value for {token}")
            found.setdefault(token, []).append(args[index + 1])
            index += 2
        else:
            found.setdefault(token, []).append("")
            index += 1
    for flag in ("--timeout", "--lines"):
        for value in found.get(flag, []):
            if not value.isdigit():
                raise Usage(f"invalid value for {flag}: {value}")
    for value in found.get("--until", []):
        if value not in STATUSES:
            raise Usage(f"invalid agent status: {value} (expected idle, working, blocked, done, or unknown)")
    for value in found.get("--source", []):
        if value not in SOURCES:
            raise Usage(f"invalid read source: {value}")
    return found, extra


def one(found: dict[str, list[str]], flag: str, default: str | None = None) -> str | None:
    values = found.get(flag)
    return values[-1] if values else default


def injected(state: dict[str, Any], words: str) -> dict[str, Any] | None:
    """Take the first canned answer for this command, if a test left one."""
    for entry in state["inject"]:
        if entry["command"] == words and entry.get("times", 1) > 0:
            entry["times"] = entry.get("times", 1) - 1
            state["inject"] = [e for e in state["inject"] if e.get("times", 1) > 0]
            return entry
    return None


def answer_injected(entry: dict[str, Any], request: str) -> int:
    time.sleep(entry.get("sleep", 0))
    if "error" in entry:
        raise Refused(entry["error"]["code"], entry["error"].get("message", ""))
    if "usage" in entry:
        raise Usage(entry["usage"])
    sys.stdout.write(entry.get("stdout", ""))
    sys.stderr.write(entry.get("stderr", ""))
    return int(entry.get("exit", 0))


# --- watching (the server's wait loops) ------------------------------------------------------------


def watch(
    target: str,
    terminal_id: str,
    matched: Callable[[dict[str, Any], list[list[Any]]], dict[str, Any] | None],
    deadline: float | None,
    since: float,
) -> dict[str, Any] | None:
    """Poll until ``matched(pane, history since ``since``)`` gives an agent record, or the deadline.

    Ends ``agent_not_running`` when the agent vanishes or its terminal changes (src/api/wait.rs)."""
    while True:
        with locked() as state:
            try:
                pane = find_agent(state, target)
            except Refused:
                raise Refused("agent_not_running", "agent is no longer running in the target pane") from None
            if pane["terminal_id"] != terminal_id:
                raise Refused("agent_not_running", "agent is no longer running in the target pane")
            seen = [entry for entry in pane["agent"]["history"] if entry[2] >= since]
            result = matched(pane, seen)
            if result is not None:
                return result
        if deadline is not None and time.time() >= deadline:
            return None
        time.sleep(POLL)


# --- commands ------------------------------------------------------------------------------------


def tab_create(state: dict[str, Any], args: list[str]) -> int:
    found, _ = parse_flags(
        args, {"--workspace": True, "--cwd": True, "--label": True, "--no-focus": False, "--focus": False}
    )
    workspace_id = one(found, "--workspace", "w1") or "w1"
    workspace = state["workspaces"].get(workspace_id)
    if workspace is None:
        raise Refused("workspace_not_found", f"workspace {workspace_id} not found")
    cwd = one(found, "--cwd") or os.getcwd()
    if not Path(cwd).is_dir():
        raise Refused("invalid_cwd", f"{cwd} is not a directory")
    tab_id = f"{workspace_id}:t{workspace['next_tab']}"
    pane_id = f"{workspace_id}:p{workspace['next_pane']}"
    workspace["next_tab"] += 1
    workspace["next_pane"] += 1  # closed ids are never reused
    label = one(found, "--label", "") or ""
    pane = new_pane(state, pane_id, tab_id, workspace_id, cwd, label)
    state["panes"][pane_id] = pane
    tab = {"tab_id": tab_id, "workspace_id": workspace_id, "label": label, "focused": False}
    root = {k: pane[k] for k in ("pane_id", "terminal_id", "tab_id", "workspace_id", "cwd")}
    root.update(focused=False, agent_status="unknown", revision=0)
    return reply("cli:tab:create", {"type": "tab_created", "tab": tab, "root_pane": root})


def agent_start(args: list[str]) -> int:
    if not args:
        raise Usage("usage: herdr agent start <name> --kind KIND --pane ID [--timeout MS] [-- <agent-args...>]")
    name = args[0]
    found, extra = parse_flags(args[1:], {"--kind": True, "--pane": True, "--timeout": True, "--": False})
    kind_word, pane_id = one(found, "--kind"), one(found, "--pane")
    if kind_word is None:
        raise Usage("missing required --kind")
    if pane_id is None:
        raise Usage("missing required --pane")
    timeout_ms = int(one(found, "--timeout", str(START_DEFAULT_MS)) or START_DEFAULT_MS)
    with locked() as state:
        kind = ALIASES.get(kind_word, kind_word)
        if kind not in state["kinds"]:
            raise Usage(f"unsupported interactive agent kind: {kind_word}")
        entry = injected(state, "agent start")
        if entry is None:
            if not NAME.fullmatch(name):
                raise Refused(
                    "invalid_agent_name",
                    "agent name must start with a lowercase letter and contain "
                    "only lowercase letters, digits, '-' or '_' (1-32 characters)",
                )
            if any(p.get("agent") and p["agent"]["name"] == name for p in state["panes"].values()):
                raise Refused("agent_name_taken", f"agent name {name} is already used")
            pane = state["panes"].get(pane_id)
            if pane is None:
                raise Refused("agent_pane_not_found", f"agent target pane {pane_id} not found")
            if pane.get("busy_left", 0) > 0 or pane.get("agent"):
                pane["busy_left"] = max(0, pane.get("busy_left", 0) - 1)
                raise Refused("agent_pane_busy", f"agent target pane {pane_id} is not an available shell")
            if not START_MIN_MS < timeout_ms <= START_MAX_MS:
                raise Refused(
                    "invalid_agent_timeout", "agent start timeout must be greater than 3000ms and at most 300000ms"
                )
            agent = new_agent(name, os.environ.get("FAKE_HERDR_DETECT_KIND") or kind, "unknown")
            agent["args"] = extra
            agent["launch_until"] = time.time() + float(os.environ.get("FAKE_HERDR_LAUNCH_SECONDS", "0.02"))
            pane["agent"] = agent
            terminal_id = pane["terminal_id"]
    if entry is not None:
        return answer_injected(entry, "cli:agent:start")
    deadline = time.time() + timeout_ms / 1000

    def ready(pane: dict[str, Any], _seen: list[list[Any]]) -> dict[str, Any] | None:
        agent = pane["agent"]
        if agent["kind"] != kind:
            raise Refused("agent_kind_mismatch", f"expected {kind}, detected {agent['kind']}")
        if agent["name"] != name:
            raise Refused("agent_name_not_found", f"named agent {name} no longer owns the target terminal")
        if agent["status"] == "blocked":
            raise Refused("agent_not_ready", f"agent {name} is blocked during startup and is not ready for prompts")
        if agent["status"] in ("idle", "done") and agent["launch_until"] is None:
            return agent_info(pane)
        return None

    try:
        info = watch(name, terminal_id, ready, deadline, 0.0)
    except Refused as exc:
        if exc.code == "agent_not_running":
            raise Refused("agent_name_not_found", f"named agent {name} no longer owns the target terminal") from None
        raise
    if info is None:
        raise Refused("timeout", "timed out waiting for agent startup")
    return reply("cli:agent:start", {"type": "agent_started", "agent": info, "argv": [kind, *extra]})


def directives(text: str) -> tuple[list[str], float, str, str | None]:
    pending: list[str] = []
    sleep = 0.0
    outcome = "done"
    hold = None
    for line in (raw.strip() for raw in text.splitlines()):
        word, _, rest = line.partition(" ")
        if word == "echo":
            pending.append(rest)
        elif word == "sleep":
            sleep += float(rest or 0)
        elif word == "wait-file":
            hold = rest
        elif word == "block":
            pending.append(f"{BLOCKED_MARKER}: the fake agent needs an operator's decision")
            outcome = "blocked"
    pending.append(f"fake agent: handled {len(text)} characters")
    return pending, sleep, outcome, hold


def agent_prompt(args: list[str]) -> int:
    if len(args) < 1:
        raise Usage("usage: herdr agent prompt <target> <text> [--wait] [--until STATUS]... [--timeout MS]")
    if len(args) < 2:
        raise Usage("agent prompt requires text")
    target, text = args[0], args[1]
    found, _ = parse_flags(args[2:], {"--wait": False, "--until": True, "--timeout": True}, frozenset({"--until"}))
    wait = "--wait" in found
    if "--until" in found and not wait:
        raise Usage("--until requires --wait")
    if "--timeout" in found and not wait:
        raise Usage("--timeout requires --wait")
    until = found.get("--until") or list(DEFAULT_UNTIL)
    timeout = one(found, "--timeout")
    timeout_ms = int(timeout) if timeout is not None else None
    with locked() as state:
        entry = injected(state, "agent prompt")
        if entry is None:
            if not text:
                raise Refused("empty_agent_prompt", "agent prompt must not be empty")
            pane = find_agent(state, target)
            agent = pane["agent"]
            if agent["status"] == "blocked":
                raise Refused("agent_blocked", f"agent {target} is blocked and requires interactive input")
            if agent["kind"] is None or agent["launch_until"] is not None:
                raise Refused("agent_not_ready", f"agent {target} is not an active named agent")
            prompted = agent_info(pane)  # taken as the text is typed, before the agent reacts
            agent["prompts"].append(text)
            if agent["status"] == "working":
                agent["typed_while_working"].append(text)  # typed in; no state change follows from it
            elif not state["stall"]:
                agent["pending"], sleep, agent["outcome"], agent["hold"] = directives(text)
                if agent["work_seconds"] is not None:
                    agent["work"] = float(agent["work_seconds"])
                else:
                    agent["work"] = sleep or float(os.environ.get("FAKE_HERDR_WORK_SECONDS", "0.05"))
                agent["react_at"] = time.time() + float(os.environ.get("FAKE_HERDR_REACT_SECONDS", "0.005"))
                agent["revision"] += 1  # the agent retitles its terminal as it starts work
            terminal_id = pane["terminal_id"]
            typed_at = time.time()
    if entry is not None:
        return answer_injected(entry, "cli:agent:prompt")
    request = "cli:agent:prompt"
    if not wait:
        return reply(request, {"type": "agent_prompted", "agent": prompted})
    baseline = prompted["state_change_seq"]
    started = time.time()
    deadline = None if timeout_ms is None else started + timeout_ms / 1000
    if prompted["agent_status"] != "working":
        effect_ms = PROMPT_EFFECT_MS if timeout_ms is None else min(timeout_ms, PROMPT_EFFECT_MS)

        def moved(pane: dict[str, Any], seen: list[list[Any]]) -> dict[str, Any] | None:
            if pane["agent"]["seq"] <= baseline:
                return None
            # Herdr probes on each status event, within a millisecond of it. This fake plays changes
            # lazily, when some command looks, so a slow poll here (a loaded machine) could skip a
            # whole working spell that Herdr would have seen: answer what the probe at the first
            # change after the baseline would have read.
            info = agent_info(pane)
            first = next((entry for entry in seen if entry[0] > baseline), None)
            if first is not None:
                info["state_change_seq"], info["agent_status"] = first[0], first[1]
                if first[1] not in ("idle", "done"):
                    info.pop("interactive_ready", None)
            return info

        info = watch(target, terminal_id, moved, started + effect_ms / 1000, typed_at)
        if info is None:
            if timeout_ms is not None and timeout_ms <= PROMPT_EFFECT_MS:
                raise Refused("timeout", "timed out waiting for agent status")
            raise Refused(
                "agent_prompt_stalled",
                f"agent prompt produced no observed state change within {effect_ms} ms; status is "
                f"{prompted['agent_status']} and state_change_seq remained {baseline}",
            )
        if info["agent_status"] in until:
            return reply(request, {"type": "agent_prompted", "agent": info})
        baseline = -1  # the change was seen: from now on any matching status ends the wait

    def settled(pane: dict[str, Any], _seen: list[list[Any]]) -> dict[str, Any] | None:
        agent = pane["agent"]
        return agent_info(pane) if agent["status"] in until and agent["seq"] > baseline else None

    info = watch(target, terminal_id, settled, deadline, typed_at)
    if info is None:
        raise Refused("timeout", "timed out waiting for agent status")
    return reply(request, {"type": "agent_prompted", "agent": info})


def agent_wait(args: list[str]) -> int:
    if not args:
        raise Usage("usage: herdr agent wait <target> [--until STATUS]... [--timeout MS]")
    target = args[0]
    found, _ = parse_flags(args[1:], {"--until": True, "--timeout": True}, frozenset({"--until"}))
    until = found.get("--until") or list(DEFAULT_UNTIL)
    timeout = one(found, "--timeout")
    began = time.time()
    with locked() as state:
        entry = injected(state, "agent wait")
        if entry is None:
            pane = find_agent(state, target)
            initial = agent_info(pane)
            terminal_id = pane["terminal_id"]
    if entry is not None:
        return answer_injected(entry, "cli:agent:wait")
    request = "cli:agent:wait"
    if initial["agent_status"] in until:
        return reply(request, {"type": "agent_info", "agent": initial})

    def matched(pane: dict[str, Any], seen: list[list[Any]]) -> dict[str, Any] | None:
        info = agent_info(pane)
        passing = [status for _seq, status, _t in seen if status in until]
        if passing:  # a status seen in passing counts, as Herdr's events do
            info["agent_status"] = passing[0]
            return info
        return None

    deadline = None if timeout is None else began + int(timeout) / 1000
    info = watch(target, terminal_id, matched, deadline, began)
    if info is None:
        raise Refused("timeout", "timed out waiting for agent status")
    return reply(request, {"type": "agent_info", "agent": info})


def agent_read(state: dict[str, Any], args: list[str]) -> int:
    if not args:
        raise Usage("usage: herdr agent read <target> [--source ...] [--lines N]")
    found, _ = parse_flags(args[1:], {"--source": True, "--lines": True, "--format": True, "--ansi": False})
    output = find_agent(state, args[0])["agent"]["output"]
    lines = int(one(found, "--lines", "100") or 100)
    shown = output[-lines:] if lines else []
    sys.stdout.write("".join(line + "\n" for line in shown))
    return 0


def pane_close(state: dict[str, Any], args: list[str]) -> int:
    if not args:
        raise Usage("usage: herdr pane close <pane_id>")
    if len(args) != 1 and not state["conditional_close"]:
        raise Usage("usage: herdr pane close <pane_id>")
    found, _ = parse_flags(args[1:], {"--if-terminal-id": True, "--if-state-change-seq": True})
    pane_id = args[0]
    pane = state["panes"].get(pane_id)
    if pane is None:
        raise Refused("pane_not_found", f"pane {pane_id} not found")
    want_terminal, want_seq = one(found, "--if-terminal-id"), one(found, "--if-state-change-seq")
    agent = pane.get("agent")
    if want_terminal is not None and pane["terminal_id"] != want_terminal:
        raise Refused("precondition_failed", f"pane {pane_id} now holds terminal {pane['terminal_id']}")
    if want_seq is not None and (agent is None or str(agent["seq"]) != want_seq):
        raise Refused("precondition_failed", f"pane {pane_id}'s agent moved past state_change_seq {want_seq}")
    del state["panes"][pane_id]
    return reply("cli:pane:close", {"type": "ok"})


def run(argv: list[str]) -> int:
    if argv in (["--version"], ["-V"]):
        with locked() as state:
            sys.stdout.write(f"herdr {state['version']}\n")
        return 0
    words = " ".join(argv[:2])
    rest = argv[2:]
    if words == "agent start":
        return agent_start(rest)
    if words == "agent prompt":
        return agent_prompt(rest)
    if words == "agent wait":
        return agent_wait(rest)
    if words not in ("tab create", "agent get", "agent list", "agent read", "pane close"):
        raise Usage(f"unknown command: {words or '(none)'}")
    if words == "agent get" and len(rest) != 1:
        raise Usage("usage: herdr agent get <target>")
    if words == "agent list" and rest:
        raise Usage("usage: herdr agent list")
    request = "cli:" + words.replace(" ", ":")
    with locked() as state:
        entry = injected(state, words)
        if entry is None:
            if words == "tab create":
                return tab_create(state, rest)
            if words == "agent get":
                return reply(request, {"type": "agent_info", "agent": agent_info(find_agent(state, rest[0]))})
            if words == "agent list":
                agents = [agent_info(p) for p in state["panes"].values() if p.get("agent")]
                return reply(request, {"type": "agent_list", "agents": agents})
            if words == "agent read":
                return agent_read(state, rest)
            return pane_close(state, rest)
    return answer_injected(entry, request)


def main() -> int:
    argv = sys.argv[1:]
    try:
        log(argv)
        return run(argv)
    except Usage as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except Refused as exc:
        request = "cli:" + ":".join(argv[:2])
        sys.stderr.write(compact({"id": request, "error": {"code": exc.code, "message": exc.message}}) + "\n")
        return 1


# --- the test's side --------------------------------------------------------------------------------


class FakeHerdr:
    """A test's handle on one fake Herdr server: the ``herdr`` executable, its state and its argv log.

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

    def restart(self) -> None:
        """Restart the server: the counter starts again from 0, every pane gets a new ``terminal_id``,
        agents lose their names and their work, and relaunch (``unknown``, then ``idle``)."""
        with self.edit() as state:
            state["lifetime"] += 1
            state["seq"] = 0
            now = time.time()
            for pane in state["panes"].values():
                pane["terminal_id"] = new_terminal_id(state)
                agent = pane.get("agent")
                if agent:
                    agent.update(name=None, status="unknown", seq=0, react_at=None, work_until=None, history=[])
                    agent["launch_until"] = None if agent["background"] else now + 0.01

    def add_background_agents(
        self, n: int, *, period: float = 0.02, named: bool = False, cwd: bool = True, kind: str | None = "codex"
    ) -> list[str]:
        """Start ``n`` agents corral did not start, each flipping between working and idle/done every
        ``period`` seconds (staggered), in new panes; returns their pane ids."""
        panes: list[str] = []
        with self.edit() as state:
            now = time.time()
            workspace = state["workspaces"]["w1"]
            for index in range(n):
                pane_id = f"w1:p{workspace['next_pane']}"
                tab_id = f"w1:t{workspace['next_tab']}"
                workspace["next_pane"] += 1
                workspace["next_tab"] += 1
                pane = new_pane(state, pane_id, tab_id, "w1", "/", f"bg{index}")
                pane["busy_left"] = 0
                agent = new_agent(f"bg-{pane_id.split(':p')[1]}" if named else None, kind, "idle")
                agent["cwd_known"] = cwd
                settle = "done" if index % 2 else "idle"
                agent["background"] = {"period": period, "next": now + period * (index + 1) / (n + 1), "settle": settle}
                pane["agent"] = agent
                state["panes"][pane_id] = pane
                panes.append(pane_id)
        return panes

    def set_version(self, version: str, *, conditional_close: bool = False) -> None:
        """What ``herdr --version`` says, and whether ``pane close`` takes its preconditions."""
        with self.edit() as state:
            state["version"] = version
            state["conditional_close"] = conditional_close

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
