"""Loading, schema validation and lint of machine definitions: each finding has a code and a line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.definitions.library import Library, validate_file
from runner.errors import SpecError

HEADER = "# yaml-language-server: $schema=../schemas/machine.schema.json\n"

GOOD = """\
machine: {name}
version: 1
description: A test machine.
initial: idle
states:
  idle: {{description: nothing yet}}
  busy: {{description: working}}
  done: {{description: finished, terminal: true}}
transitions:
  - trigger: go
    source: idle
    dest: busy
  - trigger: finish
    source: busy
    dest: done
"""


def write(tmp_path: Path, body: str, name: str = "sample", header: bool = True) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text((HEADER if header else "") + textwrap.dedent(body))
    return path


def codes(path: Path) -> list[tuple[str, str, int | None]]:
    report, _ = validate_file(path)
    return [(d.code, d.severity, d.line) for d in report.diagnostics]


def test_builtin_machines_validate_cleanly() -> None:
    library = Library()
    paths = library.builtin_paths()
    assert [p.stem for p in paths] == ["adopted", "controller", "pane", "plan", "receipt", "reviewer", "wake", "writer"]
    for path in paths:
        report, spec = validate_file(path)
        assert report.diagnostics == [], [d.render() for d in report.diagnostics]
        assert spec is not None and spec.name == path.stem


def test_good_machine_has_no_findings(tmp_path: Path) -> None:
    report, spec = validate_file(write(tmp_path, GOOD.format(name="sample")))
    assert report.ok and report.diagnostics == []
    assert spec is not None
    assert [t.trigger for t in spec.transitions] == ["go", "finish"]


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "machine: x\nstates: [unclosed\n")
    report, spec = validate_file(path)
    assert spec is None
    (diagnostic,) = report.diagnostics
    assert diagnostic.code == "spec_yaml"
    assert diagnostic.line is not None and diagnostic.line >= 3  # after the header line


def test_duplicate_key_is_an_error_not_an_overwrite(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("version: 1\n", "version: 1\nversion: 2\n")
    assert codes(write(tmp_path, body)) == [("spec_duplicate_key", "error", 4)]


def test_unsafe_tag_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "machine: !!python/object/apply:os.system ['true']\n")
    assert [c for c, _, _ in codes(path)] == ["spec_yaml"]


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    assert [c for c, _, _ in codes(path)] == ["spec_yaml"]


def test_schema_violation_points_at_the_field(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("    dest: busy\n", "    dest: busy\n    colour: red\n")
    report, _ = validate_file(write(tmp_path, body))
    (diagnostic,) = report.diagnostics
    assert diagnostic.code == "spec_invalid"
    assert diagnostic.pointer == "/transitions/0"
    assert "colour" in diagnostic.message
    assert diagnostic.line == 11


def test_schema_violation_wrong_type_has_pointer_and_line(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("version: 1", "version: one")
    report, _ = validate_file(write(tmp_path, body))
    assert [(d.code, d.pointer, d.line) for d in report.diagnostics] == [("spec_invalid", "/version", 3)]


def test_unknown_guard_update_and_effect(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace(
        "    dest: busy\n",
        "    dest: busy\n    guards: [no_such_guard]\n    updates: [no_such_update]\n",
    )
    assert codes(write(tmp_path, body)) == [
        ("spec_unknown_guard", "error", 14),
        ("spec_unknown_update", "error", 15),
    ]


def test_effect_needs_intermediate_dest_and_known_name(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace(
        "    dest: busy\n",
        "    dest: busy\n    effects: [start_rocket]\n    outcomes: {success: done, failure: done}\n",
    )
    found = {c for c, _, _ in codes(write(tmp_path, body))}
    assert found == {"spec_effect_dest", "spec_unknown_effect"}


def test_effects_without_outcomes_is_a_schema_error(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("    dest: busy\n", "    dest: busy\n    effects: [x]\n")
    assert [c for c, _, _ in codes(write(tmp_path, body))] == ["spec_invalid"]


def test_bad_guard_arguments(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace(
        "    dest: busy\n", "    dest: busy\n    guards: [{name: fence, with: {allow_expird: true}}]\n"
    )
    assert codes(write(tmp_path, body)) == [("spec_bad_arguments", "error", 14)]


def test_unknown_states(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("initial: idle", "initial: nowhere").replace("dest: done", "dest: gone")
    found = [(c, line) for c, _, line in codes(write(tmp_path, body))]
    assert ("spec_unknown_state", 5) in found
    assert ("spec_unknown_state", 16) in found


def test_unreachable_state_is_an_error_and_dead_end_a_warning(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace(
        "  done: {description: finished, terminal: true}\n",
        "  done: {description: finished, terminal: true}\n  island: {description: nobody comes here}\n",
    )
    report, spec = validate_file(write(tmp_path, body))
    found = sorted((d.code, d.severity, d.pointer) for d in report.diagnostics)
    assert found == [
        ("spec_dead_end", "warning", "/states/island"),
        ("spec_unreachable_state", "error", "/states/island"),
    ]
    assert spec is None


def test_dead_end_alone_is_only_a_warning(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("finished, terminal: true", "finished")
    report, spec = validate_file(write(tmp_path, body))
    assert [(d.code, d.severity) for d in report.diagnostics] == [("spec_dead_end", "warning")]
    assert report.ok and spec is not None


def test_transition_out_of_terminal_state(tmp_path: Path) -> None:
    body = GOOD.format(name="sample") + "  - trigger: again\n    source: done\n    dest: idle\n"
    assert ("spec_terminal_exit", "error", 18) in codes(write(tmp_path, body))


def test_wildcard_source_skips_terminal_states(tmp_path: Path) -> None:
    body = GOOD.format(name="sample") + "  - trigger: abort\n    source: '*'\n    dest: done\n"
    report, spec = validate_file(write(tmp_path, body))
    assert report.diagnostics == []
    assert spec is not None
    assert spec.transitions_for("abort", "done") == []
    assert [t.trigger for t in spec.transitions_for("abort", "busy")] == ["abort"]


@pytest.mark.parametrize("second_guards", ["", "    guards: [fence]\n"])
def test_unguarded_transition_shadows_later_ones(tmp_path: Path, second_guards: str) -> None:
    # The first 'go' from idle has no guards, so a later 'go' from idle can never fire, guarded or not.
    body = GOOD.format(name="sample") + "  - trigger: go\n    source: idle\n    dest: done\n" + second_guards
    assert codes(write(tmp_path, body)) == [("spec_ambiguous_transition", "error", 17)]


def test_same_trigger_told_apart_by_guards(tmp_path: Path) -> None:
    body = (
        GOOD.format(name="sample")
        .replace("    source: idle\n    dest: busy\n", "    source: idle\n    dest: busy\n    guards: [fence]\n")
        .rstrip("\n")
        + "\n  - trigger: go\n    source: idle\n    dest: done\n    guards: [lease_expired]\n"
        + "  - trigger: go\n    source: idle\n    dest: done\n    guards: [lease_expired]\n"
    )
    found = [(c, line) for c, _, line in codes(write(tmp_path, body))]
    # Two differently guarded candidates are fine; the third repeats the second's guards exactly.
    assert found == [("spec_ambiguous_transition", 22)]


def test_missing_schema_comment_and_name_mismatch_are_warnings(tmp_path: Path) -> None:
    report, spec = validate_file(write(tmp_path, GOOD.format(name="other"), name="sample", header=False))
    assert sorted(d.code for d in report.diagnostics) == ["spec_name_mismatch", "spec_schema_comment"]
    assert report.ok and spec is not None


def test_recipe_plan_and_unknown_documents_are_told_apart(tmp_path: Path) -> None:
    from runner.service.definitions import ValidateInput, validate

    recipe = write(tmp_path, "recipe: review\nsteps: []\n", name="review")
    plan = write(tmp_path, "plan: p1\nrecipe: review\ncontroller: c\n", name="p1")
    other = write(tmp_path, "hello: world\n", name="other")
    assert [c for c, _, _ in codes(other)] == ["spec_unknown_kind"]
    reports = {r.path.rsplit("/", 1)[-1]: r for r in validate(Library(), ValidateInput((recipe, plan)))}
    assert reports["review.yaml"].kind == "recipe"
    assert {d.code for d in reports["review.yaml"].diagnostics} == {"spec_invalid"}
    assert reports["p1.yaml"].kind == "plan"
    assert [d.code for d in reports["p1.yaml"].diagnostics] == ["inputs_invalid"]


def test_library_load_raises_spec_error_with_every_diagnostic(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("    dest: busy\n", "    dest: busy\n    guards: [nope, nada]\n")
    with pytest.raises(SpecError) as caught:
        Library().load(write(tmp_path, body))
    assert caught.value.code == "spec_unknown_guard"
    assert len(caught.value.diagnostics) == 2
    assert "sample.yaml:14:14" in caught.value.message


def test_spec_cache_skips_revalidation_and_follows_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    path = write(tmp_path, GOOD.format(name="sample"))
    first = Library(cache_dir=cache).load(path)
    assert len(list(cache.glob("*.json"))) == 1

    import runner.definitions.library as library_module

    def fail(_: Path) -> None:
        raise AssertionError("a cached spec must not be validated again")

    monkeypatch.setattr(library_module, "validate_file", fail)
    again = Library(cache_dir=cache).load(path)
    assert again.to_json() == first.to_json()

    monkeypatch.undo()
    path.write_text(path.read_text().replace("A test machine.", "Changed."))
    changed = Library(cache_dir=cache).load(path)
    assert changed.description == "Changed."
    assert len(list(cache.glob("*.json"))) == 2


def test_damaged_cache_entry_is_revalidated(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = write(tmp_path, GOOD.format(name="sample"))
    Library(cache_dir=cache).load(path)
    (entry,) = cache.glob("*.json")
    entry.write_text("{not json")
    assert Library(cache_dir=cache).load(path).name == "sample"


def test_yaml_12_booleans_keep_state_names_like_off(tmp_path: Path) -> None:
    body = GOOD.format(name="sample").replace("idle", "off").replace("busy", "on")
    report, spec = validate_file(write(tmp_path, body))
    assert report.diagnostics == []
    assert spec is not None and spec.initial == "off" and set(spec.states) == {"off", "on", "done"}
    assert spec.states["done"].terminal is True


@pytest.mark.parametrize(
    "text",
    [
        "machine: !!python/name:os.system ''\n",
        "machine: !custom {a: 1}\n",
        "machine: !!python/object/apply:os.system ['true']\n",
    ],
)
def test_every_unsafe_tag_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text(text)
    assert [c for c, _, _ in codes(path)] == ["spec_yaml"]


def test_anchors_and_aliases_are_shared_not_expanded(tmp_path: Path) -> None:
    body = (
        GOOD.format(name="sample")
        .replace("    dest: busy\n", "    dest: busy\n    guards: &checks [fence]\n")
        .replace("    dest: done\n", "    dest: done\n    guards: *checks\n")
    )
    report, spec = validate_file(write(tmp_path, body))
    assert report.diagnostics == []
    assert spec is not None and [g.name for g in spec.transitions[1].guards] == ["fence"]


def test_alias_bombs_and_recursive_aliases_are_refused(tmp_path: Path) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n")
    report, _ = validate_file(bomb)
    assert [d.code for d in report.diagnostics] == ["spec_yaml"]
    assert "expands" in report.diagnostics[0].message
    loop = tmp_path / "loop.yaml"
    loop.write_text("machine: &m [*m]\n")
    report, _ = validate_file(loop)
    assert [d.code for d in report.diagnostics] == ["spec_yaml"]
