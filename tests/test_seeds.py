"""Seeds that repeat: a seeded `generate` with default settings gives the same tokens in another process on the
same host, even beside a busy neighbour, because the costs the drafting rules weigh are measured once and kept
on disk (`mtdecode.store`) instead of being timed afresh in every process. Different seeds give different tokens.
"""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: every strategy with its default settings, on tiny float32 models (a noisy copy of the target drafts, and Eagle
#: gets an untrained head), sampling a batch of two prompts at temperature 0.8; prints {strategy: rows} as JSON
RUN = """
import json, sys, torch
import mtdecode
from mtdecode.strategies import REGISTRY, needs_draft, Eagle
from mtdecode.testing import tiny_model
from mtdecode.testing.models import perturbed
from mtdecode.zoo.eagle import EagleHead

seeds = [int(seed) for seed in sys.argv[1:]]
target = tiny_model("llama", vocab_size=32, seed=3, dtype=torch.float32)
draft = perturbed(target, 0.3, seed=1)
torch.manual_seed(2)
weights = target.get_input_embeddings().weight, target.get_output_embeddings().weight
head = EagleHead(target.config, *weights, torch.arange(32)).eval()
prompts = [[1, 2, 3, 1, 2, 4, 1, 2, 3, 5], [7, 8, 9, 7, 8]]
out = {}
for seed in seeds:
    for name, cls in REGISTRY.items():
        strategy = cls(draft) if needs_draft(cls) else Eagle(head) if cls is Eagle else cls()
        result = mtdecode.generate(
            target, prompts, strategy, max_new_tokens=24, temperature=0.8, seed=seed, pad_token_id=0
        )
        out.setdefault(seed, {})[name] = [result.row(b) for b in range(len(prompts))]
print(json.dumps(out))
"""


def run(env: dict, *seeds: int) -> dict[str, dict]:
    """{seed: {strategy: rows}} from one new process that decodes with each seed in turn."""
    command = [sys.executable, "-c", RUN, *map(str, seeds)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@contextlib.contextmanager
def busy_neighbour():
    """A process spinning while the block runs, as on a shared machine (one, not one per core: the tests' other
    workers share these cores, and the run it competes with has one thread)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def test_a_seed_repeats_across_processes_with_default_settings(tmp_path: Path):
    env = dict(os.environ, MTDECODE_COSTS_DIR=str(tmp_path / "costs"), OMP_NUM_THREADS="1")
    first = run(env, 7)["7"]  # measures the costs and keeps them
    assert sorted(tmp_path.joinpath("costs").glob("forward-*.json")), "the first process kept no costs"
    with busy_neighbour():
        later = run(env, 7, 8)  # reads them back
    assert later["7"] == first
    other = later["8"]
    differing = [name for name in first if first[name] != other[name]]
    assert differing == list(first), f"seeds 7 and 8 gave the same tokens with {set(first) - set(differing)}"


# ------------------------------------------------------------------ the reference costs the course uses


def test_reference_costs_are_read_never_timed_and_a_missing_one_is_an_error(monkeypatch, tmp_path):
    """`MTDECODE_COSTS=record-reference` measures a missing cost once, with the host it was measured on; after
    `timing.use_reference_costs()` the same cost is read back on any host and nothing is timed; a cost nobody
    recorded raises instead of being measured under whatever load the machine has."""
    from mtdecode import store
    from mtdecode.costs import timing

    monkeypatch.setattr(store, "REFERENCE", tmp_path)
    monkeypatch.setenv("MTDECODE_COSTS", "record-reference")
    calls = []
    recorded = store.kept("probe", {"model": "m"}, lambda: calls.append(1) or {"seconds": 0.25})
    (path,) = tmp_path.glob("probe-*.json")
    assert recorded == {"seconds": 0.25} and calls == [1]
    assert "measured_on" in path.read_text() and "cpu" in path.read_text()

    timing.use_reference_costs()  # keeps recording while MTDECODE_COSTS says so
    assert store.reference_mode() == "record-reference"
    monkeypatch.setenv("MTDECODE_COSTS", "")
    timing.use_reference_costs()
    assert store.reference_mode() == "reference" and store.host_key() == {"host": "reference"}
    assert store.kept("probe", {"model": "m"}, lambda: calls.append(2) or {"seconds": 9.0}) == {"seconds": 0.25}
    assert calls == [1], "a reference cost was measured again"
    with pytest.raises(LookupError, match="no reference probe cost"):
        store.kept("probe", {"model": "another"}, lambda: {"seconds": 1.0})
    monkeypatch.setenv("MTDECODE_COSTS", "sometimes")
    with pytest.raises(ValueError, match="MTDECODE_COSTS must be"):
        store.reference_mode()
