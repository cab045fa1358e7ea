"""The review pack: one self-contained HTML page describing every machine and recipe corral knows.

For a reviewer who will not install corral: each machine drawn (Graphviz SVG, inlined) with tables
of its states, transitions (guards, updates and effects with their registry summaries, outcomes) and
data; each recipe drawn with its inputs and steps; corral's version and the identity (``$id`` and
SHA-256) of every schema the definitions were validated against; a table of contents.

Invariant: the page references no external resource (no script at all, no stylesheet, image or font
to fetch); it opens the same offline, in a mail client or from an archive. The SVG drawings are
stripped of their XML prologue and namespace declarations (an HTML parser needs neither) and their
element ids are prefixed per drawing, so several drawings on one page never share an id.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runner._version import __version__
from runner.data import data_dir
from runner.definitions.library import Library
from runner.definitions.model import MachineSpec, Ref, TransitionSpec
from runner.definitions.operations import OPERATIONS
from runner.definitions.recipes import Recipe, RecipeLibrary, Step
from runner.errors import SpecError
from runner.presentation.draw import plain_value, render, render_recipe
from runner.registry import Registry

FILENAME = "index.html"


@dataclass(frozen=True)
class Written:
    """What :func:`write` produced: the page, and what it covers."""

    path: Path
    machines: list[str]
    recipes: list[str]
    invalid: list[str] = field(default_factory=list)  # files shown with their diagnostics, not drawn
    size: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "machines": self.machines,
            "recipes": self.recipes,
            "invalid": self.invalid,
            "bytes": self.size,
        }


@dataclass(frozen=True)
class _Schema:
    file: str
    id: str
    sha256: str


@dataclass
class _Page:
    """The page being built: sections in order, and the anchors already handed out."""

    machines: list[str] = field(default_factory=list)
    recipes: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    contents: list[tuple[str, str, str]] = field(default_factory=list)  # (group, anchor, text)
    body: list[str] = field(default_factory=list)
    anchors: set[str] = field(default_factory=set)

    def anchor(self, base: str) -> str:
        """A unique fragment id derived from ``base``."""
        stem = re.sub(r"[^a-z0-9_-]+", "-", base.lower()).strip("-") or "item"
        anchor, n = stem, 1
        while anchor in self.anchors:
            n += 1
            anchor = f"{stem}-{n}"
        self.anchors.add(anchor)
        return anchor


def write(out_dir: Path, library: Library, recipes: RecipeLibrary) -> Written:
    """Build the pack and write ``out_dir/index.html`` (the directory is created if missing).

    Raises:
        InvalidError: ``graphviz_unavailable`` when the Graphviz ``dot`` program is not installed
            (nothing is written then).
    """
    page = build(library, recipes)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILENAME
    data = page_html(page).encode("utf-8")
    path.write_bytes(data)
    return Written(path, page.machines, page.recipes, page.invalid, len(data))


def build(library: Library, recipes: RecipeLibrary) -> _Page:
    """Every section of the pack, in order: versions, machines, recipes."""
    from runner.effects import EFFECTS
    from runner.guards import GUARDS
    from runner.updates import UPDATES

    registries: dict[str, Registry[Any]] = {"guards": GUARDS, "updates": UPDATES, "effects": EFFECTS}
    page = _Page()
    _versions(page)
    page.body.append('<section id="machines"><h2>Machines</h2>')
    builtin = set(library.builtin_paths())
    for path in library.builtin_paths() + library.local_paths():
        origin = "built-in" if path in builtin else "local"
        try:
            spec = library.load(path)
        except SpecError as exc:  # one broken local file must not hide the others: show why instead
            _invalid(page, "machine", path.stem, origin, exc)
            continue
        _machine(page, spec, origin, registries)
    page.body.append("</section>")
    page.body.append('<section id="recipes"><h2>Recipes</h2>')
    for name in recipes.names():
        origin = "built-in" if recipes.is_builtin(name) else "local"
        try:
            recipe = recipes.get(name)
        except SpecError as exc:
            _invalid(page, "recipe", name, origin, exc)
            continue
        _recipe(page, recipe, origin)
    page.body.append("</section>")
    return page


def schemas() -> list[_Schema]:
    """Every JSON Schema corral validates with: its file, ``$id`` and SHA-256."""
    out = []
    for path in sorted(data_dir("schemas").glob("*.schema.json")):
        raw = path.read_bytes()
        doc = json.loads(raw)
        out.append(_Schema(path.name, str(doc.get("$id", "")), hashlib.sha256(raw).hexdigest()))
    return out


# --- sections -------------------------------------------------------------------------------------


def _versions(page: _Page) -> None:
    page.contents.append(("", "versions", "Versions"))
    rows = [(f"<code>{_e(s.file)}</code>", f"<code>{_e(s.id)}</code>", f"<code>{s.sha256}</code>") for s in schemas()]
    page.body.append(
        '<section id="versions"><h2>Versions</h2>'
        f"<p>corral <strong>{_e(__version__)}</strong>. Definitions are validated against these schemas:</p>"
        + _table(["schema", "$id", "SHA-256"], rows)
        + "</section>"
    )


def _machine(page: _Page, spec: MachineSpec, origin: str, registries: dict[str, Registry[Any]]) -> None:
    anchor = page.anchor(f"machine-{spec.name}")
    page.machines.append(spec.name)
    page.contents.append(("Machines", anchor, f"{spec.name} v{spec.version}"))
    svg = render(spec, "svg")
    assert isinstance(svg, str)
    states = [
        (
            f"<code>{_e(s.name)}</code>",
            _e(", ".join(_kinds(spec, s.name)) or "—"),
            _e(s.description),
        )
        for s in spec.states.values()
    ]
    transitions = [
        (
            f"<code>{_e(t.trigger)}</code>",
            _sources(spec, t),
            f"<code>{_e(t.dest)}</code>",
            _refs(t.guards, registries["guards"]),
            _refs(t.updates, registries["updates"]),
            _refs(t.effects, registries["effects"]) + _recheck(t, registries["guards"]),
            _outcomes(t),
            _e(t.description),
        )
        for t in spec.transitions
    ]
    fields = [
        (
            f"<code>{_e(f.name)}</code>",
            _e(f.type),
            "yes" if f.nullable else "no",
            "yes" if f.secret else "",
            _e(f.description),
        )
        for f in spec.fields.values()
    ]
    page.body.append(
        f'<article class="machine" id="{anchor}" data-name="{_e(spec.name)}">'
        f"<h3>{_e(spec.name)}</h3>"
        + _facts([("version", str(spec.version)), ("source", _source(origin, spec.path)), ("SHA-256", spec.sha256)])
        + f"<p>{_e(spec.description)}</p>"
        + _figure(svg, anchor, f"state machine {spec.name}")
        + "<h4>States</h4>"
        + _table(["state", "kind", "description"], states)
        + "<h4>Transitions</h4>"
        + _table(["trigger", "source", "dest", "guards", "updates", "effects", "outcomes", "description"], transitions)
        + ("<h4>Data</h4>" + _table(["field", "type", "nullable", "secret", "description"], fields) if fields else "")
        + "</article>"
    )


def _kinds(spec: MachineSpec, name: str) -> list[str]:
    state = spec.states[name]
    kinds = ["initial"] if name == spec.initial else []
    if state.terminal:
        kinds.append("terminal")
    if state.intermediate:
        kinds.append("intermediate")
    return kinds


def _sources(spec: MachineSpec, t: TransitionSpec) -> str:
    listed = ", ".join(f"<code>{_e(s)}</code>" for s in t.sources)
    return f"<code>*</code> (every state that is not terminal: {listed})" if t.wildcard else listed


def _refs(refs: Sequence[Ref], registry: Registry[Any]) -> str:
    if not refs:
        return ""
    items = []
    for ref in refs:
        entry = registry.get(ref.name)
        summary = entry.summary if entry is not None else f"(no {registry.kind} of this name is registered)"
        items.append(f"<li><code>{_e(ref.label())}</code>: {_e(summary)}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _recheck(t: TransitionSpec, guards: Registry[Any]) -> str:
    return f"<p>rechecked before the outcome:</p>{_refs(t.recheck, guards)}" if t.recheck else ""


def _outcomes(t: TransitionSpec) -> str:
    if t.outcomes is None:
        return ""
    ambiguous = t.outcomes.ambiguous or f"{t.dest} (stays, for reconcile)"
    pairs = [("success", t.outcomes.success), ("failure", t.outcomes.failure), ("ambiguous", ambiguous)]
    return "<ul>" + "".join(f"<li>{k} → <code>{_e(v)}</code></li>" for k, v in pairs) + "</ul>"


def _recipe(page: _Page, recipe: Recipe, origin: str) -> None:
    anchor = page.anchor(f"recipe-{recipe.name}")
    page.recipes.append(recipe.name)
    page.contents.append(("Recipes", anchor, f"{recipe.name} v{recipe.version}"))
    svg = render_recipe(recipe, "svg")
    assert isinstance(svg, str)
    required = set(recipe.inputs.get("required", []))
    inputs = [
        (
            f"<code>{_e(name)}</code>",
            "yes" if name in required else "",
            _json(prop.get("default")) if isinstance(prop, dict) and "default" in prop else "",
            _json({k: v for k, v in prop.items() if k not in ("default", "description")})
            if isinstance(prop, dict)
            else "",
            _e(prop.get("description", "")) if isinstance(prop, dict) else "",
        )
        for name, prop in recipe.inputs.get("properties", {}).items()
    ]
    steps = [_step_row(i, step) for i, step in enumerate(recipe.steps, 1)]
    facts = [("version", str(recipe.version)), ("source", _source(origin, recipe.path)), ("SHA-256", recipe.sha256)]
    if recipe.extends:
        facts.append(("extends", " < ".join(recipe.extends)))
    page.body.append(
        f'<article class="recipe" id="{anchor}" data-name="{_e(recipe.name)}">'
        f"<h3>{_e(recipe.name)}</h3>"
        + _facts(facts)
        + f"<p>{_e(recipe.description)}</p>"
        + _figure(svg, anchor, f"recipe {recipe.name}")
        + "<h4>Inputs</h4>"
        + _table(["input", "required", "default", "schema", "description"], inputs)
        + "<h4>Steps</h4>"
        + _table(
            ["#", "step", "do", "machine", "with", "when", "retry / timeout", "catch", "finally", "description"], steps
        )
        + "</article>"
    )


def _step_row(number: int, step: Step) -> tuple[str, ...]:
    operation = OPERATIONS.get(step.do)
    do = f"<code>{_e(step.do)}</code>"
    if operation is not None:
        do += f"<br><small>{_e(operation.description)}</small>"
    when = ""
    if step.when is not None:
        left, op, right = (step.when.get(k) for k in ("left", "op", "right"))
        when = f"<code>{_e(plain_value(left))} {_e(str(op))} {_e(plain_value(right))}</code>"
    limits = []
    if step.retry is not None:
        r = step.retry
        limits.append(f"retry {r.max_attempts}× (interval {r.interval:g} s, backoff {r.backoff_rate:g})")
    if step.timeout is not None:
        limits.append(f"timeout {step.timeout:g} s")
    catches = "".join(f"<li>{_e(', '.join(c.errors))} → <code>{_e(c.next)}</code></li>" for c in step.catch)
    return (
        str(number),
        f"<code>{_e(step.id)}</code>",
        do,
        f"<code>{_e(operation.machine)}</code>" if operation and operation.machine else "",
        _json(step.args) if step.args else "",
        when,
        _e("; ".join(limits)),
        f"<ul>{catches}</ul>" if catches else "",
        "finally" if step.final else "",
        _e(step.description),
    )


def _invalid(page: _Page, kind: str, name: str, origin: str, exc: SpecError) -> None:
    anchor = page.anchor(f"{kind}-{name}")
    page.invalid.append(f"{kind} {name}")
    page.contents.append((f"{kind.capitalize()}s", anchor, f"{name} (INVALID)"))
    items = "".join(f"<li><code>{_e(replace(d, path=_shown(d.path)).render())}</code></li>" for d in exc.diagnostics)
    page.body.append(
        f'<article class="{kind} invalid" id="{anchor}" data-name="{_e(name)}"><h3>{_e(name)} (invalid)</h3>'
        f"<p>This {origin} {kind} does not validate, so it is not drawn (run <code>corral validate</code>):</p>"
        f"<ul>{items}</ul></article>"
    )


# --- HTML ---------------------------------------------------------------------------------------------

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 auto;
       max-width: 1200px; padding: 1rem 2rem 4rem; color: #1b1b1b; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 2px solid #ddd; padding-bottom: .2rem; margin-top: 2.5rem; }
h3 { margin-top: 2.5rem; font-size: 1.35rem; } h4 { margin: 1.2rem 0 .4rem; }
article { border-top: 1px solid #eee; }
code { font: 13px/1.3 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; overflow-wrap: break-word; }
table { border-collapse: collapse; table-layout: fixed; width: 100%; max-width: 100%; margin: .3rem 0 1rem;
        font-size: 14px; }
th, td { border: 1px solid #ddd; padding: .3rem .45rem; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
td code { overflow-wrap: anywhere; }
th { background: #f6f8fa; } td ul { margin: 0; padding-left: 1.1rem; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .1rem .8rem; margin: .3rem 0; }
dl.facts dt { color: #666; } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
figure.drawing { margin: .8rem 0; padding: .5rem; border: 1px solid #eee; overflow-x: auto; }
figure.drawing svg { max-width: 100%; height: auto; }
nav ol ol { columns: 2; } nav li { break-inside: avoid-column; } .invalid h3 { color: #b00020; }
"""


