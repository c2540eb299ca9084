"""vLLM in the engines' venv: its speculative decoding, and its rejection sampler as a kernel.

    engines/vllm/bin/python vllm_worker.py --serve

This script imports only the standard library, torch and vllm (it runs in the venv that `make engines`
builds, not in mtdecode's). It answers one request per line of standard input with one line of JSON on
standard output (vLLM's own log goes to standard error):

- `{"op": "versions"}`: `{"vllm": ..., "torch": ...}`.
- `{"op": "generate", "model": FOLDER, "speculative": CONFIG or null, "prompts": [[ids], ...], "seeds": [S, ...],
  "max_new_tokens": N, "temperature": T, "top_k": K, "top_p": P, "context": N}`: one `LLM.generate` call over
  every prompt (as token ids), each with `SamplingParams(temperature, top_k, top_p, seed, max_tokens)` (top_k 0
  and top_p 1 mean off; T = 0 is greedy); answers `{"tokens": [[...], ...], "drafted": [n, ...], "accepted":
  [m, ...]}`, each request's new tokens and the tokens it drafted and accepted, as vLLM counts them per request
  (`per_request_spec_decode_metrics`). A worker runs one engine, for the first (model, speculative config,
  context) asked, and refuses any other: vLLM registers its platform's kernels when an engine starts, and a
  second registration in one process fails.
- `{"op": "reject", "p": [[[...]]], "q": [[[...]]], "drafted": [[...]], "seed": S}`: the trials of
  `mtdecode.testing.kernels.check_rejection_sampler` in one batch through vLLM's `rejection_sample`
  (`vllm.v1.sample.rejection_sampler`), each trial a request at temperature 1 whose target logits are log p and
  whose draft probabilities are q; its bonus token is drawn from p after the last drafted token, as vLLM's
  sampler draws it. The kernels are the ones the engine's worker registers on this platform (on a CPU, C++
  stand-ins for the Triton kernels). Answers `{"tokens": [[...], ...]}`: each trial's output without vLLM's
  placeholders.

Any request that raises is answered `{"error": TRACEBACK}`. The engine runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`): the same scheduler, model runner and sampler, without the process that
vLLM otherwise starts for them.
"""

import json
import os
import sys
import traceback
from pathlib import Path

# this script's folder holds mtdecode's modules: keep it from shadowing any package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of key/value cache: plenty for the oracle's models
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

#: whether this process registered the platform's kernels (a second registration fails, and so does an engine
#: started after one: `reject` and `generate` are asked of different workers)
REGISTERED: list[bool] = []


class Engine:
    """This worker's one engine, for the first (model folder, speculative config, context) asked."""

    def __init__(self):
        self.key, self.llm = None, None

    def get(self, folder: str, speculative: dict | None, context: int):
        from vllm import LLM

        key = (folder, json.dumps(speculative, sort_keys=True), context)
        if self.key is None:
            counted = {"per_request_spec_decode_metrics": "summary"} if speculative else {}  # (refused without)
            self.llm = LLM(
                model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=context,
                speculative_config=speculative, seed=0, **counted,
            )  # fmt: skip
            self.key = key
        elif key != self.key:
            raise RuntimeError(f"this worker runs the engine of {self.key}; it was asked for {key}")
        return self.llm


def generate(engine: Engine, request: dict) -> dict:
    """One `generate` request (see the module docstring)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = engine.get(request["model"], request["speculative"], request["context"])
    settings = [
        SamplingParams(
            temperature=request["temperature"], top_k=request["top_k"] or 0, top_p=request["top_p"] or 1.0,
            seed=seed, max_tokens=request["max_new_tokens"], detokenize=False,
        )  # fmt: skip
        for seed in request["seeds"]
    ]
    prompts = [TokensPrompt(prompt_token_ids=prompt) for prompt in request["prompts"]]
    answer = {"tokens": [], "drafted": [], "accepted": []}
    for output in llm.generate(prompts, settings, use_tqdm=False):  # in the order of the prompts
        completion = output.outputs[0]
        counts = completion.spec_decode_metrics  # None without speculation
        answer["tokens"].append(list(completion.token_ids))
        answer["drafted"].append(counts.num_draft_tokens if counts else 0)
        answer["accepted"].append(sum(j * n for j, n in enumerate(counts.histogram)) if counts else 0)
    return answer


def reject(request: dict) -> dict:
    """One batch of rejection-sampler trials (see the module docstring)."""
    import torch
    from vllm.platforms import current_platform
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID, rejection_sample

    p = torch.tensor(request["p"], dtype=torch.float32)  # (trials, k + 1, vocab)
    q = torch.tensor(request["q"], dtype=torch.float32)  # (trials, k, vocab)
    drafted = torch.tensor(request["drafted"], dtype=torch.int32)  # (trials, k)
    trials, k, vocab = q.shape
    if not REGISTERED:  # on a CPU: its C++ kernels, as the engine's worker registers them (once: not twice)
        current_platform.register_triton_kernel_overrides()
        REGISTERED.append(True)
    torch.manual_seed(request["seed"])
    bonus = torch.multinomial(p[:, k], 1).to(torch.int32)  # (trials, 1)
    metadata = SamplingMetadata(
        temperature=torch.ones(trials), all_greedy=False, all_random=True, top_p=None, top_k=None, generators={},
        max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=torch.zeros(trials),
        presence_penalties=torch.zeros(trials), repetition_penalties=torch.ones(trials), output_token_ids=[],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=None,
    )  # fmt: skip
    output = rejection_sample(
        drafted.reshape(-1).contiguous(), [k] * trials, k, torch.arange(1, trials + 1, dtype=torch.int32) * k,
        q.reshape(-1, vocab).contiguous(), p[:, :k].log().reshape(-1, vocab).contiguous(), bonus.contiguous(),
        metadata,
    )  # fmt: skip
    return {"tokens": [[t for t in row if t != PLACEHOLDER_TOKEN_ID] for row in output.tolist()]}


def serve() -> None:
    """The `--serve` loop (see the module docstring)."""
    channel = os.fdopen(os.dup(1), "w")  # the answers; everything else printed goes to standard error
    os.dup2(2, 1)
    engine = Engine()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["op"] == "versions":
                import torch
                import vllm

                answer = {"vllm": vllm.__version__, "torch": torch.__version__}
            elif request["op"] == "generate":
                answer = generate(engine, request)
            elif request["op"] == "reject":
                answer = reject(request)
            else:
                answer = {"error": f"unknown op {request['op']!r}"}
        except Exception:
            answer = {"error": traceback.format_exc()}
        channel.write(json.dumps(answer) + "\n")
        channel.flush()


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit(__doc__)
    serve()
