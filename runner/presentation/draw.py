"""Draw for review: a machine, an instance's path through it, a recipe's steps, a plan's progress.

Two targets: Mermaid (renders on GitHub, needs nothing installed) and Graphviz (``dot`` source, or
``svg``/``png`` through the ``dot`` program).

Machines: each transition is labelled ``trigger [guards] / updates ! effects``; an effect's outcomes
are drawn as dashed edges from its intermediate state, labelled ``trigger: outcome``. Every machine
is laid out top to bottom and every edge label is wrapped (:data:`WRAP`): drawings are read in pages
and comments of a fixed width that scroll down, so width is the scarce dimension (an unwrapped,
left-to-right writer machine was one 5,854 px strip, unreadable once scaled to a page). Terminal
states are double-bordered (Graphviz) or lead to ``[*]`` (Mermaid); intermediate states are
dashed/shaded. Given a :class:`Trail` (an instance's event history), the states it visited and the
one it is in are highlighted, and every edge it took carries its position(s) in the path.

Recipes: a top-down flowchart of the resolved steps in order, each labelled with its ``do`` and the
machine that operation drives; ``finally`` steps are double-bordered, ``catch`` edges dashed, ``when``
shown in the step. Given a :class:`PlanStatus`, each step is coloured by the state the plan recorded.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from runner.context import Event, Instance
from runner.definitions.model import MachineSpec, TransitionSpec
from runner.definitions.operations import OPERATIONS
from runner.definitions.recipes import Recipe, Step
from runner.errors import InputError, InvalidError, NotFoundError

FORMATS = ("mermaid", "dot", "svg", "png")
WRAP = 36  # characters per line of an edge label: a long guard list becomes a tall, narrow label
SVG_STYLE = "max-width:100%;height:auto"  # on the root of every SVG drawing (see _graphviz)

# Invariant: every state the plan executor records for a step is a key here ("pending" = no record).
STEP_COLOURS: dict[str, tuple[str, str]] = {  # state -> (fill, stroke)
    "pending": ("#f5f5f5", "#9e9e9e"),
    "running": ("#fff3cd", "#b58900"),
    "succeeded": ("#d4edda", "#2e7d32"),
    "failed": ("#f8d7da", "#c62828"),
    "caught": ("#ffe0b2", "#ef6c00"),
    "skipped": ("#e0e0e0", "#757575"),
}
_VISITED = ("#e3f2fd", "#1565c0")  # fill, stroke of a state the instance passed through
_CURRENT = ("#1565c0", "#0d47a1")  # fill, stroke of the state it is in now
_STRAY = "#c62828"  # an event the machine (as defined now) has no edge for


def label(t: TransitionSpec) -> str:
    """``trigger [guard, guard] / update, update ! effect``: one line per transition."""
    text = t.trigger
    if t.guards:
        text += " [" + ", ".join(g.label() for g in t.guards) + "]"
    if t.updates:
        text += " / " + ", ".join(u.label() for u in t.updates)
    if t.effects:
        text += " ! " + ", ".join(e.label() for e in t.effects)
    return text


# --- an instance's path ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Visit:
    """One move of an instance, as one event recorded it.

    ``number`` is the move's 1-based position in the path (what a drawing shows); ``seq`` is the
    event's global sequence number (what ``corral events`` shows). An outcome event (its trigger is
    ``trigger:outcome``) is drawn on the dashed outcome edge from the intermediate state.
    """

    number: int
    seq: int
    trigger: str
    source: str
    dest: str

    @property
    def outcome(self) -> bool:
        return ":" in self.trigger


@dataclass(frozen=True)
class Trail:
    """An instance's history for a drawing: the state it is in, and every move that led there."""

    instance_id: str
    current: str
    visits: tuple[Visit, ...]

    @property
    def path(self) -> list[str]:
        """The states in the order the instance passed through them (repeats kept)."""
        if not self.visits:
            return [self.current]
        return [self.visits[0].source, *(v.dest for v in self.visits)]

    @property
    def visited(self) -> list[str]:
        """Every state on the path except the current one, first visit first."""
        return [s for s in dict.fromkeys(self.path) if s != self.current]

    def text(self) -> str:
        """``absent -acquire-> active -release-> released``: the path on one line."""
        if not self.visits:
            return self.current
        return self.visits[0].source + "".join(f" -{v.trigger}-> {v.dest}" for v in self.visits)


