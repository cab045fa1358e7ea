"""Draw a machine for review: Mermaid (renders on GitHub, needs nothing installed) or Graphviz.

Each transition is labelled ``trigger [guards] / updates ! effects``; an effect's outcomes are drawn
as dashed edges from its intermediate state, labelled ``trigger: outcome``. Terminal states are
double-bordered (Graphviz) or lead to ``[*]`` (Mermaid); intermediate states are dashed/shaded.
"""

from __future__ import annotations

from collections import defaultdict

from runner.errors import InvalidError
from runner.spec.model import MachineSpec, TransitionSpec

FORMATS = ("mermaid", "dot", "svg", "png")


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


def _edges(spec: MachineSpec) -> list[tuple[str, str, str, bool]]:
    """(source, dest, label, is_outcome) for every drawn edge, transitions merged per state pair."""
    merged: dict[tuple[str, str, bool], list[str]] = defaultdict(list)
    for t in spec.transitions:
        text = label(t)
        for source in t.sources:
            merged[(source, t.dest, False)].append(text)
        if t.outcomes:
            for outcome in ("success", "failure", "ambiguous"):
                dest = getattr(t.outcomes, outcome)
                if dest and dest != t.dest:
                    merged[(t.dest, dest, True)].append(f"{t.trigger}: {outcome}")
    return [(s, d, "\n".join(texts), outcome) for (s, d, outcome), texts in merged.items()]


def mermaid(spec: MachineSpec) -> str:
    """A ``stateDiagram-v2`` block for GitHub and any Mermaid renderer."""
    lines = ["stateDiagram-v2", f"    %% {spec.name} v{spec.version}", f"    [*] --> {spec.initial}"]
    for name, state in spec.states.items():
        if state.intermediate:
            lines.append(f'    state "{name} (intermediate)" as {name}')
    for source, dest, text, _ in _edges(spec):
        # Mermaid draws one edge per state pair and shows only its last label: join them.
        label = "<br/>".join(_mermaid_text(line) for line in text.split("\n"))
        lines.append(f"    {source} --> {dest} : {label}")
    for name, state in spec.states.items():
        if state.terminal:
            lines.append(f"    {name} --> [*]")
    intermediate = [n for n, s in spec.states.items() if s.intermediate]
    if intermediate:
        lines.append("    classDef intermediate fill:#fff4d6,stroke:#b58900,stroke-dasharray:4 3")
        lines.append(f"    class {', '.join(intermediate)} intermediate")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    # ';' ends a statement and '#' starts an entity code in Mermaid; neither occurs in our names.
    return text.replace(";", ",").replace("#", "")


def dot(spec: MachineSpec) -> str:
    """Graphviz source for the machine."""
    out = [
        f'digraph "{_q(spec.name)}" {{',
        "  rankdir=LR;",
        f'  label="{_q(spec.name)} v{spec.version}"; labelloc=t; fontname="Helvetica";',
        '  node [shape=box, style=rounded, fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  "__start" [shape=point, width=0.15, label=""];',
        f'  "__start" -> "{_q(spec.initial)}";',
    ]
    for name, state in spec.states.items():
        attrs = [f'label="{_q(name)}"', f'tooltip="{_q(state.description)}"']
        if state.terminal:
            attrs.append("peripheries=2")
        if state.intermediate:
            attrs += ['style="rounded,dashed,filled"', 'fillcolor="#fff4d6"']
        out.append(f'  "{_q(name)}" [{", ".join(attrs)}];')
    for source, dest, text, outcome in _edges(spec):
        style = ", style=dashed" if outcome else ""
        out.append(f'  "{_q(source)}" -> "{_q(dest)}" [label="{_q(text)}"{style}];')
    out.append("}")
    return "\n".join(out) + "\n"


def _q(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(spec: MachineSpec, fmt: str) -> str | bytes:
    """The drawing in ``fmt``: text for ``mermaid``/``dot``/``svg``, bytes for ``png``.

    Raises:
        InvalidError: ``format_unknown``; ``graphviz_unavailable`` when svg/png is asked for and
            the Graphviz ``dot`` program is not installed.
    """
    if fmt == "mermaid":
        return mermaid(spec)
    if fmt == "dot":
        return dot(spec)
    if fmt not in FORMATS:
        raise InvalidError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", code="format_unknown")
    import graphviz  # ~20 ms; only for rendered formats

    try:
        rendered: bytes = graphviz.Source(dot(spec)).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise InvalidError(
            "drawing svg/png needs the Graphviz 'dot' program (Debian: apt-get install graphviz); "
            "--format mermaid or dot needs nothing",
            code="graphviz_unavailable",
        ) from None
    return rendered.decode("utf-8") if fmt == "svg" else rendered
