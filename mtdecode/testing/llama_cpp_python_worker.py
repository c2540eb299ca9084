"""llama-cpp-python in the engines' venv: llama.cpp's own greedy decoding with its margins, and its prompt lookup.

    LLAMA_CPP_LIB_PATH=... engines/llama-cpp-python/bin/python llama_cpp_python_worker.py < jobs.json
    LLAMA_CPP_LIB_PATH=... engines/llama-cpp-python/bin/python llama_cpp_python_worker.py --serve

This script imports only the standard library, numpy and llama_cpp (it runs in the venv that
`make engines` builds, not in mtdecode's). It reads one JSON object from standard input,
`{"model": PATH, "threads": N, "jobs": [{"prompt": TEXT, "tokens": N}, ...]}`, and for each job
decodes greedily as llama.cpp's programs do (flash attention on, as their default "auto" sets it
here; the prompt as one batch, then one token per forward; the first largest logit; stopping after an
end-of-generation token) and writes, as one JSON list:

- `prompt_ids`, `ids`: the prompt's tokens and the new ones;
- `pieces`: each new token's bytes as hex (its text, to find where another program's text departs);
- `margins`: at each step, the largest logit minus the second largest;
- `delta`: the largest difference of any logit between that path and one forward over the whole text
  (the prompt and the new tokens as one batch): how far batching alone moves llama.cpp's logits here.

With `--serve` it decodes with `LlamaPromptLookupDecoding` as the draft of `Llama(draft_model=...)`, one
request per line of standard input, `{"model": PATH, "prompt": [ids], "max_new_tokens": N, "temperature":
T, "top_k": K, "top_p": P, "seed": S, "max_ngram_size": M, "num_pred_tokens": D}` (top_k 0 and top_p 1
mean off; min-p, typical-p and the repeat penalty are off), and answers each on one line of standard
output: `{"tokens": [...], "drafted": n, "accepted": m}` (tokens the draft proposed, and tokens committed
beyond one per forward), or `{"error": TRACEBACK}`.
"""

import json
import sys
from pathlib import Path

# this script's folder holds mtdecode's `llama_cpp_programs` and others: keep it from shadowing any package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402


def greedy(llm, prompt: str, tokens: int) -> dict:
    """One job (see the module docstring)."""
    import llama_cpp  # in the engines' venv only (this module is importable without it)

    prompt_ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(prompt_ids)
    ids, rows, margins = [], [], []
    vocab = llm._model.vocab
    while len(ids) < tokens:
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        best = int(np.argmax(row))  # the first largest: the lowest id at a tie
        top = np.sort(row)[-2:]
        ids.append(best)
        rows.append(row)
        margins.append(float(top[1] - top[0]))
        if llama_cpp.llama_vocab_is_eog(vocab, best) or len(ids) == tokens:
            break
        llm.eval([best])
    # the same text as one batch: the rows that predicted each new token
    llm.reset()
    llm.eval(prompt_ids + ids[:-1])
    batched = np.array(llm.scores[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(ids)], dtype=np.float64)
    delta = float(np.abs(batched - np.array(rows)).max()) if ids else 0.0
    pieces = [llm.detokenize([t]).hex() for t in ids]
    return {"prompt_ids": prompt_ids, "ids": ids, "pieces": pieces, "margins": margins, "delta": delta}


def serve() -> None:
    """The `--serve` loop (see the module docstring)."""
    import traceback

    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    loaded = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            key = (request["model"], request["max_ngram_size"], request["num_pred_tokens"])
            if key not in loaded:
                draft = LlamaPromptLookupDecoding(request["max_ngram_size"], request["num_pred_tokens"])
                llm = llama_cpp.Llama(request["model"], n_ctx=request.get("context", 512), n_threads=1,
                                      type_k=0, type_v=0, draft_model=draft, verbose=False)  # float32 KV cache
                loaded[key] = (llm, _counting(llm, draft))
            llm, counts = loaded[key]
            counts.update(drafted=0, evals=0)
            llm.set_seed(request["seed"])
            tokens = []
            stream = llm.generate(
                request["prompt"], temp=request["temperature"], top_k=request["top_k"], top_p=request["top_p"],
                min_p=0.0, typical_p=1.0, repeat_penalty=1.0, reset=True,
            )  # fmt: skip
            for token in stream if request["max_new_tokens"] > 0 else ():
                tokens.append(token)
                ended = llama_cpp.llama_vocab_is_eog(llm._model.vocab, token)
                if len(tokens) == request["max_new_tokens"] or ended:
                    break
            accepted = max(0, len(tokens) - counts["evals"])
            answer = {"tokens": tokens, "drafted": counts["drafted"], "accepted": accepted}
        except Exception:  # noqa: BLE001 - reported to the caller with its traceback
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)


def _counting(llm, draft) -> dict:
    """Count the draft's proposed tokens and the model's forwards (evals) of each request."""
    counts = {"drafted": 0, "evals": 0}
    propose, evaluate = draft.__call__, llm.eval

    def proposing(input_ids, *args, **kwargs):
        out = propose(input_ids, *args, **kwargs)
        counts["drafted"] += len(out)
        return out

    def evaluating(tokens):
        counts["evals"] += 1
        return evaluate(tokens)

    llm.draft_model = type("Counted", (), {"__call__": lambda self, *a, **k: proposing(*a, **k)})()
    llm.eval = evaluating
    return counts


def main() -> None:
    if "--serve" in sys.argv[1:]:
        serve()
        return
    import llama_cpp

    request = json.load(sys.stdin)
    llm = llama_cpp.Llama(
        request["model"], n_ctx=request.get("context", 4096), n_threads=request.get("threads", 1),
        logits_all=True, flash_attn=True, verbose=False,
    )  # fmt: skip  flash attention: the programs' default ("auto") turns it on for this CPU
    json.dump([greedy(llm, job["prompt"], job["tokens"]) for job in request["jobs"]], sys.stdout)


if __name__ == "__main__":
    main()