def trail(spec: MachineSpec, instance_id: str, instance: Instance | None, events: Sequence[Event]) -> Trail:
    """The trail of ``instance`` (as the store holds it) through ``spec``, from its event log.

    Raises:
        NotFoundError: ``instance_unknown`` when the store has no instance ``instance_id``.
        InputError: ``instance_machine_mismatch`` when it is an instance of another machine.
    """
    if instance is None:
        raise NotFoundError(
            f"no instance {instance_id!r} in this store (see corral events for the ids it holds)",
            code="instance_unknown",
            instance=instance_id,
        )
    if instance.machine != spec.name:
        raise InputError(
            "instance",
            f"{instance_id!r} is an instance of machine {instance.machine!r}, not {spec.name!r}: "
            f"draw it with corral draw {instance.machine} --instance {instance_id}",
            code="instance_machine_mismatch",
            instance=instance_id,
            machine=instance.machine,
            expected=spec.name,
        )
    mine = [e for e in events if e.instance_id == instance_id]
    visits = tuple(
        Visit(n, e.seq, e.trigger, e.from_state, e.to_state) for n, e in enumerate(sorted(mine, key=lambda e: e.seq), 1)
    )
    return Trail(instance_id, instance.state, visits)


def trace_trail(spec: MachineSpec, doc: Any) -> Trail:
    """The trail of a ``corral check --trace-out`` counterexample through ``spec``: each step that
    moved an instance, numbered as the trace numbers it (the clock's and crashes' steps move none).

    Raises:
        InputError: ``trace_invalid`` when ``doc`` is not a trace, or is a trace of another machine.
    """
    if not isinstance(doc, dict) or doc.get("format") != "corral-trace-v1" or not isinstance(doc.get("steps"), list):
        raise InputError("trace", "not a counterexample written by corral check --trace-out", code="trace_invalid")
    if doc.get("machine") != spec.name:
        raise InputError(
            "trace",
            f"the trace is of machine {doc.get('machine')!r}, not {spec.name!r}: draw it with corral draw "
            f"{doc.get('machine')} --trace FILE",
            code="trace_invalid",
        )
    visits: list[Visit] = []
    current = spec.initial
    for step in doc["steps"]:
        if not isinstance(step, dict) or "trigger" not in step or step.get("outcome") == "instance_moved":
            continue
        trigger = str(step["trigger"])
        if step.get("action") == "effect":
            trigger += f":{step.get('outcome')}"
        elif step.get("action") == "refused":
            trigger += ":failure"
        number = int(step.get("n", len(visits) + 1))
        visits.append(Visit(number, number, trigger, str(step.get("source")), str(step.get("dest"))))
        current = str(step.get("dest"))
    return Trail(f"counterexample of {doc.get('invariant')}", current, tuple(visits))


# --- machines ------------------------------------------------------------------------------------------


@dataclass
class _Line:
    """One transition (or outcome) on a drawn edge: ``key`` is the trigger an event records for it."""

    key: str
    text: str
    taken: list[Visit] = field(default_factory=list)

    def shown(self) -> str:
        """The text, and with the moves that took it, their positions in the path: ``renew … (path 2, 4)``."""
        if not self.taken:
            return self.text
        return f"{self.text} (path {', '.join(str(v.number) for v in self.taken)})"


@dataclass
class _Edge:
    source: str
    dest: str
    outcome: bool
    lines: list[_Line] = field(default_factory=list)
    stray: bool = False  # only the path took it: the machine (as defined now) has no such edge

    @property
    def taken(self) -> list[Visit]:
        return sorted((v for line in self.lines for v in line.taken), key=lambda v: v.number)

    def texts(self) -> list[str]:
        return [line.shown() for line in self.lines]

    def wrapped(self, indent: str = "") -> list[str]:
        """Every line of the label as drawn: each transition wrapped (:func:`wrap`), one after the other.

        A transition's continuation lines start with ``indent``, so where one transition ends and the
        next begins stays visible on an edge that carries several.
        """
        out: list[str] = []
        for text in self.texts():
            first, *rest = wrap(text)
            out += [first, *(indent + line for line in rest)]
        return out


_SECTION = re.compile(r" (?=[/!] )")  # the space before ' / updates' and ' ! effects' in a label


