"""The `mtdecode` command line on tiny random models saved to disk (`--model FOLDER`)."""

import ctypes
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

ANSI = re.compile(r"\x1b\[(\d+)m(.*?)\x1b\[0m", re.S)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, one_thread):
    """A tiny target and a perturbed copy as its draft, each with the byte tokenizer, in float32."""
    from mtdecode.testing.models import byte_tokenizer, perturbed, save_checkpoint, tiny_model

    size = len(byte_tokenizer())
    target = tiny_model(vocab_size=size, seed=3, max_position_embeddings=2048)
    draft = perturbed(target, 0.05, seed=1)
    root = tmp_path_factory.mktemp("cli")
    tiny_model(vocab_size=size + 5, seed=4).save_pretrained(root / "other-vocab")
    return str(save_checkpoint(target, root / "target")), str(save_checkpoint(draft, root / "draft"))


def run(argv, capsys):
    from mtdecode.cli import main

    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def greedy_text(folder, prompt_text, n):
    import mtdecode
    from mtdecode.strategies import Autoregressive

    tokenizer = mtdecode.load_tokenizer(folder)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt_text}], add_generation_prompt=True)
    result = mtdecode.generate(
        mtdecode.load_model(folder), prompt["input_ids"], Autoregressive(), max_new_tokens=n, eos_token_id=257
    )
    return tokenizer.decode(result.tokens[0], skip_special_tokens=True), result.stats.target_forwards


@pytest.mark.parametrize("strategy", ["autoregressive", "speculative", "jacobi", "prompt_lookup", "lookahead", "mtad"])
def test_generate_streams_the_answer_coloured_by_step(strategy, folders, capsys, tmp_path):
    from mtdecode.strategies import REGISTRY, needs_draft

    target, draft = folders
    page = tmp_path / "trace.html"
    argv = ["generate", "--strategy", strategy, "--model", target, "--prompt", "Say hi", "--max-new-tokens", "20"]
    argv += ["--color", "always", "--html", str(page)]
    argv += ["--draft", draft] if needs_draft(REGISTRY[strategy]) else []
    code, out, err = run(argv, capsys)
    assert code == 0, err

    answer, summary = out.rsplit("\n\n[", 1)
    pieces = ANSI.findall(answer)
    assert "".join(text for _, text in pieces) == ANSI.sub(r"\2", answer)  # every character is coloured
    assert all(a != b for (a, _), (b, _) in zip(pieces, pieces[1:], strict=False)), "neighbouring steps share a colour"
    tokens, forwards = map(int, re.match(rf"{strategy}\] (\d+) tokens, (\d+) target forwards", summary).groups())
    assert tokens == 20 and len(pieces) <= forwards
    if getattr(REGISTRY[strategy], "exact", True):
        text, greedy_forwards = greedy_text(target, "Say hi", 20)
        assert ANSI.sub(r"\2", answer) == text
        if strategy == "autoregressive":
            assert forwards == greedy_forwards == 20
    html = page.read_text()
    assert html.count("<span style=") == len(pieces) and "tokens per forward" in html


def test_trace_gives_each_step_one_colour():
    """Steps of 1, 3 and 2 tokens become 3 pieces; a character split over two steps waits for its end."""
    import io

    from mtdecode.session import Step
    from mtdecode.testing.models import byte_tokenizer
    from mtdecode.trace import ANSI as COLOURS
    from mtdecode.trace import Trace

    tokenizer = byte_tokenizer()
    ids = tokenizer("a<bcé", add_special_tokens=False)["input_ids"]  # é is two byte tokens
    assert len(ids) == 6
    stream = io.StringIO()
    trace = Trace(tokenizer, stream=stream, color=True)
    for chunk in (ids[:1], ids[1:4], ids[4:5], ids[5:]):
        trace.add(Step(tuple(chunk), drafted=0, accepted=0))
    assert trace.pieces == [("a", 0), ("<bc", 1), ("é", 3)]
    assert stream.getvalue() == f"\x1b[{COLOURS[0]}ma\x1b[0m\x1b[{COLOURS[1]}m<bc\x1b[0m\x1b[{COLOURS[2]}mé\x1b[0m"
    page = trace.html(title="t", prompt="p", summary="s")
    assert "&lt;bc</span>" in page and "<bc" not in page  # escaped


