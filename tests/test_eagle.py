"""The EAGLE-style draft head (`mtdecode.zoo.eagle`) and its training recipe (`mtdecode.recipes.eagle`), on tiny
models: the head predicts the next feature from the target's own features, training on the target's forward makes
its loss fall, and the recipe's data, losses and stages do what they say. The strategy is tested in
test_eagle_strategy.py, the shipped head for SmolLM2 in test_smollm2.py."""

import json

import pytest
import torch

import mtdecode
from mtdecode import CausalLM, KVCache, masks
from mtdecode.recipes.eagle import eagle_loss
from mtdecode.strategies import Autoregressive
from mtdecode.testing import tiny_model
from mtdecode.zoo.eagle import EagleHead

VOCAB, HIDDEN = 48, 32


def target_batch(model, batch: int, seq: int, seed: int):
    """The target's own greedy text (2 random prompt tokens, then its answer, as the head will be trained on), and
    the target's features along it, from `forward_features`."""
    prompts = torch.randint(0, VOCAB, (batch, 2), generator=torch.Generator().manual_seed(seed))
    answers = mtdecode.generate(model, prompts, Autoregressive(), max_new_tokens=seq - 2).tokens
    tokens = torch.cat([prompts, answers], dim=1)  # (batch, seq)
    adapter = CausalLM(model)
    rows = []
    for b in range(batch):  # one row at a time through the adapter's typed forward
        _, features = adapter.forward_features(
            tokens[b : b + 1], torch.arange(seq)[None], masks.causal(seq, 0)[None, None], KVCache()
        )
        rows.append(features)
    features = torch.cat(rows)
    return features.float(), tokens  # in `eagle_loss`'s order


def test_the_head_predicts_one_feature_per_position_and_scores_only_its_tokens():
    model = tiny_model("llama", vocab_size=VOCAB, hidden=HIDDEN, dtype=torch.float32, seed=2)
    heads = torch.tensor([0, 3, 5, 7, 11])
    torch.manual_seed(0)
    head = EagleHead(model.config, model.get_input_embeddings().weight, model.get_output_embeddings().weight, heads)
    features, tokens = target_batch(model, batch=2, seq=6, seed=1)
    predicted = head(features[:, :-1], tokens[:, 1:], torch.arange(5).expand(2, -1))
    assert predicted.shape == (2, 5, HIDDEN) and head.logits(predicted).shape == (2, 5, len(heads))
    # causal: changing the last input leaves the earlier predictions as they were
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % VOCAB
    again = head(features[:, :-1], changed[:, 1:], torch.arange(5).expand(2, -1))
    torch.testing.assert_close(again[:, :-1], predicted[:, :-1])
    assert not torch.allclose(again[:, -1], predicted[:, -1])
    # its scores are the target's own output rows for its tokens, applied to the predicted feature
    rows = model.get_output_embeddings().weight[heads]
    torch.testing.assert_close(head.logits(predicted), predicted @ rows.T)


def test_training_on_the_targets_forward_makes_the_loss_fall():
    """50 Adam steps on the tiny target's own text (32 answers of 10 tokens): the loss on them falls by more than
    half, and on answers to other prompts the feature and token losses fall too. A random tiny target's text has
    little to generalise from, so longer training only overfits it; the point here is that the head, its loss and
    its gradients learn what the target computes. Seeded: the figures repeat on every run."""
    model = tiny_model("llama", vocab_size=VOCAB, hidden=HIDDEN, dtype=torch.float32, seed=2)
    torch.manual_seed(0)
    head = EagleHead(
        model.config, model.get_input_embeddings().weight, model.get_output_embeddings().weight, torch.arange(VOCAB)
    )
    train = target_batch(model, batch=32, seq=12, seed=1)
    held_out = target_batch(model, batch=8, seq=12, seed=2)
    optimiser = torch.optim.Adam(head.parameters(), lr=3e-3)
    with torch.no_grad():
        before_train, before = float(eagle_loss(head, *train)[0]), [float(x) for x in eagle_loss(head, *held_out)]
    for _ in range(50):
        loss, _, _ = eagle_loss(head, *train)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        after_train, after = float(eagle_loss(head, *train)[0]), [float(x) for x in eagle_loss(head, *held_out)]
    assert after_train < 0.6 * before_train, (before_train, after_train)  # seen here: 1.24 -> 0.55
    assert after[0] < 0.9 * before[0], (before, after)  # seen here: 1.23 -> 0.90
    assert after[1] < before[1] and after[2] < before[2], (before, after)