def wrap(text: str, width: int = WRAP) -> list[str]:
    """``text`` as lines of about ``width`` characters, broken only at spaces.

    A text that fits stays one line. Otherwise updates (``/ …``) and effects (``! …``) start a line
    of their own, so a label reads as guards, then updates, then effects. Joining the lines with
    single spaces gives ``text`` back; a single name longer than ``width`` stays whole (a name broken
    in two would read as two names).
    """
    if len(text) <= width:
        return [text]
    lines: list[str] = []
    for section in _SECTION.split(text):
        lines += textwrap.wrap(section, width, break_long_words=False, break_on_hyphens=False) or [section]
    return lines


def _edges(spec: MachineSpec, path: Trail | None = None) -> list[_Edge]:
    """Every drawn edge, transitions merged per state pair, with the moves of ``path`` on their lines."""
    merged: dict[tuple[str, str, bool], _Edge] = {}

    def edge(source: str, dest: str, outcome: bool) -> _Edge:
        key = (source, dest, outcome)
        if key not in merged:
            merged[key] = _Edge(source, dest, outcome)
        return merged[key]

    for t in spec.transitions:
        text = label(t)
        for source in t.sources:
            edge(source, t.dest, False).lines.append(_Line(t.trigger, text))
        for outcome, dest in t.outcome_edges():
            if dest != t.dest:
                edge(t.dest, dest, True).lines.append(_Line(f"{t.trigger}:{outcome}", f"{t.trigger}: {outcome}"))
    for visit in path.visits if path else ():
        # An edge the machine lacks: its definition changed since, or an outcome that stayed put.
        target = merged.get((visit.source, visit.dest, visit.outcome)) or edge(visit.source, visit.dest, visit.outcome)
        if not target.lines:
            target.stray = True
        line = next((x for x in target.lines if x.key == visit.trigger), None)
        if line is None:
            line = _Line(visit.trigger, visit.trigger + " (not in this definition)")
            target.lines.append(line)
        line.taken.append(visit)
    return list(merged.values())


