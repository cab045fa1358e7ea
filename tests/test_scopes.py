"""Path scopes: the normalization table, the refusals, overlap, and properties over generated paths."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner import scopes
from runner.errors import InputError

# (raw scopes, canonical tuple)
CANONICAL: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("src",), ("src",)),
    (("./src/",), ("src",)),
    (("src/",), ("src",)),
    (("a/b/",), ("a/b",)),
    (("./a/b",), ("a/b",)),
    (("././a",), ("a",)),
    (("src//",), ("src",)),
    (("a.py",), ("a.py",)),
    (("src/pkg/mod.py",), ("src/pkg/mod.py",)),
    ((".github/workflows",), (".github/workflows",)),
    (("..a",), ("..a",)),
    (("a..",), ("a..",)),
    (("a/.b/c",), ("a/.b/c",)),
    (("...",), ("...",)),
    (("docs/read me.md",), ("docs/read me.md",)),
    (("données/ファイル.txt",), ("données/ファイル.txt",)),
    (("a-b_c~1",), ("a-b_c~1",)),
    (("b", "a"), ("a", "b")),
    (("a", "./a", "a/", "./a/"), ("a",)),
    (("src/x.py", "src"), ("src", "src/x.py")),
    (("z/y", "z", "a/b/c", "a"), ("a", "a/b/c", "z", "z/y")),
    (("B", "a", "b"), ("B", "a", "b")),
    ((), ()),
]

# (raw scope, why it is refused)
REFUSED: list[tuple[str, str]] = [
    ("", "empty"),
    (" ", "whitespace only"),
    ("   ", "whitespace only"),
    (" \t\n ", "whitespace only"),
    ("\\", "backslash"),
    ("src\\a.py", "backslash"),
    ("*", "glob *"),
    ("src/*.py", "glob *"),
    ("a?", "glob ?"),
    ("[ab]", "glob []"),
    ("a[", "glob ["),
    ("a]", "glob ]"),
    ("{a,b}", "glob {}"),
    ("a{", "glob {"),
    ("a}", "glob }"),
    ("/src", "absolute"),
    ("/", "absolute"),
    ("//", "absolute"),
    (".", "whole repository"),
    ("./", "whole repository"),
    ("././", "whole repository"),
    ("..", "parent"),
    ("../a", "parent"),
    ("a/..", "parent"),
    ("a/../b", "parent"),
    ("a/./b", "dot segment"),
    ("a/.", "dot segment"),
    ("a//b", "empty segment"),
    (".//a", "empty segment"),
    ("a\x00b", "NUL"),
    ("a\nb", "newline"),
    ("a\tb", "tab"),
    ("\x1b[31m", "escape"),
    ("a\x1f", "unit separator"),
    ("a\x7fb", "DEL"),
    ("a" * (scopes.MAX_SCOPE_LENGTH + 1), "too long"),
]


@pytest.mark.parametrize(("raw", "canonical"), CANONICAL, ids=[repr(r) for r, _ in CANONICAL])
def test_normalize_gives_the_canonical_form(raw: tuple[str, ...], canonical: tuple[str, ...]) -> None:
    assert scopes.normalize(raw) == canonical
    assert scopes.normalize(canonical) == canonical, "canonical forms are fixed points"


@pytest.mark.parametrize(("raw", "why"), REFUSED, ids=[f"{w}:{r[:20]!r}" for r, w in REFUSED])
def test_refusals_say_scope_invalid_and_name_the_field(raw: str, why: str) -> None:
    with pytest.raises(InputError) as caught:
        scopes.normalize_one(raw, "owned_scopes")
    assert caught.value.code == "scope_invalid", why
    assert caught.value.details["field"] == "owned_scopes"
    with pytest.raises(InputError) as in_a_list:  # one bad scope spoils the list
        scopes.normalize(["src", raw, "docs"], "locked_scopes")
    assert (in_a_list.value.code, in_a_list.value.details["field"]) == ("scope_invalid", "locked_scopes")


def test_the_longest_allowed_scope_is_accepted() -> None:
    longest = "a" * scopes.MAX_SCOPE_LENGTH
    assert scopes.normalize_one(longest) == longest


@pytest.mark.parametrize("raw", ["a\x85b", "src\x9b31m"])
def test_c1_control_characters_are_refused(raw: str) -> None:
    with pytest.raises(InputError) as caught:
        scopes.normalize_one(raw)
    assert caught.value.code == "scope_invalid"


# (a, b, overlaps)
OVERLAPS: list[tuple[str, str, bool]] = [
    ("src", "src", True),
    ("src", "src/a.py", True),
    ("src", "src/pkg/deep/a.py", True),
    ("a/b", "a", True),
    ("src", "srcx", False),
    ("src", "sr", False),
    ("src", "src.py", False),
    ("src/a", "src/ab", False),
    ("src/a.py", "src/b.py", False),
    ("a/b", "b", False),
    ("a/b", "b/a", False),
    ("docs", "src/docs", False),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAPS)
def test_overlap_is_equal_or_ancestor_and_symmetric(a: str, b: str, expected: bool) -> None:
    assert scopes.overlaps(a, b) is expected
    assert scopes.overlaps(b, a) is expected


def test_conflicts_lists_every_overlapping_pair_sorted() -> None:
    mine = ("src/x.py", "docs", "tests")
    theirs = ("src", "docs/guide.md", "docsx", "docs")
    assert scopes.conflicts(mine, theirs) == [("docs", "docs"), ("docs", "docs/guide.md"), ("src/x.py", "src")]
    assert scopes.conflicts(mine, ()) == []
    assert scopes.conflicts(iter(["a"]), iter(["a/b", "b"])) == [("a", "a/b")], "iterables are read once"


# --- properties ---------------------------------------------------------------------------------------

VALID_SEGMENTS = st.sampled_from(["a", "b", "ab", "src", "x.py", ".a", "a.", "..a", "...", "a b", "é"])
ANY_SEGMENTS = st.one_of(VALID_SEGMENTS, st.sampled_from([".", "..", "", "*", "\\", "\x00"]))


def _raw(segments: st.SearchStrategy[str], prefixes: list[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda prefix, parts, trailing: prefix + "/".join(parts) + trailing,
        st.sampled_from(prefixes),
        st.lists(segments, min_size=1, max_size=5),
        st.sampled_from(["", "/", "//"]),
    )


VALID = _raw(VALID_SEGMENTS, ["", "./", "././"])  # always accepted
ANY = _raw(ANY_SEGMENTS, ["", "./", "././", "/", ".//"])  # often refused


def _normalized_or_none(raw: str) -> str | None:
    try:
        return scopes.normalize_one(raw)
    except InputError as exc:
        assert exc.code == "scope_invalid"
        return None


def _reference_overlap(a: str, b: str) -> bool:
    x, y = a.split("/"), b.split("/")
    shorter = min(len(x), len(y))
    return x[:shorter] == y[:shorter]


@given(ANY)
def test_normalize_one_refuses_or_gives_a_canonical_fixed_point(raw: str) -> None:
    once = _normalized_or_none(raw)
    if once is None:
        return
    assert scopes.normalize_one(once) == once
    parts = once.split("/")
    assert "" not in parts and "." not in parts and ".." not in parts
    assert not once.startswith("/") and not once.endswith("/")


@given(
    st.lists(VALID_SEGMENTS, min_size=1, max_size=5), st.sampled_from(["", "./", "././"]), st.sampled_from(["", "/"])
)
def test_decorations_do_not_change_the_scope(parts: list[str], prefix: str, trailing: str) -> None:
    bare = "/".join(parts)
    assert scopes.normalize_one(prefix + bare + trailing) == bare


@given(st.lists(ANY, max_size=8))
def test_normalize_is_idempotent_sorted_and_deduplicated(raws: list[str]) -> None:
    valid = [r for r in raws if _normalized_or_none(r) is not None]
    once = scopes.normalize(valid)
    assert scopes.normalize(once) == once
    assert list(once) == sorted(set(once))
    assert set(once) == {scopes.normalize_one(r) for r in valid}


@given(VALID, VALID)
def test_overlaps_is_symmetric_and_means_a_path_prefix(x: str, y: str) -> None:
    a, b = scopes.normalize_one(x), scopes.normalize_one(y)
    assert scopes.overlaps(a, b) == scopes.overlaps(b, a)
    assert scopes.overlaps(a, b) == _reference_overlap(a, b)
    assert scopes.overlaps(a, a)


@given(st.text(max_size=12), st.text(max_size=12))
def test_overlaps_is_symmetric_on_any_text(a: str, b: str) -> None:
    assert scopes.overlaps(a, b) == scopes.overlaps(b, a)


_SEGMENT = st.sampled_from(["a", "b", "src", "srcx", "a.py", "b.py", "x"])
_SCOPE = st.lists(_SEGMENT, min_size=1, max_size=4).map("/".join)


@given(st.lists(_SCOPE, max_size=12), st.lists(_SCOPE, max_size=12))
def test_the_indexed_conflict_check_finds_exactly_the_overlapping_pairs(mine: list[str], theirs: list[str]) -> None:
    """Issue 13: the index gives the same answers as the pair-by-pair check."""
    pairwise = sorted({(a, b) for a in mine for b in theirs if scopes.overlaps(a, b)})
    assert scopes.conflicts(mine, theirs) == pairwise


def test_the_conflict_check_scales_with_the_scopes_not_their_product() -> None:
    mine = [f"lane0/dir{i}/file.py" for i in range(2000)] + ["shared"]
    theirs = [f"lane1/dir{i}/file.py" for i in range(2000)] + ["shared/deep/x.py"]
    assert scopes.conflicts(mine, theirs) == [("shared", "shared/deep/x.py")]
