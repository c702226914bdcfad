"""The Python examples of README.md run as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


#: The first line of an example too large for the test suite; another test runs it smaller.
NOT_RUN = "# not run by tests/test_readme.py"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index):
    if BLOCKS[index].startswith(NOT_RUN):
        pytest.skip(BLOCKS[index].splitlines()[0][2:])
    namespace = {}
    exec(compile(BLOCKS[index], f"README.md example {index + 1}", "exec"), namespace)
    if "res" in namespace:  # the tour's run converges and reports its history
        history = namespace["res"].history
        assert history["stationarity"][-1] < history["stationarity"][0]
