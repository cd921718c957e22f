"""Reading per-test outcomes from pytest's -rA summary: real output shapes and properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rollstream.consumers.score.evaluators.pytest_summary import MISSING, outcomes, passed
from rollstream.consumers.score.evaluators.swe import patched_paths

SUMMARY = """\
============================= test session starts ==============================
collected 5 items

test_x.py .F.sx                                                          [100%]

=================================== FAILURES ===================================
FAILED test_x.py::test_b[a - b-c] - AssertionError: assert 'a' == 'b'
=========================== short test summary info ============================
PASSED test_x.py::test_a
PASSED test_x.py::test_t[action web service-Action Web Service]
FAILED test_x.py::test_b[a - b-c] - AssertionError: assert 'a' == 'b'
SKIPPED [1] test_x.py:9: not here
XFAIL test_x.py::test_known - a known bug
ERROR test_y.py::test_setup - RuntimeError: fixture broke
=================== 1 failed, 2 passed, 1 skipped, 1 xfailed ===================
"""


def test_each_asked_test_gets_its_outcome_even_with_spaces_and_dashes_in_its_id() -> None:
    asked = [
        "test_x.py::test_a",
        "test_x.py::test_t[action web service-Action Web Service]",
        "test_x.py::test_b[a - b-c]",
        "test_x.py::test_known",
        "test_y.py::test_setup",
        "test_x.py::test_never_ran",
    ]
    assert outcomes(SUMMARY, asked) == {
        "test_x.py::test_a": "PASSED",
        "test_x.py::test_t[action web service-Action Web Service]": "PASSED",
        "test_x.py::test_b[a - b-c]": "FAILED",
        "test_x.py::test_known": "XFAIL",
        "test_y.py::test_setup": "ERROR",
        "test_x.py::test_never_ran": MISSING,
    }
    assert passed(outcomes(SUMMARY, asked), asked) == [asked[0], asked[1], asked[3]]


def test_a_prefix_of_another_id_is_not_mistaken_for_it() -> None:
    output = "FAILED t.py::test[x] - y] - boom - again\nPASSED t.py::test[x]\n"
    assert outcomes(output, ["t.py::test[x]", "t.py::test[x] - y]"]) == {
        "t.py::test[x]": "PASSED",
        "t.py::test[x] - y]": "FAILED",
    }


STATUSES = st.sampled_from(["PASSED", "FAILED", "ERROR", "XFAIL", "XPASS"])
IDS = st.text(
    st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\r\n\x85"),
    min_size=1,
    max_size=30,
).map(lambda s: f"tests/t.py::test[{s}]")


@given(
    reported=st.dictionaries(IDS, st.tuples(STATUSES, st.booleans()), max_size=12),
    unreported=st.lists(IDS, max_size=4),
)
def test_every_reported_test_reads_back_and_the_rest_are_missing(
    reported: dict[str, tuple[str, bool]], unreported: list[str]
) -> None:
    lines = [
        f"{status} {test} - some message - with dashes" if message else f"{status} {test}"
        for test, (status, message) in reported.items()
    ]
    asked = [*reported, *(t for t in unreported if t not in reported)]
    found = outcomes("\n".join(["noise", *lines, "== 3 passed =="]), asked)
    assert found == {t: reported[t][0] if t in reported else MISSING for t in asked}


def test_the_files_a_test_patch_touches() -> None:
    patch = (
        "diff --git a/tests/test a.py b/tests/test a.py\n"
        "--- a/tests/test a.py\n+++ b/tests/test a.py\n@@ -1,2 +1,2 @@\n"
        "--- a/not/a/path.py\n+x\n"  # a removed line "-- a/not/a/path.py", not a header
        "diff --git a/tests/old.py b/tests/new.py\n"
        "rename from tests/old.py\nrename to tests/new.py\n"
        "diff --git a/tests/added.py b/tests/added.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/added.py\n@@ -0,0 +1 @@\n+y\n"
    )
    assert patched_paths(patch) == [
        "tests/test a.py",
        "tests/old.py",
        "tests/new.py",
        "tests/added.py",
    ]
