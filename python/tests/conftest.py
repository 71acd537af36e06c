"""Runs the suite on every PE of the job (launch: `rshmemrun -n 4 python -m pytest python/tests`,
or scripts/test-python). Every PE collects the same tests in the same order, so the collective
calls inside them match; rshmem starts once per process, for the whole session."""

import os

import pytest

import rshmem


@pytest.fixture(scope="session", autouse=True)
def world():
    rshmem.init()
    yield
    rshmem.finalize()


@pytest.fixture
def gpu():
    """Skips (never passes) a GPU test on the CPU backend; gives torch on the GPU backend."""
    if rshmem.backend() != "gpu":
        pytest.skip("needs the GPU backend (a CUDA GPU per PE)")
    torch = pytest.importorskip("torch")
    return torch


@pytest.fixture
def cpu():
    if rshmem.backend() != "cpu":
        pytest.skip("a CPU-backend (NumPy) test")


def pytest_report_header(config):
    return f"rshmem: RSHMEM_RANK={os.environ.get('RSHMEM_RANK', '-')}"

