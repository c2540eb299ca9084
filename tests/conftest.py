"""Shared test set-up. mtdecode is not imported at module level here, so that jaxtyping's
pytest plugin (see `addopts` in pyproject.toml) can instrument it with beartype first.

Hypothesis profiles: `default` keeps `make test` fast; `thorough` runs 20x more
examples. Choose with `MTDECODE_HYPOTHESIS_PROFILE=thorough make test`.
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 12
settings.register_profile(
    "default",
    max_examples=DEFAULT_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile(
    "thorough",
    max_examples=20 * DEFAULT_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("MTDECODE_HYPOTHESIS_PROFILE", "default"))

# Under pytest-xdist every worker is a process of its own: share the cores among them, or
# two workers of two threads each on two cores would spend their time waiting for each other.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def _devices():
    yield "cpu"
    if torch.cuda.is_available():
        yield "cuda"
    else:
        yield pytest.param("cuda", marks=pytest.mark.skip(reason="torch sees no CUDA GPU on this machine"))


#: parametrise a test over every device torch can use (CUDA skipped, with the reason, where absent)
DEVICES = list(_devices())


@pytest.fixture(scope="module")
def one_thread():
    """Tiny forwards are dominated by thread hand-offs; one thread is several times faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