def mermaid(spec: MachineSpec, path: Trail | None = None) -> str:
    """A ``stateDiagram-v2`` block for GitHub and any Mermaid renderer.

    With ``path``, a comment line lists the instance's path, the classes ``visited`` and ``current``
    mark its states, and each edge it took ends with its positions in the path, ``(1, 3)``.
    """
    lines = ["stateDiagram-v2", "    direction TB", f"    %% {spec.name} v{spec.version}"]
    if path is not None:
        seqs = ", ".join(str(v.seq) for v in path.visits) or "none"
        lines.append(f"    %% path of {_one_line(path.instance_id)}: {path.text()} (now {path.current}; events {seqs})")
    lines.append(f"    [*] --> {spec.initial}")
    for name, state in spec.states.items():
        if state.intermediate:
            lines.append(f'    state "{name} (intermediate)" as {name}')
    for e in _edges(spec, path):
        # Mermaid draws one edge per state pair and shows only its last label: join them.
        lines.append(f"    {e.source} --> {e.dest} : {'<br/>'.join(_mermaid_text(t) for t in e.wrapped())}")
    for name, state in spec.states.items():
        if state.terminal:
            lines.append(f"    {name} --> [*]")
    intermediate = [n for n, s in spec.states.items() if s.intermediate]
    if intermediate:
        lines.append("    classDef intermediate fill:#fff4d6,stroke:#b58900,stroke-dasharray:4 3")
        lines.append(f"    class {', '.join(intermediate)} intermediate")
    if path is not None:
        # After 'intermediate', so these fills win on a state that is both.
        if path.visited:
            lines.append(f"    classDef visited fill:{_VISITED[0]},stroke:{_VISITED[1]},stroke-width:2px")
            lines.append(f"    class {', '.join(path.visited)} visited")
        lines.append(f"    classDef current fill:{_CURRENT[0]},stroke:{_CURRENT[1]},stroke-width:3px,color:#fff")
        lines.append(f"    class {path.current} current")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    # ';' ends a statement and '#' starts an entity code in Mermaid; neither occurs in our names.
    return text.replace(";", ",").replace("#", "")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def dot(spec: MachineSpec, path: Trail | None = None) -> str:
    """Graphviz source for the machine.

    With ``path``, the current state is filled dark, the visited ones light, and every edge the
    instance took is bold with its positions in the path, ``(1, 3)``, as the label's last line.
    """
    title = f"{spec.name} v{spec.version}"
    if path is not None:
        title += f"\ninstance {path.instance_id}: {path.current}"
    out = [
        f'digraph "{_q(spec.name)}" {{',
        "  rankdir=TB;",
        f'  label="{_q(title)}"; labelloc=t; fontname="Helvetica";',
        '  node [shape=box, style=rounded, fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  "__start" [shape=point, width=0.15, label=""];',
    ]
    started = path is not None and bool(path.visits) and path.visits[0].source == spec.initial
    out.append(f'  "__start" -> "{_q(spec.initial)}"{" [style=bold, penwidth=2.5]" if started else ""};')
    visited = set(path.visited) if path else set()
    for name, state in spec.states.items():
        attrs = [f'label="{_q(name)}"', f'tooltip="{_q(state.description)}"']
        styles = ["rounded"]
        if state.terminal:
            attrs.append("peripheries=2")
        if state.intermediate:
            styles += ["dashed", "filled"]
            attrs.append('fillcolor="#fff4d6"')
        if path is not None and name == path.current:
            styles += ["filled", "bold"]
            attrs += [f'fillcolor="{_CURRENT[0]}"', f'color="{_CURRENT[1]}"', 'fontcolor="white"', "penwidth=2.5"]
        elif name in visited:
            styles += ["filled"]
            attrs += [f'fillcolor="{_VISITED[0]}"', f'color="{_VISITED[1]}"', "penwidth=1.5"]
        if len(styles) > 1:
            attrs.append(f'style="{",".join(dict.fromkeys(styles))}"')
        out.append(f'  "{_q(name)}" [{", ".join(_last_wins(attrs))}];')
    for e in _edges(spec, path):
        lines = e.wrapped(indent="  ")
        # One line stays centred; several are left-justified ('\l' ends a line) so the indent shows.
        text = _q(lines[0]) if len(lines) == 1 else "".join(_q(line) + "\\l" for line in lines)
        attrs = []
        styles = ["dashed"] if e.outcome else []
        if e.taken:
            styles.append("bold")
            colour = _STRAY if e.stray else _CURRENT[0]
            events = ", ".join(str(v.seq) for v in e.taken)
            attrs += ["penwidth=2.5", f'color="{colour}"', f'fontcolor="{colour}"', f'tooltip="events {events}"']
        if e.stray:
            styles.append("dotted")
        style = ""
        if styles:
            style = ", style=" + (styles[0] if len(styles) == 1 else f'"{",".join(styles)}"')
        extra = "".join(f", {a}" for a in attrs)
        out.append(f'  "{_q(e.source)}" -> "{_q(e.dest)}" [label="{text}"{style}{extra}];')
    out.append("}")
    return "\n".join(out) + "\n"


def _last_wins(attrs: list[str]) -> list[str]:
    """Node attributes with a repeated key kept once, at its last value (Graphviz would warn)."""
    by_key = {a.split("=", 1)[0]: a for a in attrs}
    return list(by_key.values())


