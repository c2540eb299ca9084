"""The EAGLE recipe's data, stage by stage: the target's own answers to varied prompts (`make_data`), its features
over text it reads (`make_text_data`), and the records both leave in the work folder (`load_records`)."""

import functools
from pathlib import Path

import torch

#: the target whose answers the data holds, by default
DEFAULT_TARGET = "smollm2-135m-instruct"

# Prompts: `mtdecode.recipes.prompts`, four task kinds; none of the benchmark's prompts is among them.

HEAD_TOKENS = 8192  # the head scores this many of the most frequent tokens of the data


#: prompts per task kind: (training, held out). The summaries' passages are the target's own chat answers; the
#: conversations continue its answers to `question`, and `extract` reads the passages it wrote in `passage`.
TASK_PROMPTS = {"chat": (384, 24), "code": (128, 16), "math": (192, 16), "summary": (192, 16), "question": (64, 8),
                "conversation": (192, 24), "passage": (48, 8), "extract": (144, 24)}  # fmt: skip
NEW_TOKENS = {"passage": 160}  # the others: 128


@functools.cache
def _tokenizer(model: str | None):
    """The target's tokenizer (`model` as in `make_data`), loaded once per process: every kind's data reads it."""
    from mtdecode.zoo import load_tokenizer

    return load_tokenizer(model or DEFAULT_TARGET)


def task_prompts(kind: str, count: int, work, held_out: bool, model: str | None = None) -> list[list[dict]]:
    """The first `count` chats of one task kind (chat is shuffled with a fixed seed so every template is in).
    Kinds that read the target's earlier answers (`summary`, `conversation`, `extract`) need those made first."""
    import random

    from mtdecode.recipes import prompts as p

    def answers(of: str) -> list[str]:
        tokenizer = _tokenizer(model)
        return [tokenizer.decode(r["tokens"][r["answer_start"] :], skip_special_tokens=True)
                for r in load_records(work, of, held_out)]  # fmt: skip

    if kind == "chat":
        texts = p.held_out_prompts() if held_out else p.training_prompts()
        random.Random(0).shuffle(texts)
    elif kind == "code":
        texts = p.code_prompts(held_out)
    elif kind == "math":
        texts = p.math_prompts(count, held_out)
    elif kind == "summary":
        texts = p.summary_prompts(answers("chat"))
    elif kind == "question":
        texts = p.question_prompts(held_out)
    elif kind == "conversation":
        answered = answers("question")  # the questions the target answered (all, unless the recipe is scaled down)
        return p.conversations(p.question_prompts(held_out)[: len(answered)], answered, held_out)[:count]
    elif kind == "passage":
        texts = p.passage_requests(held_out)
    elif kind == "extract":
        texts = p.passage_prompts(answers("passage"))
    else:
        raise ValueError(f"unknown task kind {kind!r}; expected one of {sorted(TASK_PROMPTS)}")
    return [[{"role": "user", "content": t}] for t in texts[:count]]


def make_data(work, kind: str, *, held_out: bool = False, prompts: int = 192, batch: int = 16,
              new_tokens: int = 128, model: str | None = None, sampled: bool = False) -> None:  # fmt: skip
    """The target (`model`: a name or folder for `load_model`, the default model if None) answers one task kind's
    prompts greedily, `batch` at a time; each shard keeps every sequence's tokens (prompt + answer), where its
    answer starts, and the target's features along it (float16).

    `sampled`: the answers are drawn from the target's own distribution instead (temperature 1, no truncation, the
    batch's index as the seed) and kept as the kind `KIND-sampled` (`sampled_kind`) beside the greedy ones:
    self-distilled text along paths that greedy decoding does not take, such as a user's sampling takes."""
    from tqdm import tqdm

    import mtdecode
    from mtdecode import KVCache, masks
    from mtdecode.strategies import Autoregressive
    from mtdecode.zoo import load_model

    folder = Path(work) / ("held_out" if held_out else "data") / (sampled_kind(kind) if sampled else kind)
    folder.mkdir(parents=True, exist_ok=True)
    chats = task_prompts(kind, prompts, work, held_out, model)
    batches = [chats[i : i + batch] for i in range(0, len(chats), batch)]
    todo = [i for i in range(len(batches)) if not (folder / f"{i:04d}.pt").exists()]
    if not todo:
        return
    target, tokenizer = load_model(model or DEFAULT_TARGET), _tokenizer(model)  # a CausalLM
    for i in tqdm(todo, desc=f"data: target answers ({kind}, {folder.parent.name})", unit="batch"):
        ids = [list(tokenizer.apply_chat_template(c, add_generation_prompt=True)["input_ids"]) for c in batches[i]]
        result = mtdecode.generate(
            target, ids, Autoregressive(), max_new_tokens=new_tokens, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.eos_token_id, temperature=1.0 if sampled else 0.0, seed=i if sampled else None,
        )  # fmt: skip
        records = []
        for b, prompt in enumerate(ids):
            tokens = torch.tensor(prompt + result.row(b))
            n = len(tokens)
            _, features = target.forward_features(
                tokens[None], torch.arange(n)[None], masks.causal(n, 0)[None, None], KVCache()
            )
            records.append({"tokens": tokens, "answer_start": len(prompt), "features": features[0].half()})
        tmp = folder / f"{i:04d}.tmp"
        torch.save(records, tmp)
        tmp.rename(folder / f"{i:04d}.pt")