def page_html(page: _Page) -> str:
    """The whole document: head (inline style only), table of contents, sections."""
    groups: dict[str, list[str]] = {}
    for group, anchor, text in page.contents:
        groups.setdefault(group, []).append(f'<li><a href="#{anchor}">{_e(text)}</a></li>')
    contents = "".join(groups.pop("", []))
    for group, items in groups.items():
        contents += f'<li><a href="#{_e(group.lower())}">{_e(group)}</a><ol>{"".join(items)}</ol></li>'
    summary = f"{len(page.machines)} machine(s), {len(page.recipes)} recipe(s)"
    if page.invalid:
        summary += f", {len(page.invalid)} invalid definition(s)"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>corral {_e(__version__)} review pack</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<header><h1>corral review pack</h1><p>corral {_e(__version__)}: {_e(summary)}.</p></header>"
        f'<nav id="contents"><h2>Contents</h2><ol>{contents}</ol></nav>' + "".join(page.body) + "</body></html>\n"
    )


def _figure(svg: str, prefix: str, caption: str) -> str:
    return f'<figure class="drawing">{inline_svg(svg, prefix, caption)}<figcaption>{_e(caption)}</figcaption></figure>'


_PROLOGUE = re.compile(r"<\?xml.*?\?>|<!DOCTYPE[^>]*>|<!--.*?-->", re.DOTALL)
_XMLNS = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_ID = re.compile(r'\bid="([^"]*)"')
_LOCAL_REF = re.compile(r'url\(#([^)]*)\)|href="#([^"]*)"')