def _q(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(spec: MachineSpec, fmt: str, path: Trail | None = None) -> str | bytes:
    """The drawing of ``spec`` (and ``path``, if given) in ``fmt``: text, or bytes for ``png``.

    Raises:
        InvalidError: ``format_unknown``; ``graphviz_unavailable`` when svg/png is asked for and
            the Graphviz ``dot`` program is not installed.
    """
    if fmt == "mermaid":
        return mermaid(spec, path)
    return _graphviz(dot(spec, path), fmt)


# --- recipes and plans -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanStatus:
    """A plan as a drawing shows it: its id, its state, and each step's recorded state."""

    plan_id: str
    state: str
    steps: Mapping[str, str]  # step id -> recorded state; a step with no record is "pending"
    note: str = ""  # e.g. the recipe changed since the plan was submitted
    why: Mapping[str, str] = field(default_factory=dict)  # step id -> why it is shown in another state

    @classmethod
    def of(cls, plan: Instance, note: str = "") -> PlanStatus:
        """From a plan instance (``machines/plan.yaml``): ``data.steps[step].state``.

        A validation step (its operation reports ``passed``, as ``writer.verify`` does) whose record
        says ``passed: false`` is shown ``failed`` even where it was recorded ``succeeded`` (a
        validation that ran but did not pass): green would tell a reviewer the lane is good.
        """
        records: Mapping[str, Any] = plan.data.get("steps") or {}
        steps: dict[str, str] = {}
        why: dict[str, str] = {}
        for sid, rec in records.items():
            if not isinstance(rec, Mapping):
                continue
            steps[sid] = str(rec.get("state") or "pending")
            if steps[sid] == "succeeded" and _did_not_pass(rec):
                steps[sid], why[sid] = "failed", "validation did not pass"
        return cls(str(plan.data.get("plan_id") or plan.id), plan.state, steps, note, why)

    def of_step(self, step_id: str) -> str:
        return self.steps.get(step_id, "pending")

    def title(self, recipe: Recipe) -> str:
        text = f"plan {self.plan_id} (recipe {recipe.name} v{recipe.version}): {self.state}"
        return f"{text} ({self.note})" if self.note else text


def _did_not_pass(record: Mapping[str, Any]) -> bool:
    """Whether a step record is of a validation that reported ``passed: false``.

    Looked for in the outputs and, as a lane records it, in their (or the record's) ``verification``;
    only for an operation whose declared outputs include ``passed``, so a step of another operation
    that happens to output a ``passed`` value keeps the colour of its state.
    """
    operation = OPERATIONS.get(str(record.get("do") or ""))
    if operation is None or "passed" not in operation.outputs:
        return False
    outputs = record.get("outputs")
    places = [outputs, record.get("verification")]
    if isinstance(outputs, Mapping):
        places.append(outputs.get("verification"))
    return any(isinstance(p, Mapping) and p.get("passed") is False for p in places)


def step_lines(step: Step, status: PlanStatus | None = None) -> list[str]:
    """What a drawing writes in a step's box: id, ``do → machine``, ``when``, retry, finally, state."""
    operation = OPERATIONS.get(step.do)
    machine = operation.machine if operation else None
    lines = [step.id, f"{step.do} → {machine}" if machine else step.do]
    if step.when is not None:
        lines.append(
            f"when {plain_value(step.when.get('left'))} {step.when.get('op')} {plain_value(step.when.get('right'))}"
        )
    extras = []
    if step.retry is not None:
        extras.append(f"retry ×{step.retry.max_attempts}")
    if step.timeout is not None:
        extras.append(f"timeout {step.timeout:g} s")
    if step.final:
        extras.append("finally")
    if extras:
        lines.append(", ".join(extras))
    if status is not None:
        reason = status.why.get(step.id)
        lines.append(f"[{status.of_step(step.id)}]" + (f" {reason}" if reason else ""))
    return lines


def plain_value(value: Any) -> str:
    """A ``when`` operand as written: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _catch_text(errors: Sequence[str]) -> str:
    return "catch " + ", ".join(errors)


def recipe_mermaid(recipe: Recipe, status: PlanStatus | None = None) -> str:
    """A ``flowchart TD`` of the recipe's steps; with ``status``, each step classed by its state.

    Node ids are ``s0``, ``s1`` … (a step id such as ``end`` would be a Mermaid keyword); the step id
    is the first line of each label. ``finally`` steps are subroutine boxes (double-sided).
    """
    title = status.title(recipe) if status else f"recipe {recipe.name} v{recipe.version}"
    lines = ["---", f"title: {json.dumps(title)}", "---", "flowchart TD", f"    %% {_one_line(title)}"]
    ids = {step.id: f"s{i}" for i, step in enumerate(recipe.steps)}
    lines.append('    begin(["start"])')
    for step in recipe.steps:
        text = "<br/>".join(_mermaid_label(line) for line in step_lines(step, status))
        shape = ('[["', '"]]') if step.final else ('["', '"]')
        lines.append(f"    {ids[step.id]}{shape[0]}{text}{shape[1]}")
    lines.append('    finish(["end"])')
    chain = ["begin", *ids.values(), "finish"]
    lines += [f"    {a} --> {b}" for a, b in pairwise(chain)]
    for step in recipe.steps:
        for catch in step.catch:
            lines.append(f'    {ids[step.id]} -.->|"{_mermaid_label(_catch_text(catch.errors))}"| {ids[catch.next]}')
    if status is not None:
        by_state: dict[str, list[str]] = defaultdict(list)
        for step in recipe.steps:
            by_state[status.of_step(step.id)].append(ids[step.id])
        for state, nodes in by_state.items():
            fill, stroke = STEP_COLOURS.get(state, STEP_COLOURS["pending"])
            dash = ",stroke-dasharray:4 3" if state in ("skipped", "pending") else ""
            lines.append(f"    classDef {_class(state)} fill:{fill},stroke:{stroke},stroke-width:2px{dash}")
            lines.append(f"    class {','.join(nodes)} {_class(state)}")
    return "\n".join(lines) + "\n"


def _class(state: str) -> str:
    """The Mermaid class for a step state (prefixed: a class must not collide with a keyword)."""
    return "step_" + re.sub(r"[^A-Za-z0-9_]", "_", state)


def _mermaid_label(text: str) -> str:
    # Inside a quoted label, Mermaid reads '#name;' as an entity and may treat '<' as HTML.
    return text.replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;").replace("\n", " ")


def recipe_dot(recipe: Recipe, status: PlanStatus | None = None) -> str:
    """Graphviz source for the recipe's steps, top to bottom; with ``status``, filled by step state."""
    title = status.title(recipe) if status else f"recipe {recipe.name} v{recipe.version}"
    out = [
        f'digraph "{_q(recipe.name)}" {{',
        "  rankdir=TB;",
        f'  label="{_q(title)}"; labelloc=t; fontname="Helvetica";',
        '  node [shape=box, style=rounded, fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  "__start" [shape=circle, style=filled, fillcolor=black, width=0.2, label=""];',
        '  "__end" [shape=doublecircle, style=filled, fillcolor=black, width=0.12, label=""];',
    ]
    for step in recipe.steps:
        attrs = [f'label="{_q(chr(10).join(step_lines(step, status)))}"']
        if step.description:
            attrs.append(f'tooltip="{_q(step.description)}"')
        if step.final:
            attrs.append("peripheries=2")
        if status is not None:
            state = status.of_step(step.id)
            fill, stroke = STEP_COLOURS.get(state, STEP_COLOURS["pending"])
            styles = "rounded,filled" + (",dashed" if state in ("skipped", "pending") else "")
            attrs += [f'style="{styles}"', f'fillcolor="{fill}"', f'color="{stroke}"', "penwidth=2"]
        out.append(f'  "{_q(_node(step))}" [{", ".join(attrs)}];')
    chain = ["__start", *(_node(s) for s in recipe.steps), "__end"]
    out += [f'  "{_q(a)}" -> "{_q(b)}";' for a, b in pairwise(chain)]
    for step in recipe.steps:
        for catch in step.catch:
            target = _node(recipe.step(catch.next))
            out.append(
                f'  "{_q(_node(step))}" -> "{_q(target)}" [label="{_q(_catch_text(catch.errors))}", style=dashed];'
            )
    out.append("}")
    return "\n".join(out) + "\n"


def _node(step: Step) -> str:
    return f"step:{step.id}"


def render_recipe(recipe: Recipe, fmt: str, status: PlanStatus | None = None) -> str | bytes:
    """The drawing of ``recipe`` (coloured by ``status``, if given) in ``fmt``.

    Raises:
        InvalidError: ``format_unknown``; ``graphviz_unavailable`` for svg/png without Graphviz.
    """
    if fmt == "mermaid":
        return recipe_mermaid(recipe, status)
    return _graphviz(recipe_dot(recipe, status), fmt)


def _graphviz(source: str, fmt: str) -> str | bytes:
    if fmt == "dot":
        return source
    if fmt not in FORMATS:
        raise InvalidError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", code="format_unknown")
    import graphviz  # ~20 ms; only for rendered formats

    try:
        rendered: bytes = graphviz.Source(source).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise InvalidError(
            "drawing svg/png needs the Graphviz 'dot' program (Debian: apt-get install graphviz); "
            "--format mermaid or dot needs nothing",
            code="graphviz_unavailable",
        ) from None
    if fmt != "svg":
        return rendered
    # Shrink to fit, never grow: opened in a browser, inlined, or shown as an image, a drawing wider
    # than its page scales down to the page's width instead of overflowing it; a small one keeps its size.
    return rendered.decode("utf-8").replace("<svg ", f'<svg style="{SVG_STYLE}" ', 1)