def test_bench_in_bfloat16_judges_differences_up_to_ties(folders, capsys, tmp_path):
    """--dtype loads the models in that dtype; the bound it judges by is printed and kept, and every exact run is
    identical or differs only at near-ties (none beyond ε)."""
    target, draft = folders
    out_json = tmp_path / "bench.json"
    argv = ["bench", "--model", target, "--draft", draft, "--quick", "--max-new-tokens", "8", "--no-progress"]
    code, out, err = run([*argv, "--dtype", "bfloat16", "--strategies", "jacobi", "speculative", "--json",
                          str(out_json)], capsys)  # fmt: skip
    assert code == 0, err
    assert "(bfloat16)" in out and "exact up to ties in bfloat16: a run that differs from greedy's is judged" in out
    document = json.loads(out_json.read_text())
    assert document["settings"]["dtype"] == "bfloat16" and document["settings"]["epsilon"] >= 0
    for row in document["rows"]:
        assert row["beyond"] == 0 and row["identical"] + row["near_ties"] == row["runs"], row


def test_bench_quick_on_a_tiny_model(folders, capsys, tmp_path):
    from dataclasses import asdict

    from mtdecode.bench import PEERS, load_suite, read_json
    from mtdecode.strategies import REGISTRY

    target, draft = folders
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["bench", "--model", target, "--draft", draft, "--quick", "--max-new-tokens", "12", "--no-progress"]
    argv += ["--set", "speculative.num_draft_tokens=2", "--set", "lookahead.window=3"]
    code, out, err = run([*argv, "--json", str(out_json), "--plot", str(out_png)], capsys)
    assert code == 0, err
    document = json.loads(out_json.read_text())
    assert document["settings"]["options"] == {"speculative": {"num_draft_tokens": 2}, "lookahead": {"window": 3}}
    rows = document["rows"]
    tasks = list(load_suite()["tasks"])
    benched = [name for name in REGISTRY if name != "eagle"]  # the shipped EAGLE head fits the default model only
    assert "eagle is left out" in err
    assert [(r["task"], r["contender"]) for r in rows] == [(t, c) for t in [*tasks, "all"] for c in [*benched, *PEERS]]
    by = {(r["task"], r["contender"]): r for r in rows}
    for task in [*tasks, "all"]:
        assert by[task, "autoregressive"]["speedup"] == 1.0
        assert by[task, "autoregressive"]["tokens_per_forward"] == 1.0
        assert by[task, "hf-greedy"]["tokens_per_forward"] == 1.0  # the forward hook counts one pass per token
    for r in rows:
        if r["exact"]:
            assert r["identical"] == r["runs"], r
    assert by["all", "autoregressive"]["runs"] == len(tasks)
    assert [asdict(row) for row in read_json(out_json)] == rows
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    assert "hf-prompt-lookup" in out and "speed-up" in out
    # the host and what the tuned strategies chose there, with why
    assert document["machine"]["cpu_model"]
    assert any(line.startswith("Lookahead(prompt_pool=False)") for line in document["settings"]["tuning"])
    assert any(line.startswith("Speculative/MTAD") for line in document["settings"]["tuning"])
    assert "what the tuned strategies chose on this host" in out


def test_bench_races_an_exported_eagle_head_beside_the_others(folders, capsys, tmp_path):
    """`--eagle-head FOLDER` adds EAGLE with the head exported there as the contender `eagle:FOLDER-NAME`; it is
    exact (every run identical to greedy's), and drafts (more than one token per forward on some task). The tiny
    target cannot race `eagle` itself (the shipped head is SmolLM2's: refused), so `--set eagle.KEY=VALUE`, which
    needs `eagle` raced, is not exercised here. A folder without a head, or a head for another width, is refused."""
    import torch
    from safetensors.torch import save_file

    import mtdecode
    from mtdecode.testing.models import random_head

    target, draft = folders
    head = random_head(mtdecode.load_model(target).hf, every=1)
    for name, state in (("mine", head.state_dict()), ("narrow", {**head.state_dict(), "fuse.bias": torch.zeros(3)})):
        (tmp_path / name).mkdir()
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / name / "head.safetensors"))
    out_json = tmp_path / "bench.json"
    argv = ["bench", "--model", target, "--quick", "--max-new-tokens", "12", "--no-progress", "--strategies",
            "jacobi", "eagle", "--set", "eagle.lookup=0", "--eagle-head", str(tmp_path / "mine")]  # fmt: skip
    code, out, err = run([*argv, "--json", str(out_json)], capsys)
    assert code == 2 and "pass head= a head trained for it" in err  # `eagle` alone: the shipped head does not fit
    argv.remove("eagle")
    argv[argv.index("eagle.lookup=0") - 1 : argv.index("eagle.lookup=0") + 1] = []
    code, out, err = run([*argv, "--json", str(out_json)], capsys)
    assert code == 0, err
    rows = [r for r in json.loads(out_json.read_text())["rows"] if r["contender"] == "eagle:mine"]
    assert len(rows) == 5 and all(r["exact"] and r["identical"] == r["runs"] == (4 if r["task"] == "all" else 1)
                                  for r in rows)  # fmt: skip
    assert max(r["tokens_per_forward"] for r in rows) > 1
    for folder, message in ((tmp_path, "no head.safetensors there"), (tmp_path / "narrow", "does not fit")):
        code, out, err = run([*argv[:-1], str(folder)], capsys)
        assert code == 2 and message in err.splitlines()[-1], err


