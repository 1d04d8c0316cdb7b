"""The test run's own set-up: ``--dist loadgroup`` really sends an xdist_group to one worker.

pytest-xdist names a test's group in its id (``...::test@group``), and that name is how it keeps the group on
one worker. With a pytest it does not support (9.2 with xdist 3.8) the name is silently lost, every group's
module fixture is then built on both workers, and the suite takes minutes longer; this test says so instead.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("grouping_check")


def test_a_grouped_test_carries_its_group_in_its_id(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@grouping_check"), (
        f"--dist loadgroup does not group tests with pytest {pytest.__version__}: "
        "install the pytest version pyproject.toml's dev extra names"
    )