def inline_svg(svg: str, prefix: str, label: str) -> str:
    """Graphviz SVG made fit to inline: no prologue or namespace declarations, ids unique per drawing."""
    body = _XMLNS.sub("", _PROLOGUE.sub("", svg)).strip()
    body = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', body)
    body = _LOCAL_REF.sub(
        lambda m: f"url(#{prefix}-{m.group(1)})" if m.group(1) is not None else f'href="#{prefix}-{m.group(2)}"',
        body,
    )
    return body.replace("<svg", f'<svg role="img" aria-label="{_e(label)}"', 1)


# Relative column widths by header (others weigh 10). The tables are laid out fixed (table-layout:
# fixed): a column is as wide as its share, never as wide as its longest unbreakable name or digest,
# which then wraps (overflow-wrap: anywhere) instead of pushing the table past the page's margin.
_COLUMN_WEIGHTS = {
    "#": 3,
    "nullable": 7,
    "secret": 6,
    "required": 7,
    "finally": 6,
    "kind": 9,
    "state": 13,
    "trigger": 10,
    "source": 13,
    "dest": 14,
    "guards": 23,
    "updates": 17,
    "effects": 15,
    "outcomes": 14,
    "schema": 20,
    "$id": 35,
    "SHA-256": 45,
    "do": 16,
    "with": 16,
    "description": 20,
}


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    weights = [_COLUMN_WEIGHTS.get(h, 10) for h in headers]
    cols = "".join(f'<col style="width: {100 * w / sum(weights):.1f}%">' for w in weights)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _facts(pairs: Sequence[tuple[str, str]]) -> str:
    return '<dl class="facts">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in pairs) + "</dl>"


def _json(value: Any) -> str:
    return f"<code>{_e(json.dumps(value, ensure_ascii=False, sort_keys=True))}</code>"


def _source(origin: str, path: Path | str | None) -> str:
    """Where a definition comes from (:func:`_shown`)."""
    return origin if path is None else f"{origin}, {_shown(path)}"


def _shown(path: Path | str) -> str:
    """A definition's path with no local absolute path in it (the pack goes in a pull request): a
    built-in one relative to corral's data (``machines/controller.yaml``), a local one relative to
    the working directory, or its last two parts (``…/machines/turnstile.yaml``) when outside it."""
    file = Path(path)
    if not file.is_absolute():
        return file.as_posix()
    for root in (data_dir("machines").parent, Path.cwd()):
        try:
            return file.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
    return f"…/{'/'.join(file.parts[-2:])}"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
