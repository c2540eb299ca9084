"""The EAGLE recipe's data, stage by stage: the target's own answers to varied prompts (`make_data`), text it reads
(`make_text_data`), the records both leave in the work folder (`load_records`), the target's features along them
(`with_features`), and the data packed into the repository (`pack`, `load_packed`).

The data is token ids only. The features a head learns from are the target's, recomputed from the tokens by one
batched forward per group of records when training or evaluation needs them, so the data that is kept is small:
`pack` writes every record of a work folder as one compressed file of token ids (`PACKED`) with a manifest
(`PACKED_MANIFEST`: the command and seeds that made it, its counts and its SHA-256), and `load_records` reads
that file when the work folder holds no data of its own.
"""

import functools
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

#: the target whose answers the data holds, by default
DEFAULT_TARGET = "smollm2-135m-instruct"

# Prompts: `mtdecode.recipes.prompts`, four task kinds; none of the benchmark's prompts is among them.

HEAD_TOKENS = 8192  # the head scores this many of the most frequent tokens of the data
#: the recipe's data for the default target, kept in the repository, and its manifest
PACKED = Path(__file__).with_name("data") / "eagle-smollm2-135m.npz"
PACKED_MANIFEST = PACKED.with_suffix(".json")


#: prompts per task kind: (training, held out). The summaries' passages are the target's own chat answers; the
#: conversations continue its answers to `question`, and `extract` reads the passages it wrote in `passage`.
TASK_PROMPTS = {"chat": (384, 24), "code": (128, 16), "math": (192, 16), "summary": (192, 16), "question": (64, 8),
                "conversation": (192, 24), "passage": (48, 8), "extract": (144, 24)}  # fmt: skip
NEW_TOKENS = {"passage": 160}  # the others: 128
#: prompts answered per batch (the sampled answers' seeds are the batches' indices)
DATA_BATCH = 32


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


def make_data(work, kind: str, *, held_out: bool = False, prompts: int = 192, batch: int = DATA_BATCH,
              new_tokens: int = 128, model: str | None = None, sampled: bool = False) -> None:  # fmt: skip
    """The target (`model`: a name or folder for `load_model`, the default model if None) answers one task kind's
    prompts greedily, `batch` at a time; each shard keeps every sequence's tokens (prompt + answer) and where its
    answer starts (`with_features` adds the target's features when they are needed).

    `sampled`: the answers are drawn from the target's own distribution instead (temperature 1, no truncation, the
    batch's index as the seed) and kept as the kind `KIND-sampled` (`sampled_kind`) beside the greedy ones:
    self-distilled text along paths that greedy decoding does not take, such as a user's sampling takes."""
    from tqdm import tqdm

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
        records = answer_batch(target, tokenizer, batches[i], new_tokens, sampled=sampled, seed=i if sampled else None)
        tmp = folder / f"{i:04d}.tmp"
        torch.save(records, tmp)
        tmp.rename(folder / f"{i:04d}.pt")


def answer_batch(target, tokenizer, chats: list, new_tokens: int, *, sampled: bool = False,
                 seed: int | None = None) -> list[dict]:  # fmt: skip
    """One batch of chats answered by the target in one `generate`: greedily, or (`sampled`) drawn at temperature 1
    with `seed`. Each record holds a prompt and its answer's tokens, and where the answer starts."""
    import mtdecode
    from mtdecode.strategies import Autoregressive

    ids = [list(tokenizer.apply_chat_template(c, add_generation_prompt=True)["input_ids"]) for c in chats]
    result = mtdecode.generate(
        target, ids, Autoregressive(), max_new_tokens=new_tokens, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id, temperature=1.0 if sampled else 0.0, seed=seed,
    )  # fmt: skip
    return [{"tokens": torch.tensor(prompt + result.row(b)), "answer_start": len(prompt)}
            for b, prompt in enumerate(ids)]  # fmt: skip


def sampled_kind(kind: str) -> str:
    """The data kind under which `make_data(..., sampled=True)` keeps a task kind's sampled answers."""
    return f"{kind}-sampled"


#: chunks of installed packages' text read by the target (not generated): Python code, and docstrings as prose
TEXT_CHUNKS = {"text_code": 800, "text_prose": 800}
TEXT_CHUNK_TOKENS = 256