@pytest.mark.parametrize(
    "kind, options, rows",
    [
        ("lookahead", ["--window", "4", "--ngram", "3", "--guesses", "2"], 1 + 3 + 4 + 2 * 2),
        ("speculative", ["--draft-tokens", "4"], 5),
        ("tree", ["--parents=-1,0,0,1,-1"], 5),
        ("causal", ["--length", "3"], 3),
    ],
)
def test_masks_draws_each_kind(kind, options, rows, capsys, tmp_path):
    out = tmp_path / "mask.png"
    code, printed, err = run(["masks", kind, *options, "--prefix", "2", "--out", str(out)], capsys)
    assert code == 0, err
    assert f"({rows}, {rows + 2}) mask" in printed
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_lookahead_mask_labels_name_every_row_and_column():
    from mtdecode.masks import LookaheadLayout
    from mtdecode.masks.figures import lookahead_mask

    figure = lookahead_mask(4, 3, 2, ["p0", "p1"])
    layout = LookaheadLayout(context=1, rows=2, columns=4, candidates=2, length=2)
    assert figure.query_labels[layout.cell(1, 2)] == f"w12 @{2 + 1 + 2}"  # x0 at position 2, cell (r, j) at 2 + r + j
    assert figure.query_labels[layout.candidate(1, 0)] == "c10 @3"
    assert figure.key_labels[:3] == ["p0", "p1", "x0"]


BAD = [
    (["generate", "--strategy", "beam", "--prompt", "x"], "invalid choice: 'beam'"),
    (["generate", "--strategy", "lookahead", "--prompt", "x", "--set", "width=3"], "has no setting 'width'"),
    (["generate", "--strategy", "lookahead", "--prompt", "x", "--set", "window=big"], "expected int or None"),
    (["generate", "--strategy", "lookahead", "--prompt", "x", "--set", "window"], "--set takes key=value"),
    (["generate", "--strategy", "jacobi", "--prompt", "x", "--set", "block=0", "--model", "TARGET"], "block must be"),
    (["generate", "--strategy", "speculative", "--prompt", "x", "--model", "TARGET"], "needs a draft model"),
    (["generate", "--strategy", "mtad", "--prompt", "x", "--model", "TARGET"], "needs a draft model"),
    (["generate", "--strategy", "jacobi", "--prompt", "x", "--draft", "DRAFT"], "takes no draft model"),
    (["generate", "--strategy", "eagle", "--prompt", "x", "--model", "TARGET"], "pass head= a head trained for it"),
    (["generate", "--strategy", "mtad", "--prompt", "x", "--model", "TARGET", "--draft", "ODD"], "vocabulary (264"),
    (["bench", "--model", "TARGET", "--draft", "ODD", "--strategies", "speculative"], "vocabulary (264"),
    (["generate", "--strategy", "jacobi", "--prompt", "x", "--model", "/nowhere/model"], "no model '/nowhere/model'"),
    (["generate", "--strategy", "mtad", "--prompt", "x", "--model", "/nowhere/model"], "no model '/nowhere/model'"),
    (["bench", "--model", "/nowhere/model"], "no model '/nowhere/model'"),
    (
        ["generate", "--strategy", "jacobi", "--prompt", "x", "--max-new-tokens", "-1", "--model", "TARGET"],
        "integer >= 0",
    ),
    (["generate", "--strategy", "jacobi", "--prompt", "x", "--html", "/nowhere/t.html"], "does not exist"),
    (["bench", "--model", "TARGET", "--strategies", "speculative"], "needs a draft model"),
    (["bench", "--model", "TARGET", "--strategies", "jacobi", "--max-new-tokens", "0"], "expected an integer >= 1"),
    (["generate", "--strategy", "jacobi", "--prompt", "x", "--device", "gpu7"], "--device gpu7"),
    (["bench", "--tasks", "poetry"], "invalid choice: 'poetry'"),
    (["bench", "--set", "window=3"], "takes STRATEGY.KEY=VALUE"),
    (["bench", "--strategies", "jacobi", "--set", "lookahead.window=3"], "lookahead is not among"),
    (["bench", "--set", "lookahead.width=3"], "has no setting 'width'"),
    (["masks", "lookahead", "--ngram", "1", "--out", "m.png"], "ngram must be >= 2"),
    (["masks", "tree", "--parents=-1,5", "--out", "m.png"], "parents[1] = 5"),
    (["masks", "speculative", "--draft-tokens", "0", "--out", "m.png"], "expected an integer >= 1"),
    (["masks", "causal"], "the following arguments are required: --out"),
    ([], "the following arguments are required: command"),
]


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_arguments_give_one_line_and_exit_code_2(argv, message, folders, capsys):
    target, draft = folders
    odd = str(Path(target).parent / "other-vocab")  # a draft whose vocabulary differs from the target's
    argv = [{"TARGET": target, "DRAFT": draft, "ODD": odd}.get(a, a) for a in argv]
    code, out, err = run(argv, capsys)
    assert code == 2
    *progress, last = err.splitlines()  # "loading ..." lines may come before a late error
    assert last.startswith("mtdecode: error: ") and message in last, err
    assert all(line.startswith("loading ") for line in progress), err
    assert "Traceback" not in out + err