def sampled_kind(kind: str) -> str:
    """The data kind under which `make_data(..., sampled=True)` keeps a task kind's sampled answers."""
    return f"{kind}-sampled"


#: chunks of installed packages' text read by the target (not generated): Python code, and docstrings as prose
TEXT_CHUNKS = {"text_code": 800, "text_prose": 800}
TEXT_CHUNK_TOKENS = 256


def make_text_data(work, kind: str, *, chunks: int, batch: int = 8, model: str | None = None) -> None:
    """The target reads text it did not write, `chunks` windows of `TEXT_CHUNK_TOKENS` tokens: the source of the
    Python packages installed beside it (`text_code`) or their docstrings (`text_prose`), files in sorted order,
    shuffled with a fixed seed. Its features along them teach the head more of the target than its own answers
    to the templated prompts can: the answers alone are few and alike (see `evaluate`)."""
    import ast
    import random
    import sysconfig

    from tqdm import tqdm

    from mtdecode import KVCache, masks
    from mtdecode.zoo import load_model

    folder = Path(work) / "data" / kind
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "done").exists():
        return
    tokenizer, target = _tokenizer(model), load_model(model or DEFAULT_TARGET)
    files = sorted(Path(sysconfig.get_paths()["purelib"]).rglob("*.py"))
    random.Random(0).shuffle(files)
    pieces, total = [], 0
    for path in files:
        if total >= chunks * TEXT_CHUNK_TOKENS:
            break
        try:
            source = path.read_text(encoding="utf-8")
            texts = [source] if kind == "text_code" else _docstrings(ast.parse(source))
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            for start in range(0, len(ids) - TEXT_CHUNK_TOKENS + 1, TEXT_CHUNK_TOKENS):
                pieces.append(ids[start : start + TEXT_CHUNK_TOKENS])
                total += TEXT_CHUNK_TOKENS
    pieces = pieces[:chunks]
    n = TEXT_CHUNK_TOKENS
    for i in tqdm(range(0, len(pieces), batch), desc=f"data: the target reads {kind}", unit="batch"):
        tokens = torch.tensor(pieces[i : i + batch])
        _, features = target.forward_features(
            tokens, torch.arange(n).expand(len(tokens), -1), masks.causal(n, 0).expand(len(tokens), 1, n, n), KVCache()
        )
        pairs = zip(tokens, features, strict=True)
        records = [{"tokens": t, "answer_start": 0, "features": f.half()} for t, f in pairs]
        torch.save(records, folder / f"{i // batch:04d}.pt")
    (folder / "done").write_text(f"{len(pieces)} chunks of {n} tokens\n")


def _docstrings(tree) -> list[str]:
    """The module, class and function docstrings of a parsed file that are at least 300 characters long."""
    import ast

    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = [ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, kinds)]
    return ["\n\n".join(d for d in found if d and len(d) >= 300)] if found else []


def load_records(work, kind: str | None = None, held_out: bool = False) -> list[dict]:
    """The records of one task kind, or of every kind (`kind=None`)."""
    folder = Path(work) / ("held_out" if held_out else "data")
    pattern = f"{kind}/*.pt" if kind else "*/*.pt"
    records = [r for shard in sorted(folder.glob(pattern)) for r in torch.load(shard)]
    if not records:
        raise FileNotFoundError(f"no data in {folder}/{pattern}: run the 'data' stage first")
    return records