def test_feature_noise_moves_what_the_head_reads_and_not_what_it_is_compared_with():
    """EAGLE-1's augmentation (`eagle_loss(..., noise=...)`): uniform draws in (-noise, noise) from the given
    generator on the features the head reads; the feature loss still compares with the target's clean features
    (noise on both, or none, fails this), and no noise is the plain loss."""
    model = tiny_model("llama", vocab_size=VOCAB, hidden=HIDDEN, dtype=torch.float32, seed=2)
    torch.manual_seed(0)
    head = EagleHead(
        model.config, model.get_input_embeddings().weight, model.get_output_embeddings().weight, torch.arange(VOCAB)
    )
    features, tokens = target_batch(model, batch=2, seq=8, seed=1)
    with torch.no_grad():
        plain = eagle_loss(head, features, tokens)
        assert eagle_loss(head, features, tokens, 0.0, torch.Generator().manual_seed(3)) == plain
        noisy = eagle_loss(head, features, tokens, 0.5, torch.Generator().manual_seed(3))
        draws = torch.rand(features[:, :-1].shape, generator=torch.Generator().manual_seed(3))
        predicted = head(features[:, :-1] + 0.5 * (2 * draws - 1), tokens[:, 1:], torch.arange(7).expand(2, -1))
        expected = torch.nn.functional.smooth_l1_loss(predicted, features[:, 1:])
    torch.testing.assert_close(noisy[1], expected)
    assert not torch.isclose(noisy[1], plain[1]), (noisy, plain)
    with pytest.raises(ValueError, match="at least 0"):
        eagle_loss(head, features, tokens, -0.1)


def test_the_recipe_trains_a_head_for_a_target_of_another_family(tmp_path, capsys):
    """The whole recipe (`python -m mtdecode.recipes.eagle all`) on a tiny GPT-2 target (LayerNorm, GPT-2's own config
    names, absolute positions) with the default model's tokenizer and chat template, at a hundredth of its prompts
    and with sampled chat answers too: every stage runs, the exported head has the target's width and LayerNorm,
    loads back, and drafts for Eagle, whose output is then greedy decoding's. A run cut short (`--until`) is
    continued by the next `train` to the schedule's end, and a `train` after that has nothing to do."""
    from mtdecode.recipes import eagle, eagle_data
    from mtdecode.strategies import Eagle
    from mtdecode.testing.families import tiny_family_model
    from mtdecode.zoo import load_tokenizer
    from mtdecode.zoo.eagle import load_head

    tokenizer = load_tokenizer()
    model = tiny_family_model("gpt2", vocab_size=len(tokenizer), dtype=torch.float32)
    folder, out = tmp_path / "tiny-gpt2", tmp_path / "head"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    eagle.main(["all", "--work", str(tmp_path / "work"), "--model", str(folder), "--scale", "0.01", "--new-tokens",
                "6", "--steps", "3", "--until", "2", "--window", "32", "--sequences", "1", "--sampled", "chat",
                "--out", str(out)])  # fmt: skip
    for _ in range(2):
        eagle.main(["train", "--work", str(tmp_path / "work"), "--model", str(folder), "--steps", "3",
                    "--window", "32"])  # fmt: skip
    log = [json.loads(line) for line in (tmp_path / "work" / "eagle_train.log").read_text().splitlines()]
    assert [entry["step"] for entry in log if "loss" in entry] == [1, 2, 3]
    assert "at step 3 already" in capsys.readouterr().out
    assert eagle_data.load_records(tmp_path / "work", eagle_data.sampled_kind("chat"))  # `--sampled chat` made its data
    head = load_head(model, out)
    assert isinstance(head.norm, torch.nn.LayerNorm) and head.fuse.out_features == model.config.n_embd == 32
    prompt = tokenizer("def add(a, b):\n    return a + b\n\ndef add(a, b):")["input_ids"]
    greedy = mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=12)
    drafted = mtdecode.generate(model, prompt, Eagle(head, depth=2, width=2), max_new_tokens=12, seed=0)
    assert drafted.row(0) == greedy.row(0)


