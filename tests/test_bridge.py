"""`mtdecode.testing.bridge`: a decoder run in another interpreter (here the same one, in a worker process).

Starting a worker costs a few seconds (it imports torch and transformers), so two tests start one each:
its decoder is greedy `generate`, and raises or dies on prompts that start with a poison token.
"""

import sys
import textwrap

import pytest

DECODER_MODULE = textwrap.dedent(
    """
    import os
    import torch

    RAISE, DIE = 15, 14

    def decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
        print("a decoder that prints must not corrupt the replies")
        if prompt[0] == RAISE:
            raise ValueError("poisoned prompt")
        if prompt[0] == DIE:
            os._exit(3)
        ids = torch.tensor([prompt])
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=model.generation_config.pad_token_id or 0,
        )
        return out[0, len(prompt):].tolist()
    """
)
PROMPTS = [[1, 2, 3], [4, 5], [7, 7, 7, 7]]


@pytest.fixture(scope="module")
def model(one_thread):
    from mtdecode.testing.models import tiny_model

    return tiny_model("llama", vocab_size=16, seed=3)


def remote(folder):
    """A remote decoder running `DECODER_MODULE` in this same interpreter, in a worker of its own."""
    from mtdecode.testing.bridge import remote_decoder

    (folder / "greedy_glue.py").write_text(DECODER_MODULE)
    return remote_decoder(sys.executable, "greedy_glue:decoder", cwd=str(folder))


def decode(decoder, model, prompts, budget=5):
    from mtdecode.testing.decoders import run_batch

    return run_batch(decoder, model, prompts, max_new_tokens=budget, seeds=list(range(len(prompts))))


def test_a_remote_decoder_gives_the_in_process_tokens_counts_its_forwards_and_passes_on_exceptions(tmp_path, model):
    from mtdecode.testing.coverage import Coverage, watching
    from mtdecode.testing.decoders import DecoderError, hf_decoder

    decoder = remote(tmp_path)
    try:
        assert decoder.takes_batches and decoder.records_own_calls
        assert decoder.__name__ == f"greedy_glue:decoder (in {sys.executable})"
        record = Coverage()
        with watching(model, record):
            outputs = decode(decoder, model, PROMPTS, budget=4)
        assert outputs == decode(hf_decoder(), model, PROMPTS, budget=4)
        assert decoder.versions["executable"] and decoder.versions["transformers"]
        assert decoder.decodes_one_at_a_time  # the glue takes one prompt per call: check_sampling's smaller default
        assert [t["max_logit_difference"] for t in decoder.transfers] == [0.0]  # same interpreter: same logits

        assert record.calls == len(PROMPTS)  # the glue takes one prompt at a time: one call each
        assert record.forwards == len(PROMPTS) * 4  # a prefill and three one-token steps per prompt
        assert record.prefills == len(PROMPTS) and record.verifications == 0 and not record.guessed
        assert record.committed == sum(len(o) for o in outputs)

        with pytest.raises(DecoderError, match="ValueError: poisoned prompt") as caught:
            decode(decoder, model, [[15, 1, 2]])
        assert caught.value.crashed
        assert caught.value.traceback.startswith("Traceback") and 'greedy_glue.py", line' in caught.value.traceback
        assert 'raise ValueError("poisoned prompt")' in caught.value.traceback
        assert "bridge_worker" not in caught.value.traceback  # the decoder's frames only
        assert decode(decoder, model, PROMPTS[:1], budget=4) == outputs[:1]  # the worker lives on
    finally:
        decoder.close()


def test_a_worker_that_dies_names_its_interpreter_and_the_next_call_starts_another(tmp_path, model):
    from mtdecode.testing.bridge import BridgeError

    decoder = remote(tmp_path)
    try:
        with pytest.raises(BridgeError, match=f"in {sys.executable} stopped.*exit code 3") as caught:
            decode(decoder, model, [[14, 1]])
        assert caught.value.crashed  # a check reports it as the decoder's crash
        assert "a decoder that prints must not corrupt the replies" in str(caught.value)  # its stderr's last line
        assert "the end of the worker's stderr" in caught.value.traceback
        assert len(decode(decoder, model, PROMPTS[:1])[0]) == 5
    finally:
        decoder.close()


def test_a_missing_interpreter_or_target_is_a_clear_error(tmp_path, model):
    from mtdecode.testing.bridge import BridgeError, remote_decoder

    with pytest.raises(BridgeError, match="interpreter '/no/such/python' does not exist"):
        decode(remote_decoder("/no/such/python", "greedy_glue:decoder", cwd=str(tmp_path)), model, PROMPTS)
    not_python = tmp_path / "not-python"
    not_python.write_text("#!/bin/sh\necho 'not a python' >&2\nexit 7\n")
    not_python.chmod(0o755)
    with pytest.raises(BridgeError, match="(?s)not-python stopped, exit code 7.*not a python"):
        remote_decoder(str(not_python), "greedy_glue:decoder", cwd=str(tmp_path)).start()
    with pytest.raises(BridgeError, match=r"could not import 'no_such_module:decoder'.*ModuleNotFoundError") as caught:
        remote_decoder(sys.executable, "no_such_module:decoder", cwd=str(tmp_path)).start()
    assert "Traceback" in caught.value.traceback


def test_a_model_that_differs_on_the_other_side_is_refused(model):
    from mtdecode.testing.bridge import BridgeError, RemoteDecoder, compare_fingerprints, probe_tokens
    from mtdecode.testing.bridge_worker import fingerprint

    ours = fingerprint(model, probe_tokens(16), None)
    decoder = RemoteDecoder(sys.executable, "greedy_glue:decoder")
    name = sorted(ours["parameters"])[0]
    with pytest.raises(BridgeError, match=f"differs from the oracle's in the bytes of \\['{name}'\\]"):
        compare_fingerprints(ours, {**ours, "parameters": {**ours["parameters"], name: "0"}}, model.dtype, decoder)
    shifted = [[x + 1e-3 for x in row] for row in ours["logits"]]
    with pytest.raises(BridgeError, match="computes other logits on a probe"):
        compare_fingerprints(ours, {**ours, "logits": shifted}, model.dtype, decoder)
