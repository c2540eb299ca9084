"""Shared test set-up. mtdecode is not imported at module level here, so that jaxtyping's
pytest plugin (see `addopts` in pyproject.toml) can instrument it with beartype first.

Hypothesis profiles: `default` (20 examples, unless a test sets fewer) keeps `make test` within its time;
`thorough` runs 20x more examples; `hosts` (12 examples) is what `make test-hosts` runs under every kernel set. Choose
with `MTDECODE_HYPOTHESIS_PROFILE=thorough make test`.
"""

import contextlib
import os
import tempfile

import beartype  # noqa: F401
import jaxtyping
import pytest
import torch
import transformers.modeling_utils  # noqa: F401
from hypothesis import HealthCheck, settings

# beartype and transformers' model code are imported here, before mtdecode: while jaxtyping's import hook runs an
# mtdecode module, whatever that module imports first looks for bytecode under the hook's own cache name, finds
# none and is compiled from source (about 1,700 modules, 3 to 4 s in every worker)

DEFAULT_EXAMPLES = 20
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
settings.register_profile(  # `make test-hosts`: the same tests under other kernels, fewer examples
    "hosts",
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile(os.environ.get("MTDECODE_HYPOTHESIS_PROFILE", "default"))

# MTDECODE_TEST_THREADS=n pins torch's thread count for every test (`make test-hosts` runs 1 and 2:
# another thread count splits sums differently, as another host would). Otherwise, under pytest-xdist
# every worker is a process of its own: share the cores among them, or two workers of two threads
# each on two cores would spend their time waiting for each other.
PINNED_THREADS = os.environ.get("MTDECODE_TEST_THREADS")
if PINNED_THREADS:
    torch.set_num_threads(int(PINNED_THREADS))
elif "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
# the Python processes a test starts (the CLI, another project's pytest, the bridge's worker, a second process
# for seeds) get the same share: with every core each, they would wait for the other workers' threads. Set, not
# set by default: pytest-xdist's controller runs this file first, with every core, and its workers inherit its
# environment (without it every such process ran 2 threads beside a busy worker: another project's pytest took
# 52 s beside a notebook instead of 14 s)
os.environ["OMP_NUM_THREADS"] = str(torch.get_num_threads())


# Measured costs are kept on disk between processes (`mtdecode.store`). The tests keep theirs in a folder of this
# run's own, so that no test reads what an earlier run measured, and nothing is written to the user's cache.
os.environ.setdefault("MTDECODE_COSTS_DIR", tempfile.mkdtemp(prefix="mtdecode-test-costs-"))


def _devices():
    yield "cpu"
    if torch.cuda.is_available():
        yield "cuda"
    else:
        yield pytest.param("cuda", marks=pytest.mark.skip(reason="torch sees no CUDA GPU on this machine"))


#: parametrise a test over every device torch can use (CUDA skipped, with the reason, where absent)
DEVICES = list(_devices())


@pytest.fixture(autouse=True)
def no_unseeded_randomness(monkeypatch):
    """`generate(seed=None)` seeds itself from the operating system's entropy; in a test it gets a constant
    instead, so that no outcome (Jacobi's steps, say) depends on unseeded randomness. Imported here,
    not at module level, so that jaxtyping's plugin instruments mtdecode first."""
    from mtdecode import sampling

    monkeypatch.setattr(sampling, "fresh_seed", lambda: 0)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny forwards are dominated by thread hand-offs; one thread is several times faster
    (unless MTDECODE_TEST_THREADS pins the count)."""
    threads = torch.get_num_threads()
    if not PINNED_THREADS:
        torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def types_unchecked():
    """jaxtyping's type checks off inside the block (its pytest plugin has them on everywhere else). For work whose
    types other tests check already: a check costs tens of microseconds a call, and a tiny model's forward
    makes dozens of checked calls, so checks take about two thirds of a tiny model's decoding time."""
    checking = not jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", not checking)


@pytest.fixture
def unchecked():
    """`types_unchecked` for a whole test. The sampling laws' thousands of seeded runs (`test_*_sampling.py`) take it:
    every strategy's sampled path runs with the checks on in `test_batch.py` (a sampled row against its prompt alone),
    and checking the laws' runs again made those three files about a tenth slower (72 s against 66 s, one process on
    one thread)."""
    with types_unchecked():
        yield


#: tests that take 20 s or more of a worker (notebooks, processes started afresh, the third-party samplers' laws, the
#: tensor-parallel launch that all of its module's tests share)
SLOWEST = (
    "tests/test_tensor_parallel.py",
    "tests/test_tutorials.py::test_the_notebook_runs",
    "tests/test_seeds.py::test_a_seed_repeats_across_processes",
    "tests/test_oracle.py::test_a_correct_third_party_speculative_decoder_conforms",
    "tests/test_oracle.py::test_transformers_assisted_generation_samples_the_target_law",
)


def pytest_collection_modifyitems(config, items):
    """Run the slowest tests first. pytest-xdist's work stealing moves tests that have not started between workers
    but never splits one that has, so a 50-s notebook started last keeps one worker busy while the other idles;
    started first, the short tests even the workers out at the end. The order changes nothing else: every test
    sets up what it needs (`make test-hosts` shuffles it)."""
    items.sort(key=lambda item: not item.nodeid.startswith(SLOWEST))