def test_sampled_answers_are_the_targets_own_draws_kept_beside_the_greedy_ones(tmp_path):
    """`make_data(..., sampled=True)`: the same prompts answered by draws from the target at temperature 1, seeded
    by the batch, kept as the kind `chat-sampled` beside the greedy `chat`. Each answer is the one `generate` draws
    with that seed, and they differ from the greedy answers (a control: the greedy kind's answers are greedy
    decoding's)."""
    from mtdecode.recipes import eagle_data
    from mtdecode.testing.families import tiny_family_model
    from mtdecode.zoo import load_model, load_tokenizer

    tokenizer = load_tokenizer()
    folder, work = tmp_path / "tiny-gpt2", tmp_path / "work"
    tiny_family_model("gpt2", vocab_size=len(tokenizer), dtype=torch.float32).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for sampled in (False, True):
        eagle_data.make_data(work, "chat", prompts=3, batch=3, new_tokens=6, model=str(folder), sampled=sampled)
    greedy = eagle_data.load_records(work, "chat")
    drawn = eagle_data.load_records(work, eagle_data.sampled_kind("chat"))
    prompts = [r["tokens"][: r["answer_start"]].tolist() for r in greedy]
    assert prompts == [r["tokens"][: r["answer_start"]].tolist() for r in drawn]
    target = load_model(str(folder))
    settings = dict(max_new_tokens=6, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    plain = mtdecode.generate(target, prompts, Autoregressive(), **settings)
    draws = mtdecode.generate(target, prompts, Autoregressive(), temperature=1.0, seed=0, **settings)
    answers = [[r["tokens"][r["answer_start"] :].tolist() for r in records] for records in (greedy, drawn)]
    assert answers == [[plain.row(b) for b in range(3)], [draws.row(b) for b in range(3)]]
    assert answers[0] != answers[1]
    assert all("features" not in r for r in greedy + drawn)  # token ids only: the features are recomputed


def test_features_computed_in_batches_are_each_sequences_own(tmp_path):
    """`with_features` pads records of different lengths into one forward: each record's features equal a forward of
    its own (up to float16 storage and the batched kernels' rounding), and a forward without the causal mask's
    protection (the padding before the record) would not."""
    from mtdecode.recipes.eagle_data import with_features

    model = tiny_model("llama", vocab_size=64, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    records = [{"tokens": torch.randint(0, 64, (n,), generator=generator), "answer_start": 0} for n in (5, 9, 7, 12)]
    found = with_features(records, model, batch=3)
    target = CausalLM.wrap(model)
    for record, got in zip(records, found, strict=True):
        n = len(record["tokens"])
        _, alone = target.forward_features(record["tokens"][None], torch.arange(n)[None],
                                           masks.causal(n, 0)[None, None], KVCache())  # fmt: skip
        assert got["tokens"] is record["tokens"] and got["features"].shape == (n, 32)
        torch.testing.assert_close(got["features"].float(), alone[0].half().float(), atol=1e-2, rtol=1e-2)
    shifted = torch.cat([torch.zeros(3, dtype=torch.long), records[0]["tokens"]])  # padding before, not after
    _, wrong = target.forward_features(shifted[None], torch.arange(8)[None], masks.causal(8, 0)[None, None], KVCache())
    assert (wrong[0, 3:].half().float() - found[0]["features"].float()).abs().max() > 0.1


def test_kept_features_are_read_back_and_a_cut_run_resumes_at_the_next_group(tmp_path):
    """`with_features(..., cache=)` keeps each group's features as it goes: a run cut after its first group
    resumes at the second, a run after a whole one computes nothing, and both return exactly the features of a run
    without the cache. Other records or another batch size get a file of their own."""
    from mtdecode.recipes.eagle_data import with_features

    model = tiny_model("llama", vocab_size=64, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    records = [{"tokens": torch.randint(0, 64, (n,), generator=generator), "answer_start": 0} for n in (5, 9, 7, 12, 3)]
    expected = with_features(records, model, batch=2)  # 3 groups
    target, forward, calls = CausalLM.wrap(model), CausalLM.wrap(model).forward_features, []

    def counted(*args, cut: int | None = None):
        calls.append(1)
        if cut is not None and len(calls) > cut:
            raise RuntimeError("the machine went away")
        return forward(*args)

    target.forward_features = lambda *args: counted(*args, cut=1)
    with pytest.raises(RuntimeError, match="went away"):
        with_features(records, target, batch=2, cache=tmp_path)
    (done,) = tmp_path.glob("features-*.done")
    assert done.read_text() == "1\n"
    for forwards in (2, 0):  # resumed: the two groups left; then none
        calls.clear()
        target.forward_features = counted
        found = with_features(records, target, batch=2, cache=tmp_path)
        assert len(calls) == forwards
        for got, want in zip(found, expected, strict=True):
            assert torch.equal(got["features"], want["features"])
    with_features(records[:4], target, batch=2, cache=tmp_path)
    with_features(records, target, batch=3, cache=tmp_path)
    assert len(list(tmp_path.glob("features-*.npy"))) == 3


def test_training_starts_from_the_committed_checkpoint_when_the_work_folder_has_none(tmp_path, monkeypatch):
    """`commit_checkpoint` keeps the head's own weights (not the target's rows, not the optimiser) and the step;
    `resume` prefers the work folder's checkpoint (optimiser and all), else starts from the committed one at its
    step with a fresh optimiser whose learning rate warms up again, else from a new head, and refuses a checkpoint
    made on a schedule of another length; `trained` (for `export` and `evaluate`) reads the committed one when the
    work folder has none."""
    from mtdecode.recipes import eagle

    model = tiny_model("llama", vocab_size=VOCAB, dtype=torch.float32)
    records = [{"tokens": torch.arange(VOCAB)}]
    torch.manual_seed(0)
    head = eagle.build_head(model, records)
    optimiser = torch.optim.AdamW(head.parameters(), lr=1e-3)
    work, empty = tmp_path / "work", tmp_path / "empty"
    work.mkdir()
    state = {"head": head.state_dict(), "optimiser": optimiser.state_dict(), "step": 7, "steps": 20, "warm_from": 0}
    torch.save(state, work / "eagle.pt")
    committed = eagle.commit_checkpoint(work, tmp_path / "checkpoint.safetensors")
    monkeypatch.setattr(eagle, "CHECKPOINT", committed)
    weights, step, steps = eagle.load_checkpoint()
    assert (step, steps) == (7, 20) and weights.keys() == head.state_dict().keys() and "embedding" not in weights
    for folder, is_committed, start, warm_from in ((work, True, 7, 0), (empty, True, 7, 7), (empty, False, 0, 0)):
        got, _, got_start, got_warm = eagle.resume(folder, model, records, 1e-3, is_committed, steps=20)
        assert (got_start, got_warm) == (start, warm_from)
        if start:  # continued on a schedule of another length, the learning rate would jump: refused
            with pytest.raises(ValueError, match="schedule of 20 steps, not 30: continue it with --steps 20"):
                eagle.resume(folder, model, records, 1e-3, is_committed, steps=30)
        pairs = zip(got.state_dict().values(), head.state_dict().values(), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs) == (start == 7), folder
    state, step = eagle.trained(empty)  # what `export` and `evaluate` read without a work checkpoint
    assert step == 7 and all(torch.equal(state[k], v) for k, v in head.state_dict().items())
    with pytest.raises(FileNotFoundError, match="run the 'train' stage first"):
        eagle.trained(empty, committed=False)
    warmed = eagle.learning_rate(1e-3, 300, 1000)
    assert eagle.learning_rate(1e-3, 300, 1000, warm_from=300) == pytest.approx(warmed / 100)


def test_packed_data_comes_back_as_it_was_and_a_changed_file_is_refused(tmp_path):
    """`pack` keeps every record's tokens, answer start, kind and split; `load_records` reads the packed file when
    the work folder has no data; a file whose bytes changed no longer matches its manifest's SHA-256."""
    from mtdecode.recipes.eagle_data import load_packed, load_records, pack

    work = tmp_path / "work"
    made = {("data", "chat"): [[1, 2, 3, 4], [5, 6]], ("data", "code"): [[7, 8, 9]], ("held_out", "chat"): [[3, 2, 1]]}
    for (split, kind), sequences in made.items():
        (work / split / kind).mkdir(parents=True)
        records = [{"tokens": torch.tensor(t), "answer_start": 1} for t in sequences]
        torch.save(records, work / split / kind / "0000.pt")
    path = pack(work, tmp_path / "packed" / "data.npz", command="python -m mtdecode.recipes.eagle data")
    manifest = json.loads(path.with_suffix(".json").read_text())
    assert (manifest["records"], manifest["tokens"], manifest["by_kind"]["held_out/chat"]) == (4, 12, {"records": 1,
                                                                                                    "tokens": 3})
    empty = tmp_path / "empty"
    for split, held_out in (("data", False), ("held_out", True)):
        for kind in ("chat", "code"):
            expected = [t for (s, k), ts in made.items() if (s, k) == (split, kind) for t in ts]
            got = load_records(empty, kind, held_out, packed=path) if expected else []
            assert [r["tokens"].tolist() for r in got] == expected
            assert all(r["answer_start"] == 1 and r["kind"] == kind for r in got)
    assert len(load_records(work, packed=path)) == 3  # the work folder's own data comes first
    data = bytearray(path.read_bytes())
    data[-40] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256"):
        load_packed(path)


def test_an_unrolled_draft_sees_what_a_real_draft_sees():
    """Training-time test (`unrolled`): depth d of chain t equals the head's own forward over the target's entries up
    to position t followed by the chain's drafted entries, fed its predicted features (a causal forward is what
    the head's cache gives a real draft); depth 1 is the head's teacher-forced forward. A mask that let a draft
    entry see the target's entries past its chain's start (`depth_mask` with `tril` shifted by one) fails it."""
    from mtdecode.recipes import eagle_unrolled as recipe

    head, features, tokens = float64_head_and_text(batch=2, seq=9)
    depths = 3
    predicted = recipe.unrolled(head, features, tokens, depths)
    torch.testing.assert_close(predicted[0], head(features[:, :-1], tokens[:, 1:], torch.arange(8).expand(2, -1)))
    for t in (0, 3, 5):
        for d in range(2, depths + 1):
            torch.testing.assert_close(predicted[d - 1][:, t], real_draft(head, features, tokens, predicted, t, d))
    # the loss of every depth is a number that training can lower, and top-K keeps fewer tokens than the whole
    assert recipe.unrolled_loss(head, features, tokens, depths).requires_grad
    p = torch.softmax(head.logits(features[:, 1:]).double(), dim=-1)
    full = float(recipe.distill_loss(head, predicted[0], features[:, 1:]).detach())
    top = float(recipe.distill_loss(head, predicted[0], features[:, 1:], top_k=3).detach())
    assert 0 < top < full and p.topk(3, dim=-1).values.sum(-1).max() < 1


def test_a_wrong_depth_mask_is_caught(monkeypatch):
    """The check above can fail: with depth 1's entries visible one position past each chain's start, depth 2 no
    longer equals a real draft."""
    from mtdecode.recipes import eagle_unrolled as recipe

    right = recipe.depth_mask

    def leaky(chains, depths, device="cpu"):
        mask = right(chains, depths, device)
        mask[chains:, :chains] |= torch.ones(chains, chains, dtype=torch.bool).tril(1).repeat(depths - 1, 1)
        return mask

    monkeypatch.setattr(recipe, "depth_mask", leaky)
    head, features, tokens = float64_head_and_text(batch=1, seq=6)
    predicted = recipe.unrolled(head, features, tokens, 2)
    assert not torch.allclose(predicted[1][:, 2], real_draft(head, features, tokens, predicted, 2, 2))


def float64_head_and_text(batch: int, seq: int):
    """A head in float64 for the tiny target (seeded), and the target's features and tokens along its own text."""
    model = tiny_model("llama", vocab_size=VOCAB, hidden=HIDDEN, dtype=torch.float64, seed=2)
    torch.manual_seed(0)
    head = EagleHead(
        model.config, model.get_input_embeddings().weight, model.get_output_embeddings().weight, torch.arange(VOCAB)
    ).double()
    features, tokens = target_batch(model, batch=batch, seq=seq, seed=3)
    return head, features.double(), tokens


def real_draft(head, features, tokens, predicted, t: int, d: int):
    """What a real draft predicts at depth d of the chain from position t: the head's own causal forward over the
    target's entries up to t, then the chain's entries fed its predicted features f'_{t+1}..f'_{t+d-1}."""
    drafted = [predicted[k][:, t : t + 1] for k in range(d - 1)]
    inputs = torch.cat([features[:, : t + 1], *drafted], dim=1)  # real f_0..f_t, then the chain's
    fed = tokens[:, 1 : t + d + 1]  # x_1..x_{t+d}
    return head(inputs, fed, torch.arange(t + d).expand(len(tokens), -1))[:, -1]
