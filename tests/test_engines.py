"""The engines' side of the oracle without the engines: the GGUF writer, the spelling vocabulary, the llama.cpp
decoder's command line and parsing (against a stand-in program), the tier of a decoder that runs its own copy of
the model, and the power rule of check_sampling."""

import json
import sys

import gguf
import pytest
import torch
from transformers import AutoModelForCausalLM

from mtdecode.sampling import Sampler
from mtdecode.strategies.autoregressive import Autoregressive
from mtdecode.testing import check_greedy, check_sampling, coverage, mutants
from mtdecode.testing.blackbox import greedy_model
from mtdecode.testing.decoders import DecoderError, run_batch, strategy_decoder
from mtdecode.testing.gguf_models import SPELLING_SIZE, read_spelled, spell, write_gguf
from mtdecode.testing.llama_cpp_programs import gguf_of, llama_cpp_decoder, llama_cpp_python_decoder
from mtdecode.testing.mutants import homework_speculative


def test_a_written_gguf_loads_back_in_transformers_with_the_same_weights_and_logits(tmp_path):
    """transformers' own GGUF reader (which undoes the query/key reordering) gives back the float32 model bit for
    bit; the file names the spelling vocabulary and the model's end-of-sequence token."""
    model = greedy_model("llama-eos", torch.float32)
    write_gguf(model, tmp_path / "tiny.gguf")
    back = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32)
    ours, theirs = model.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys() and all(ours[k].equal(theirs[k]) for k in ours)
    ids = torch.tensor([[1, 2, 3, 1, 2, 4, 1]])
    assert model(ids).logits.equal(back(ids).logits)
    fields = gguf.GGUFReader(tmp_path / "tiny.gguf").fields
    assert bytes(fields["tokenizer.ggml.model"].parts[-1]).decode() == "rwkv"
    assert int(fields["tokenizer.ggml.eos_token_id"].parts[-1][0]) == 13
    tokens = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode() for i in fields["tokenizer.ggml.tokens"].data]
    assert tokens == [spell([t]) for t in range(16)]


def test_without_the_query_key_reordering_the_file_is_another_model(tmp_path, monkeypatch):
    """The check above can fail: a writer that keeps transformers' rotary row order writes other weights."""
    from mtdecode.testing import gguf_models

    monkeypatch.setattr(gguf_models, "_interleave_halves", lambda weight, heads: weight)
    model = greedy_model("llama", torch.float32)
    write_gguf(model, tmp_path / "tiny.gguf")
    back = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not model.state_dict()[q].equal(back.state_dict()[q])


def test_the_spelling_vocabulary_reads_back_exactly_and_no_token_is_a_prefix_of_another():
    ids = [0, 1, 15, 4095, 32_767, SPELLING_SIZE - 1]
    assert read_spelled(spell(ids), SPELLING_SIZE) == ids
    assert {len(spell([t]).encode()) for t in range(0, SPELLING_SIZE, 97)} == {3}  # UTF-8 is prefix-free
    with pytest.raises(ValueError, match="token ids must lie"):
        spell([SPELLING_SIZE])
    with pytest.raises(ValueError, match="is not a token of this 16-token vocabulary"):
        read_spelled(spell([3]) + "x", 16)


#: a stand-in for a llama.cpp program: it checks the GGUF file's magic, records its command line, and prints what
#: the test asked for (the prompt, then the answer's tokens in lookahead's colour escapes; counts on stderr)
STAND_IN = """\
import json, os, sys, time
args = sys.argv[1:]
flag = lambda name: args[args.index(name) + 1]
assert open(flag("-m"), "rb").read(4) == b"GGUF"
path = os.environ["STAND_IN_PLAN"]
plan = json.load(open(path))
with open(path + ".argv", "a") as log:
    log.write(json.dumps(args) + "\\n")
if plan.get("lose"):  # this run loses its output, as llama.cpp's sometimes do, and exits with 0
    json.dump({**plan, "lose": plan["lose"] - 1}, open(path, "w"))
    sys.exit(0)
time.sleep(plan.get("sleep", 0))
print("\\n\\n" + flag("-p") + "".join("\\x1b[0;96m" + t + "\\x1b[0m" for t in plan["answer"]) + "\\n\\n")
print("n_predict = 3\\nn_drafted = %d\\nn_accept  = 2" % plan["drafted"], file=sys.stderr)
sys.exit(plan.get("exit", 0))
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A folder with the stand-in as `llama-lookup` and `llama-speculative`; returns a function that sets its plan."""
    for name in ("llama-lookup", "llama-speculative", "llama-speculative-simple"):
        program = tmp_path / name
        program.write_text(f"#!{sys.executable}\n" + STAND_IN)
        program.chmod(0o755)
    plan_file = tmp_path / "plan.json"
    monkeypatch.setenv("STAND_IN_PLAN", str(plan_file))

    def plan(answer: list[int], drafted: int = 4, **extra) -> list[list[str]]:
        plan_file.write_text(json.dumps({"answer": [spell([t]) for t in answer], "drafted": drafted, **extra}))
        return [json.loads(line) for line in (tmp_path / "plan.json.argv").read_text().splitlines()] if (
            tmp_path / "plan.json.argv").exists() else []  # fmt: skip

    plan.folder = tmp_path
    return plan


