"""Every strategy on a tensor-parallel target: 2 ranks of `torchrun` on gloo, tiny float64 Llama and Qwen2 sharded by
transformers' own plan (`mtdecode.testing.ranks` is what each rank runs).

The ranks start with no kept measurement, so every strategy's defaults (run on the first model, the Llama) measure
this host's costs on first use: the case that once hung, when each rank timed its own forwards. float64 is bit-exact
(`docs/concepts/rounding.md`, tier 1): greedy's tokens are expected one for one, and at fixed settings a seeded run
makes the same draws as a single process. At the defaults a sampled run is compared across ranks only: its drafting
policy weighs costs measured for two ranks, which are not a single process's, so it may draft otherwise and draw
other (equally distributed) tokens.
"""

import json
import os
import subprocess
import sys

import pytest

import mtdecode
from mtdecode.cli import main
from mtdecode.testing import ranks, tiny_model
from mtdecode.zoo import DRAFT_MODEL, tensor_parallel_plan

#: seconds before a hung rank prints its stack and ends; the whole launch gets a minute more
TIMEOUT = 300


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Both ranks' results and the launch's stderr."""
    root = tmp_path_factory.mktemp("tensor-parallel")
    models, out = root / "models", root / "out"
    out.mkdir()
    for family in ("llama", "qwen2"):
        tiny_model(family, seed=3).save_pretrained(models / family)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "mtdecode.testing.ranks", str(models), str(out), "--timeout", str(TIMEOUT)]  # fmt: skip
    env = {**_env(), "MTDECODE_COSTS_DIR": str(root / "costs"), "OMP_NUM_THREADS": "1"}  # nothing measured yet; a
    # thread per rank, as torchrun sets it: ranks that wait for each other in collectives must not crowd the cores
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT + 60, env=env)
    results = [out / f"rank{r}.json" for r in range(2)]
    if not all(path.exists() for path in results):  # a rank failed or hung: its stack is in stderr
        pytest.fail(f"a rank did not finish (exit {done.returncode}):\n{done.stderr[-6000:]}")
    return [json.loads(path.read_text()) for path in results], done.stderr


def single_process(ranks_results: list[dict], family: str) -> dict[str, list]:
    """What a single process decoded with `family`'s whole model: the one rank whose share that model was ran it."""
    (found,) = [results[family]["alone"] for results in ranks_results if "alone" in results[family]]
    return found


def _env() -> dict[str, str]:
    """This process's environment without the variables of a launch it may itself run under."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_"))}


def test_every_rank_decodes_alike(launched):
    """Every run, greedy and seeded, at the defaults and at fixed settings, gives the same tokens on both ranks."""
    (first, second), _ = launched
    for family in first:
        differ = [name for name, tokens in first[family]["runs"].items() if second[family]["runs"][name] != tokens]
        assert not differ, f"{family}: the ranks differ in {differ}"


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_every_exact_strategy_gives_greedys_tokens_on_every_rank(launched, family):
    """At fixed settings, and on the Llama at its defaults, on each rank: greedy decoding's tokens, and a single
    process's."""
    ranks_results, _ = launched
    alone = single_process(ranks_results, family)["defaults/autoregressive/greedy"]
    for rank, results in enumerate(ranks_results):
        runs = results[family]["runs"]
        assert runs["defaults/autoregressive/greedy"] == alone, f"rank {rank}: sharded greedy is not a single process's"
        exact = [name for name in runs if name.endswith("/greedy") and "mtad" not in name]  # MTAD is not exact
        assert len(exact) == (11 if family == "llama" else 6)  # greedy, 5 at fixed settings, 5 more at the defaults
        differ = [name for name in exact if runs[name] != alone]
        assert not differ, f"rank {rank}, {family}: not greedy's tokens in {differ}"


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_seeded_run_at_fixed_settings_draws_as_a_single_process(launched, family):
    """Every strategy at fixed settings (MTAD and MMTAD too), greedy and seeded on a ragged batch: what a single
    process decodes with the whole model (run by one rank before torch.distributed started), on both ranks."""
    ranks_results, _ = launched
    alone = single_process(ranks_results, family)
    assert len(alone) == 16  # autoregressive and 7 strategies at fixed settings, greedy and seeded
    for rank, results in enumerate(ranks_results):
        runs = results[family]["runs"]
        differ = [name for name, tokens in alone.items() if runs[name] != tokens]
        assert not differ, f"rank {rank}, {family}: the sharded runs differ from a single process's in {differ}"


def test_a_rank_that_would_diverge_raises_instead_of_hanging(launched):
    """A seed per rank is refused on entry; costs per rank, which make rank 0 draft and rank 1 not, stop at the first
    target forward whose shape differs. Both ranks raise, with each rank's value in the message."""
    (first, second), _ = launched
    for results in (first, second):
        for family, found in results.items():
            assert "generate's call differs across ranks" in found["divergent"]["seed"], family
            assert "forward differs across ranks" in found["divergent"]["costs"], family


def test_the_oracle_judges_a_decoder_on_a_sharded_model(launched):
    """`check_greedy(model=...)` on the sharded model (its reference greedy decoded on the same shards), on both
    ranks: a correct decoder conforms, one whose cache keeps a rejected guess does not."""
    (first, second), _ = launched
    for results in (first, second):
        assert results["llama"]["oracle"] == {"correct": True, "cache_rollback_off_by_one": False}


def test_a_hung_rank_prints_its_stack(launched):
    """The launch ends with rank 0 waiting on a barrier that rank 1 never reaches: it is ended after `--hang` seconds
    with its stack, which names the call it waits in."""
    _, stderr = launched
    hung = stderr[stderr.find("Timeout") :]
    assert "Timeout" in stderr and "in barrier" in hung and f"in {ranks.HANG}" in hung, stderr[-3000:]


# ---- loading, without a launch


def test_smollm2_is_sharded_by_its_mlps_alone_where_its_heads_do_not_split(monkeypatch):
    """9 query heads and 3 key-value heads split over 1 and 3 ranks, not over 2 or 4: there transformers' plan is
    refused with the advice, and `tensor_parallel_plan` (what `--tp` loads) keeps the attention whole."""
    for world, plan in [(1, "auto"), (2, "mlp"), (3, "auto"), (4, "mlp")]:
        monkeypatch.setenv("WORLD_SIZE", str(world))
        assert tensor_parallel_plan() == plan, world
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match='9 attention heads and 3 key-value heads do not split over 2 ranks.*"mlp"'):
        mtdecode.load_model(tp_plan="auto")
    with pytest.raises(ValueError, match="stays whole on each rank"):
        mtdecode.load_model(DRAFT_MODEL, tp_plan="auto")


def test_tp_outside_torchrun_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["generate", "--strategy", "autoregressive", "--prompt", "Hi", "--tp"]) == 2
    assert "--tp runs under torchrun" in capsys.readouterr().err
