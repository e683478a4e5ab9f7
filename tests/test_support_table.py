"""The committed support tables are what the tool itself says of every release in the corpus."""

from __future__ import annotations

from helpers import support_table
from helpers.selection import whole_matrix_only


@whole_matrix_only()  # every release of the corpus judged (2 minutes); CI judges its own releases elsewhere
def test_the_committed_tables_are_the_tools_own_verdicts():
    for path, text in support_table.rendered().items():
        assert path.read_text() == text, f"{path.name} is stale: run python tests/helpers/support_table.py --write"


def test_a_release_range_is_a_run_of_corpus_releases():
    releases = ["0.8.5", "0.9.0", "0.10.0", "0.17.1", "0.18.0"]
    assert support_table.ranges(releases, ["0.8.5", "0.9.0", "0.17.1"]) == "0.8.5 - 0.9.0, 0.17.1"
    assert support_table.ranges(releases, []) == "-"