def test_the_llama_cpp_decoder_drives_a_program_and_reads_its_tokens_and_counts(stand_in):
    model = greedy_model("llama", torch.float32)
    decoder = llama_cpp_decoder("lookup", bin_folder=stand_in.folder)
    stand_in([5, 6, 7], drafted=4)
    record = coverage.Coverage()
    with coverage.watching(model, record):
        got = run_batch(decoder, model, [[1, 2, 3]], max_new_tokens=3, temperature=0.7, top_k=5, seeds=[11])
    assert got == [[5, 6, 7]]
    assert (record.calls, record.drafted, record.accepted, record.calls_guessing, record.forwards) == (1, 4, 2, 1, 0)
    assert "as the engine reported it: 4 tokens drafted and 2 accepted" in str(record)
    (argv,) = stand_in([5, 6, 7])
    flags = dict(zip(argv[::2], argv[1::2], strict=False))
    assert flags["-p"] == spell([1, 2, 3]) and flags["-n"] == "3" and flags["-m"] == str(gguf_of(model))
    assert (flags["--temp"], flags["--top-k"], flags["--top-p"], flags["--seed"]) == ("0.7", "5", "1.0", "11")
    assert flags["--samplers"] == "temperature;top_k;top_p" and flags["-ctk"] == flags["-ctv"] == "f32"
    assert decoder.runs_own_copy


