import sys
from pathlib import Path

import pytest
import torch

# tests/ holds a helper module (synthetic.py) imported by several test files.
sys.path.insert(0, str(Path(__file__).parent))

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def planted():
    from synthetic import planted_gap_problem

    return planted_gap_problem(n_test=30)