def test_a_strategy_added_to_the_registry_needs_no_wiring(folders, capsys, monkeypatch, tmp_path):
    """A new registry entry is a `generate` choice, its dataclass fields are `--set` keys, and `bench` runs it."""
    from dataclasses import dataclass

    from mtdecode.strategies import REGISTRY, Autoregressive

    @dataclass(frozen=True)
    class Patient(Autoregressive):
        """Autoregressive with one setting of its own, checked like any strategy's."""

        patience: int = 1

        def __post_init__(self):
            if self.patience < 1:
                raise ValueError(f"patience must be >= 1, got {self.patience}")

    monkeypatch.setitem(REGISTRY, "patient", Patient)
    target, _ = folders
    argv = ["generate", "--strategy", "patient", "--model", target, "--prompt", "Say hi", "--max-new-tokens", "6"]
    code, out, err = run([*argv, "--set", "patience=3", "--color", "never"], capsys)
    assert code == 0, err
    assert out.rsplit("\n\n[", 1)[0] == greedy_text(target, "Say hi", 6)[0]
    code, _, err = run([*argv, "--set", "patience=0"], capsys)
    assert code == 2 and "patience must be >= 1, got 0" in err
    code, _, err = run([*argv, "--set", "patience=soon"], capsys)
    assert code == 2 and "expected int" in err

    out_json = tmp_path / "bench.json"
    argv = ["bench", "--model", target, "--strategies", "patient", "--tasks", "chat", "--prompts-per-task", "1"]
    argv += ["--max-new-tokens", "4", "--set", "patient.patience=2", "--no-progress", "--json", str(out_json)]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    rows = {(r["task"], r["contender"]): r for r in json.loads(out_json.read_text())["rows"]}
    assert set(rows) == {(task, name) for task in ("chat", "all") for name in ("autoregressive", "patient")}
    assert rows["all", "patient"]["identical"] == 1 and rows["all", "patient"]["tokens_per_forward"] == 1.0


def test_console_script_exits_with_2():
    """The installed `mtdecode` command (here `python -m mtdecode`) reports a bad argument in one line."""
    done = subprocess.run(
        [sys.executable, "-m", "mtdecode", "generate", "--strategy", "beam", "--prompt", "x"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "invalid choice: 'beam'" in done.stderr


def test_masks_draws_a_batch_one_panel_per_row(capsys, tmp_path):
    out = tmp_path / "batch.png"
    code, printed, err = run(["masks", "batch", "--draft-tokens", "2", "--out", str(out)], capsys)
    assert code == 0, err
    assert "(3, 3, 8) masks" in printed and out.read_bytes()[:4] == b"\x89PNG"


ALLOCATION = """
import ctypes
class MallInfo(ctypes.Structure):  # glibc's struct mallinfo2: ten size_t fields
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo
import torch
from mtdecode.bench import hold_freed_memory

def mapped(mib):  # MiB of a new block of `mib` MiB that got pages of its own (mmap)
    before = libc.mallinfo2().hblkhd
    block = torch.empty(mib << 20, dtype=torch.uint8)
    return (libc.mallinfo2().hblkhd - before) >> 20

print(mapped(24))  # glibc's default; freeing it raises glibc's threshold to 24 MiB
print(hold_freed_memory(), mapped(28))  # by that threshold, 28 MiB would get pages of its own again
"""


def glibc_with_mallinfo2() -> bool:
    """Whether this process runs on glibc 2.33 or later, whose `mallinfo2` the test reads."""
    if platform.libc_ver()[0] != "glibc":
        return False
    return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")


@pytest.mark.skipif(not glibc_with_mallinfo2(), reason="the allocator is glibc's (2.33 or later)")
def test_the_bench_keeps_freed_memory_for_the_next_run() -> None:
    """`hold_freed_memory` (called by `mtdecode bench` and `benchmarks/batch_throughput.py`): a 28 MiB block comes
    from the heap, which a free does not hand back to the OS, where by default it gets fresh pages of its own."""
    run = subprocess.run([sys.executable, "-c", ALLOCATION], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["24", "True", "0"]
