"""`make test` runs the suite on two pytest-xdist workers; the tests sharing an expensive session
fixture (the tiny end-to-end run) must run on one worker, or each worker builds it again."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tests_sharing_the_tiny_run_land_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(  # the suite's own hook, from its conftest
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(ROOT / 'tests/conftest.py')!r})\n"
        "suite = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(suite)\n"
        "pytest_collection_modifyitems = suite.pytest_collection_modifyitems\n")
    body = "import os, pytest\n\n@pytest.fixture(scope='session')\ndef tiny_workflow():\n    return 1\n\n"
    body += "".join(f"def test_shared_{i}(tiny_workflow):\n    pass\n\n" for i in range(4))
    body += "".join(f"def test_alone_{i}():\n    pass\n\n" for i in range(4))
    (tmp_path / "test_groups.py").write_text(body)
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
                        "-o", "addopts=", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:]
    workers = {m.group(2): m.group(1) for m in re.finditer(r"\[(gw\d)\].*PASSED \S*::(test_\w+)", r.stdout)}
    assert len(workers) == 8, r.stdout[-2000:]
    assert len({workers[f"test_shared_{i}"] for i in range(4)}) == 1, workers