def make_text_data(work, kind: str, *, chunks: int, batch: int = 8, model: str | None = None) -> None:
    """Text the target will read without having written it, `chunks` windows of `TEXT_CHUNK_TOKENS` tokens: the
    source of the Python packages installed beside it (`text_code`) or their docstrings (`text_prose`), files in
    sorted order, shuffled with a fixed seed. The target's features along them teach the head more of the target
    than its own answers to the templated prompts can: the answers alone are few and alike (see `evaluate`). The
    packages differ from machine to machine, so the text is kept in the packed data with the rest."""
    import ast
    import random
    import sysconfig

    from tqdm import tqdm

    folder = Path(work) / "data" / kind
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "done").exists():
        return
    tokenizer = _tokenizer(model)
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
    for i in tqdm(range(0, len(pieces), batch), desc=f"data: text to read ({kind})", unit="batch"):
        records = [{"tokens": torch.tensor(piece), "answer_start": 0} for piece in pieces[i : i + batch]]
        torch.save(records, folder / f"{i // batch:04d}.pt")
    (folder / "done").write_text(f"{len(pieces)} chunks of {TEXT_CHUNK_TOKENS} tokens\n")


def _docstrings(tree) -> list[str]:
    """The module, class and function docstrings of a parsed file that are at least 300 characters long."""
    import ast

    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = [ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, kinds)]
    return ["\n\n".join(d for d in found if d and len(d) >= 300)] if found else []


def load_records(work, kind: str | None = None, held_out: bool = False, *, packed: Path | None = PACKED) -> list[dict]:
    """The records of one task kind, or of every kind (`kind=None`), each `{"tokens", "answer_start", "kind"}`:
    from the work folder's shards, or, if the work folder has no data at all, from the `packed` file."""
    work = Path(work)
    folder = work / ("held_out" if held_out else "data")
    pattern = f"{kind}/*.pt" if kind else "*/*.pt"
    if not any(work.glob("*/*/*.pt")) and packed is not None and packed.exists():
        return [r for r in load_packed(packed) if r["held_out"] == held_out and kind in (None, r["kind"])]
    records = [{**r, "kind": shard.parent.name} for shard in sorted(folder.glob(pattern)) for r in torch.load(shard)]
    if not records:
        raise FileNotFoundError(f"no data in {folder}/{pattern}: run the 'data' stage first")
    return records


def with_features(records: list[dict], target, *, batch: int = 16, cache: Path | None = None) -> list[dict]:
    """Each record with `features`, the target's last hidden states along its tokens (float16), computed by one
    forward per `batch` records of similar length, right-padded: under the causal mask no position sees the
    padding after it. `target` is a `CausalLM` or a transformers model.

    `cache`: a folder where the features are kept (`features_cache`), so that a run that is cut, or the next
    stage, reads them instead of computing them again. Without it they are computed and kept in memory only.
    """
    from tqdm import tqdm

    from mtdecode import KVCache, masks
    from mtdecode.model import CausalLM

    target = CausalLM.wrap(target)
    order = sorted(range(len(records)), key=lambda i: len(records[i]["tokens"]))
    groups = [order[start : start + batch] for start in range(0, len(order), batch)]
    store = features_cache(records, target, batch, cache) if cache is not None else None
    done = store.done if store else 0
    out: list[dict] = [{} for _ in records]
    for i in (i for group in groups[:done] for i in group):  # kept by an earlier run
        out[i] = {**records[i], "features": store.read(i)}
    with torch.no_grad():
        bar = tqdm(range(done, len(groups)), desc="features: the target reads the data", unit="batch", initial=done,
                   total=len(groups))  # fmt: skip
        for g in bar:
            group = groups[g]
            n = max(len(records[i]["tokens"]) for i in group)
            tokens = torch.zeros(len(group), n, dtype=torch.long)  # (batch, n), zeros after each record's end
            for row, i in enumerate(group):
                tokens[row, : len(records[i]["tokens"])] = records[i]["tokens"]
            positions = torch.arange(n).expand(len(group), -1)
            mask = masks.causal(n, 0).expand(len(group), 1, n, n)
            _, features = target.forward_features(tokens, positions, mask, KVCache())  # (batch, n, hidden)
            for row, i in enumerate(group):
                out[i] = {**records[i], "features": features[row, : len(records[i]["tokens"])].half()}
            if store:
                store.write(group, [out[i]["features"] for i in group], g + 1)
    return out


