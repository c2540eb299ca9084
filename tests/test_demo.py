"""`make demo`'s table, run on a tiny model with the byte tokenizer: the answer, one row per contender, a progress
line while a strategy measures this host for the first time (and not when the figure is kept), and no warning
(pytest turns one into an error) where a strategy decides to decode greedily: the table's note says so instead."""

import warnings

from mtdecode import demo, store
from mtdecode.generate import GreedyFallbackWarning
from mtdecode.strategies import Autoregressive, PromptLookup, Speculative
from mtdecode.testing import tiny_model
from mtdecode.testing.models import byte_tokenizer, perturbed


class MeasuresOnce(Autoregressive):
    """Greedy decoding that asks the store for a host figure first, as a tuned strategy does on first use."""

    def decode(self, s):
        store.kept("forward", {"what": "the demo's smoke test"}, lambda: {"costs": {"1": 1.0}})
        return super().decode(s)


class DecidesGreedy(Autoregressive):
    """Greedy decoding that warns as a tuned strategy does when it finds nothing pays on this host."""

    def decode(self, s):
        warnings.warn("decodes greedily: nothing pays here", GreedyFallbackWarning, stacklevel=2)
        return super().decode(s)


def test_the_demo_prints_its_table_with_progress_and_no_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MTDECODE_COSTS_DIR", str(tmp_path))  # nothing kept yet
    tokenizer = byte_tokenizer()
    model = tiny_model("llama", vocab_size=len(tokenizer))
    contenders = {
        "measures": MeasuresOnce,
        "prompt_lookup": lambda: PromptLookup(2, 4),
        "speculative": lambda: Speculative(perturbed(model, 0.3, seed=1), 3),
        "decides_greedy": DecidesGreedy,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = demo.run(model, tokenizer, contenders, "Say hello twice: hello hello", max_new_tokens=12)
    out = capsys.readouterr().out
    assert "prompt: Say hello twice" in out and "answer: " in out
    assert out.count("measuring this host's") == 1, out  # once: the warm-up measured, the run read it back
    assert f"  measures: measuring this host's forward figures, once (kept in {tmp_path}) ..." in out
    assert [row[0] for row in rows] == list(contenders) and all(row[1] == 12 for row in rows)
    assert all(row[4] == "yes" for row in rows)  # exact strategies give greedy's tokens
    assert [row[5] for row in rows] == ["", "", "", "decodes greedily on this host"]
    table = out[out.index("strategy  ") :]
    assert all(name in table for name in contenders) and "decodes greedily on this host" in table