def test_the_llama_cpp_decoder_reports_what_a_program_does_wrong(stand_in, monkeypatch):
    from mtdecode.testing import llama_cpp_programs as llama_cpp

    model = greedy_model("llama", torch.float32)
    stand_in([5, 6, 7, 8])  # one token more than asked for
    with pytest.raises(DecoderError, match="returned 4 tokens for max_new_tokens=3"):
        run_batch(llama_cpp_decoder("lookup", bin_folder=stand_in.folder), model, [[1, 2]], max_new_tokens=3, seeds=[0])
    cut = llama_cpp_decoder("lookup", bin_folder=stand_in.folder, cut_to_budget=True)
    assert run_batch(cut, model, [[1, 2]], max_new_tokens=3, seeds=[0]) == [[5, 6, 7]]
    stand_in([5], exit=3)
    with pytest.raises(DecoderError, match="exited with 3") as error:
        cut(model, [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
    assert error.value.crashed and "n_accept" in error.value.traceback
    stand_in([99])  # not a token of a 16-token vocabulary
    with pytest.raises(DecoderError, match="not a token"):
        cut(model, [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
    monkeypatch.setattr(llama_cpp, "TIMEOUT", 0.5)
    stand_in([5], sleep=5)
    with pytest.raises(DecoderError, match="ran past 0.5 s"):
        cut(model, [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
    stand_in([5], lose=2)  # two runs lose their output: run again, and counted
    assert cut(model, [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0) == [5]
    assert cut.lost_runs == 2
    stand_in([5], lose=llama_cpp.RERUNS + 1)
    with pytest.raises(DecoderError, match="lost its output"):
        cut(model, [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0)
    stand_in([5])  # a draft model's file goes with -md
    llama_cpp_decoder("speculative", bin_folder=stand_in.folder)(
        model, [1], max_new_tokens=1, temperature=0.0, top_k=None, top_p=None, seed=0
    )
    assert "-md" in stand_in([5])[-1]
    # speculative-simple does not print the end-of-sequence token it stops at: added back when it stops short
    simple = llama_cpp_decoder("speculative-simple", bin_folder=stand_in.folder)
    settings = dict(max_new_tokens=4, temperature=0.0, top_k=None, top_p=None, seed=0)
    assert simple(greedy_model("llama-eos", torch.float32), [1], **settings) == [5, 13]
    assert simple(model, [1], **settings) == [5]  # a model without one: nothing to add


def test_a_decoder_with_its_own_copy_of_the_model_is_judged_up_to_ties_even_in_float32():
    """Breaking exact ties to the highest id is a bug in tier 1, but within ε for another implementation of the
    weights; a difference beyond ε fails either way."""

    def own_copy(decoder):
        def wrapped(*args, **kwargs):
            return decoder(*args, **kwargs)

        wrapped.runs_own_copy = True
        wrapped.__name__ = wrapped.__qualname__ = f"own_copy({decoder.__name__})"
        return wrapped

    settings = dict(families=("llama-ties",), dtype="float32", examples=4, max_prompt=24, max_new_tokens=6)
    assert check_greedy(mutants.ties_to_highest_id, **settings).verdict == "fails"
    ties = check_greedy(own_copy(mutants.ties_to_highest_id), **settings)
    assert ties.verdict == "conforms", ties.summary
    assert ties.figures["tier"] == "exact up to ties" and ties.figures["near_ties"]
    assert "another implementation" in ties.summary
    wrong = check_greedy(own_copy(mutants.reads_one_row_early_on_long_prompts), families=("llama",), dtype="float32")
    assert wrong.verdict == "fails" and "bug" in wrong.summary


def _rarely_guessing(every: int, bug: str):
    """A sampler that takes a speculative path (`homework_speculative` with `bug`) for one seed in `every`, and
    plain sampling (mtdecode's `Autoregressive`) for the others."""
    plain = strategy_decoder(Autoregressive())

    def decoder(model, prompt, *, seed, **settings):
        guessing = homework_speculative if seed % every == 0 else plain
        return guessing(model, prompt, seed=seed, **({"bug": bug} if seed % every == 0 else {}), **settings)

    decoder.__name__ = decoder.__qualname__ = f"rarely_guessing(every={every}, bug={bug!r})"
    return decoder


# 2,000 runs of decoders whose types other tests check; with the checks on, 8.7 s instead of 4.8 s on one thread
@pytest.mark.usefixtures("unchecked")
def test_check_sampling_calls_a_rarely_taken_guessed_path_inconclusive_even_if_it_is_wrong():
    """A speculative path whose acceptance ratio reads the draft's untempered probabilities (wrong at temperature
    0.5) is taken in 1 run of 50: the whole law
    barely moves and the chi-square test passes, but the guessed path ran in far fewer runs than the power
    against its own errors needs, so the verdict is inconclusive, not conforms. Taken in every run, the same
    path fails the check (a correct decoder fails it with probability 0.001)."""
    settings = dict(samples=1_000, settings=(Sampler(temperature=0.5),), tokens=2)
    rare = check_sampling(_rarely_guessing(50, "draft_temperature_mismatch"), **settings)
    assert rare.verdict == "inconclusive", rare.summary
    assert rare.figures["guessing_share"] < 0.05 < rare.figures["guessing_share_needed"]
    assert "too rarely" in rare.summary
    always = check_sampling(_rarely_guessing(1, "draft_temperature_mismatch"), **settings)
    assert always.verdict == "fails", always.summary


#: a stand-in for llama-cpp-python's worker: answers each request line by the plan in its environment
WORKER_STAND_IN = """\
import json, os, sys
for line in sys.stdin:
    request = json.loads(line)
    assert open(request["model"], "rb").read(4) == b"GGUF" and request["num_pred_tokens"] == 10
    plan = json.loads(os.environ["STAND_IN_WORKER"])
    if plan.get("die"):
        print("worker going down", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(plan["answer"]), flush=True)
"""


def test_the_llama_cpp_python_decoder_talks_to_its_worker_and_reports_its_failures(tmp_path, monkeypatch):
    python = tmp_path / "llama-cpp-python" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!{sys.executable}\nimport sys\nsys.argv = sys.argv[:1]\n" + WORKER_STAND_IN)
    python.chmod(0o755)
    model = greedy_model("llama", torch.float32)
    call = dict(max_new_tokens=2, temperature=1.0, top_k=None, top_p=None, seed=3)
    plans = [
        {"answer": {"tokens": [4, 5], "drafted": 6, "accepted": 1}},
        {"answer": {"error": "Traceback: ValueError: bad"}},
        {"die": True},
    ]
    decoder = llama_cpp_python_decoder(folder=tmp_path)
    try:
        monkeypatch.setenv("STAND_IN_WORKER", json.dumps(plans[0]))
        record = coverage.Coverage()
        with coverage.watching(model, record):
            assert run_batch(decoder, model, [[1, 2]], max_new_tokens=2, temperature=1.0, seeds=[3]) == [[4, 5]]
        assert (record.drafted, record.accepted, record.rows_guessing) == (6, 1, 1)
        decoder.close()  # a new worker starts with the next call, and reads the new plan
        monkeypatch.setenv("STAND_IN_WORKER", json.dumps(plans[1]))
        with pytest.raises(DecoderError, match="llama-cpp-python raised") as error:
            decoder(model, [1, 2], **call)
        assert "ValueError: bad" in error.value.traceback
        decoder.close()
        monkeypatch.setenv("STAND_IN_WORKER", json.dumps(plans[2]))
        with pytest.raises(DecoderError, match="worker died") as error:
            decoder(model, [1, 2], **call)
        assert "worker going down" in error.value.traceback
    finally:
        decoder.close()


def test_a_greedy_output_ends_at_its_budget_or_right_after_its_own_end_of_sequence_token():
    """Judged on the decoder's own text (in tier 2 a flipped near-tie may reach EOS elsewhere than greedy does)."""
    from mtdecode.testing.blackbox import _ends_where_it_should

    assert _ends_where_it_should([1, 2, 3], 3, None) and _ends_where_it_should([1, 13], 3, 13)
    assert _ends_where_it_should([13], 5, [7, 13])
    assert not _ends_where_it_should([1, 2], 3, None)  # short of the budget with no EOS
    assert not _ends_where_it_should([1, 13, 2], 3, 13)  # went on after its EOS
    assert not _ends_where_it_should([1, 2], 3, 13)


def test_the_conformance_page_gives_each_row_its_tier_coverage_and_a_crash_its_last_words(tmp_path):
    """Made from saved reports (as `--render` makes it): the tier, the engine's counts and the power rule's
    shares in the row; a crash's first paragraph and the program's abort message (its path cut); the afterword."""
    from mtdecode.testing import conformance
    from mtdecode.testing.report import Report

    seen = {"forwards": 0, "prefills": 0, "verifications": 0, "calls": 10, "drafted": 9, "accepted": 4, "rows": 10,
            "rows_guessing": 6}  # fmt: skip
    greedy = Report("check_greedy", True, "check_greedy passed: fine.", {"tier": "exact up to ties", "coverage": seen})
    sampling = Report("check_sampling", False, "check_sampling INCONCLUSIVE: rare.", {
        "coverage": seen, "guessing_share": 0.06, "guessing_share_needed": 0.124}, verdict="inconclusive")
    words = "line 1\n/home/dev/llama.cpp/common/common.cpp:2158: failed to add token 101\n30\t../wait4.c: no file\n"
    crash = Report("check_seeds", False, "check_seeds CRASHED: x: it died.\n\n" + words, {"traceback": words},
                   verdict="crashed")  # fmt: skip
    entry = conformance.Entry("llama.cpp lookup", "v1", "the program", {}, {"greedy": greedy, "sampling": sampling},
                              {"greedy": 1.0, "sampling": 2.0}, afterword=lambda: "3 runs were run again")
    other = conformance.Entry("lade", "v2", "lade", {}, {"seeds": crash}, {"seeds": 0.5})
    conformance.save([entry, other], tmp_path / "page.json")
    page = conformance.markdown(conformance.load(tmp_path / "page.json"))
    row = "| llama.cpp lookup | v1 | greedy | **conforms** | 2, exact up to ties | the engine reported 9 tokens drafted"
    assert row in page
    assert "the guessed path ran in 6 of 10 runs (6.0%; the power rule needs 12.4%)" in page
    assert "- seeds, crashed: x: it died; its last words: `common.cpp:2158: failed to add token 101`." in page
    assert "- 3 runs were run again." in page and "line 1" not in page
    assert "/home/dev" not in (tmp_path / "page.json").read_text()  # no build folder kept in the saved reports


def test_a_noisy_assistant_is_made_once_for_each_scale():
    """The llama.cpp decoders' `draft_noise` reaches the draft: another scale is another copy, the same one is kept."""
    from mtdecode.testing.decoders import noisy_assistant

    model = greedy_model("llama", torch.float32)
    weight = lambda m: m.get_output_embeddings().weight  # noqa: E731
    assert noisy_assistant(model) is noisy_assistant(model, scale=0.3)
    assert weight(noisy_assistant(model, scale=0.0)).equal(weight(model))
    assert not weight(noisy_assistant(model)).equal(weight(model))