class FeatureStore:
    """The features of a list of records in one float16 file (`features-KEY.npy`, records end to end, opened as
    a memory map) and how many of `with_features`' groups it holds (`features-KEY.done`), written after each group:
    a run that is cut resumes at the next group."""

    def __init__(self, path: Path, starts: list[int], tokens: int, hidden: int):
        self.path, self.starts = path, starts
        self.progress = path.with_suffix(".done")
        mode = "r+" if path.exists() else "w+"
        self.array = np.lib.format.open_memmap(path, mode=mode, dtype=np.float16, shape=(tokens, hidden))
        self.done = int(self.progress.read_text()) if self.progress.exists() else 0

    def read(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.array(self.array[self.starts[i] : self.starts[i + 1]]))

    def write(self, group: list[int], features: list[torch.Tensor], done: int) -> None:
        for i, f in zip(group, features, strict=True):
            self.array[self.starts[i] : self.starts[i + 1]] = f.numpy()
        self.array.flush()
        self.progress.write_text(f"{done}\n")
        self.done = done


def features_cache(records: list[dict], target, batch: int, folder: Path) -> FeatureStore:
    """The `FeatureStore` in `folder` for these records, this target and this batch size: its name is a hash of all
    three (the features of a padded batch depend on its company in the last bits), so other data gets its own."""
    digest = hashlib.sha256(f"{target.dtype}|{batch}|".encode())
    for name, weight in target.hf.state_dict().items():  # the target itself, not its name
        digest.update(name.encode() + weight.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    for r in records:
        digest.update(r["tokens"].numpy().astype(np.int64).tobytes() + b"|")
    lengths = [len(r["tokens"]) for r in records]
    starts = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"features-{digest.hexdigest()[:16]}.npy"
    return FeatureStore(path, starts, starts[-1], target.config.hidden_size)


def pack(work, path: Path = PACKED, *, command: str = "") -> Path:
    """Every record of the work folder (training and held out, every kind) as one compressed file of token ids,
    with a manifest beside it: `command`, the records and tokens by kind, and the file's SHA-256."""
    rows = [(r, False) for r in load_records(work, packed=None)] + [
        (r, True) for r in load_records(work, held_out=True, packed=None)
    ]
    kinds = sorted({r["kind"] for r, _ in rows})
    tokens = np.concatenate([r["tokens"].numpy() for r, _ in rows])
    lengths = np.array([len(r["tokens"]) for r, _ in rows], dtype=np.int64)
    arrays = {
        "tokens": tokens.astype(np.uint16 if tokens.max() < 2**16 else np.uint32),  # every record's, in a row
        "starts": np.concatenate([[0], np.cumsum(lengths)[:-1]]), "lengths": lengths,
        "answer_start": np.array([r["answer_start"] for r, _ in rows], dtype=np.int64),
        "kind": np.array([kinds.index(r["kind"]) for r, _ in rows], dtype=np.int64),
        "held_out": np.array([h for _, h in rows], dtype=bool), "kinds": np.array(kinds),
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    counts = {}
    for (r, held_out), n in zip(rows, lengths.tolist(), strict=True):
        entry = counts.setdefault(("held_out/" if held_out else "") + r["kind"], {"records": 0, "tokens": 0})
        entry["records"], entry["tokens"] = entry["records"] + 1, entry["tokens"] + n
    manifest = {
        "command": command, "target": DEFAULT_TARGET if "--model" not in command else "see the command",
        "seeds": "greedy kinds: none; KIND-sampled: temperature 1, the i-th batch of prompts drawn with seed i "
        f"(batches of {DATA_BATCH}); text_code and text_prose: files shuffled with seed 0",
        "records": len(rows), "tokens": int(lengths.sum()), "by_kind": counts, "sha256": _sha256(path),
    }  # fmt: skip
    path.with_suffix(".json").write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def load_packed(path: Path = PACKED) -> list[dict]:
    """The records `pack` wrote, each with its `kind` and `held_out`; the file must match its manifest's SHA-256."""
    manifest = json.loads(path.with_suffix(".json").read_text())
    if _sha256(path) != manifest["sha256"]:
        raise ValueError(f"{path} does not match the SHA-256 of {path.with_suffix('.json').name}: it was changed")
    with np.load(path) as data:
        tokens, kinds = torch.from_numpy(data["tokens"].astype(np.int64)), data["kinds"].tolist()
        rows = zip(data["starts"], data["lengths"], data["answer_start"], data["kind"], data["held_out"], strict=True)
        return [{"tokens": tokens[a : a + n], "answer_start": int(s), "kind": kinds[k], "held_out": bool(h)}
                for a, n, s, k, h in rows]  # fmt: skip


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
