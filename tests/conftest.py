import importlib.util
from pathlib import Path

import pytest
import torch
from store_tasks import ENGINES, Stores

# tests/ is on sys.path (pyproject's pytest `pythonpath`): test files import helpers like synthetic.py.
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="module")
def single_threaded():
    """One FAISS and one torch thread for a module of tiny problems: on 2 shared cores OpenMP
    barriers stall whenever another process holds a core. Use with
    ``pytestmark = pytest.mark.usefixtures("single_threaded")``."""
    import faiss

    before = faiss.omp_get_max_threads(), torch.get_num_threads()
    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before[0])
    torch.set_num_threads(before[1])


@pytest.fixture
def planted():
    from synthetic import planted_gap_problem

    return planted_gap_problem(n_test=30)


# ------------------------------------------------------------------------------ the five-engine store suite
@pytest.fixture(params=list(ENGINES))
def engine(request) -> str:
    """Each of the five engines (its test id: ``[faiss]``, ``[milvus]``, ...); skipped when its client is missing."""
    module = ENGINES[request.param]
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} (pip install 'lfa-index[{request.param}]')")
    return request.param


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stores")


@pytest.fixture
def stores(engine, shared_root, tmp_path):
    """:class:`Stores` of this engine for one test."""
    opened = Stores(engine, shared_root, tmp_path)
    yield opened
    opened.close()
