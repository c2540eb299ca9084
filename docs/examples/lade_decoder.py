"""lade 0.0.2 (lookahead decoding's public package) as a decoder for mtdecode's checks.

Runs in lade's own interpreter (transformers 4.34; see `docs/examples/lade.md`), not in mtdecode's:

    mtdecode check docs/examples/lade_decoder.py:decoder --python lade-venv/bin/python

It imports only torch and lade. `decoder` follows mtdecode's decoder protocol: greedy runs lade's
patched greedy search (lookahead: a Jacobi window of LEVEL-1 rows of WINDOW_SIZE tokens, n-gram
guesses verified in the same forward); sampling runs transformers' own `sample`, which lade 0.0.2
leaves unpatched (its sampling patch is commented out in `lade/utils.py`), so it never guesses.
"""

import contextlib
import os

import lade
import torch

#: n-gram size N (the window has N-1 rows), window width W and guess-set size G. Small, so that lade's
#: lookahead engages on the oracle's short prompts and budgets (the window needs N-2 warm-up steps)
LEVEL, WINDOW_SIZE, GUESS_SET_SIZE = 3, 4, 4

#: route lade's forwards through `model.__call__`, so that the forward hooks counting them (the oracle's
#: coverage) see them: lade calls `model.jforward_multilevel` directly, which no hook sees
COUNT_FORWARDS = True

os.environ["USE_LADE"] = "1"  # read by lade at every generate call
lade.augment_all()
lade.config_lade(LEVEL=LEVEL, WINDOW_SIZE=WINDOW_SIZE, GUESS_SET_SIZE=GUESS_SET_SIZE, DEBUG=0)


def decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
    """Continue `prompt` with lade's patched `generate`; return the new tokens.

    **Arguments:** the decoder protocol's: `model` (a transformers 4.34 llama), the prompt's token ids,
    `max_new_tokens`, `temperature` (0: greedy), `top_k` and `top_p` (None: off), `seed`.

    **Returns:** the new token ids, ending after the model's EOS
    (`model.generation_config.eos_token_id`) if it emits one.
    """
    if not hasattr(model, "jforward_multilevel"):  # lade.augment_llama patches LlamaForCausalLM only
        raise NotImplementedError(f"lade 0.0.2 decodes Llama models only, not {type(model).__name__}")
    ids = torch.tensor([list(prompt)], device=model.device)
    eos = model.generation_config.eos_token_id
    pad = model.generation_config.pad_token_id
    if temperature == 0:
        options = dict(do_sample=False, num_beams=1)
    else:
        options = dict(do_sample=True, temperature=temperature, top_k=top_k or 0, top_p=top_p or 1.0)
    with torch.random.fork_rng(devices=[]), default_dtype(model.dtype), visible_forwards(model):
        torch.manual_seed(seed)
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            pad_token_id=pad if pad is not None else 0,
            **options,
        )
    return out[0, ids.shape[1] :].tolist()


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """torch's default dtype set to the model's while the block runs.

    transformers 4.34 and lade build attention masks with `torch.full(..., torch.finfo(dtype).min)` and
    `torch.tensor([0, torch.finfo(dtype).min])` in the default dtype, which overflows for a float64 model.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype if dtype.is_floating_point else previous)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def visible_forwards(model):
    """Make lade's forwards visible to `model`'s forward hooks (see `COUNT_FORWARDS`) while the block runs.

    lade's greedy search calls `model.jforward_multilevel(**inputs)`; here that call goes through
    `model.__call__` with `jforward_multilevel` standing in for `forward`, so the hooks fire with the
    same keyword arguments (`input_ids` is what lade feeds before it appends its window and guesses).
    """
    if not COUNT_FORWARDS:
        yield
        return
    lookahead_forward = model.jforward_multilevel

    def called(**kwargs):
        model.forward = lookahead_forward
        try:
            return torch.nn.Module.__call__(model, **kwargs)
        finally:
            del model.forward

    model.jforward_multilevel = called
    try:
        yield
    finally:
        del model.jforward_multilevel
