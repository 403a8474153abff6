"""Hugging Face transformers models with attn_implementation="cpattn"
(cpattn.integrations.transformers): tiny configs with random weights (nothing is downloaded), a
Llama-style causal GQA model and a Qwen2-style one whose second layer has a sliding window.
Gemma 2 (logit softcap) and gpt-oss (attention sinks) configs against eager and under CP too.
Two SGD steps under cpattn.context_parallel at CP=2 and CP=4 on gloo processes, with attention
dropout 0.1 and model.gradient_checkpointing_enable(), give one process's losses, gradients and
weights (the same seeds: the same dropout masks); packed sequences (restarting position ids,
or cu_seq_lens) too. On one process cpattn gives transformers' own eager and sdpa attention,
and what the integration cannot honour raises cpattn.Error naming the reason (also under CP,
where a rank refusing alone fails every rank at once)."""

import time
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import cpattn
import cpattn.integrations.transformers as cpattn_hf
from helpers import max_rel, run_processes

transformers = pytest.importorskip("transformers")

SEQ, BATCH, VOCAB = 48, 2, 128   # SEQ splits into 2 * CP zigzag chunks for CP = 2 and 4
WINDOW = 8                       # qwen2's sliding window (layer 1), well below SEQ
DOCS = (13, 5, 20, 10)           # the packed documents' lengths (sum SEQ)
DROPOUT, LR, STEPS = 0.1, 0.5, 2
IGNORE = -100                    # transformers' ignore index of labels
CP_TOL = 1e-5     # fp32: CP vs one process (partial results merged in another order)
IMPL_TOL = 1e-5   # fp32: cpattn vs transformers' eager / sdpa on one process
CP_TIMEOUT = 120  # seconds: the deadline of every wait on another rank


def _config(name, dropout, **extra):
    """A tiny config: 2 layers, hidden 32, 4 query heads / 2 kv heads (GQA), untied weights
    drawn with std 0.2 (transformers' 0.02 leaves the attention almost uniform, so that masks
    and dropout would barely move the loss)."""
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4 * SEQ,
                  attention_dropout=dropout, tie_word_embeddings=False, initializer_range=0.2,
                  **extra)
    if name == "llama":
        return transformers.LlamaConfig(**common)
    if name == "gemma2":  # logit softcap 2 (strong for these scores), layer 0 a sliding window
        return transformers.Gemma2Config(**common, head_dim=8, attn_logit_softcapping=2.0,
                                         sliding_window=WINDOW)
    if name == "gpt_oss":  # learnable attention sinks (s_aux), layer 0 a sliding window
        return transformers.GptOssConfig(**common, head_dim=8, num_local_experts=2,
                                         num_experts_per_tok=1, sliding_window=WINDOW)
    # Qwen2: layer 0 full causal, layer 1 a sliding window (layer i slides when i >=
    # max_window_layers).
    return transformers.Qwen2Config(**common, use_sliding_window=True, sliding_window=WINDOW,
                                    max_window_layers=1)


def _model(name, impl="cpattn", dropout=0.0, checkpointing=False, **extra):
    """The model of `name` with the weights of seed 0 (alike for every implementation and
    rank), in training mode."""
    cpattn_hf.register()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(name, dropout, **extra),
                                                          attn_implementation=impl)
    model.train()
    if checkpointing:
        with warnings.catch_warnings():  # transformers 5: an alias of activation_checkpointing
            warnings.simplefilter("ignore", FutureWarning)
            model.gradient_checkpointing_enable()
    return model


def _packed_positions():
    """Position ids [BATCH, SEQ] restarting at 0 for each document of DOCS."""
    return torch.cat([torch.arange(n) for n in DOCS]).expand(BATCH, SEQ).clone()


def _cu_seqlens():
    """DOCS as flash-attn's cumulative lengths of the whole sequence, int32."""
    return torch.tensor(np.cumsum((0,) + DOCS), dtype=torch.int32)


def _batch(step, packing=None):
    """(input_ids, position_ids, labels) [BATCH, SEQ] of the whole sequence: labels shifted here
    (before any sharding), none across a document end when packed. packing: None (one
    document), "positions" (restarting position ids) or "cu_seqlens" (positions numbered
    through the sequence; the documents come from cu_seq_lens)."""
    g = torch.Generator().manual_seed(1000 + step)
    window = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    ids, labels = window[:, :-1].clone(), window[:, 1:].clone()
    if packing is None or packing == "cu_seqlens":
        pos = torch.arange(SEQ).expand(BATCH, SEQ).clone()
    else:
        pos = _packed_positions()
    if packing is not None:
        labels[:, np.cumsum(DOCS) - 1] = IGNORE
    return ids, pos, labels


def _train(rank, world, name, packing, dropout=DROPOUT):
    """STEPS SGD steps of model `name` (gradient checkpointing, attention dropout `dropout`),
    CP over the world group when world > 1 (one process otherwise): per step the loss and every
    parameter's gradient, summed over the ranks (each rank's loss is its tokens' share of the
    batch's mean), then the final weights; numpy."""
    group = dist.group.WORLD if world > 1 else None
    model = _model(name, dropout=dropout, checkpointing=True)
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    losses, grads = [], []
    for step in range(STEPS):
        ids, pos, labels = _batch(step, packing)
        targets = int((labels != IGNORE).sum())
        extra = {}
        if packing == "cu_seqlens":
            extra = {"cu_seq_lens_q": _cu_seqlens(), "cu_seq_lens_k": _cu_seqlens()}
        torch.manual_seed(7 + step)  # the dropout masks: alike on every rank and for cp=1
        with cpattn.context_parallel(group, buffers=[ids, pos, labels], seq_dims=[1, 1, 1],
                                     timeout=CP_TIMEOUT):
            logits = model(input_ids=ids, position_ids=pos, use_cache=False, **extra).logits
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                                   reduction="sum") / targets
            opt.zero_grad(set_to_none=True)
            loss.backward()  # inside the context: the recompute runs CP attention too
        loss = loss.detach()
        if group is not None:
            dist.all_reduce(loss)
            for p in params:
                dist.all_reduce(p.grad)
        losses.append(float(loss))
        grads.append([p.grad.numpy().copy() for p in params])
        opt.step()
    return losses, grads, [p.detach().numpy().copy() for p in params]


_one_process = {}


def _reference(name, packing, dropout=DROPOUT):
    """_train on this process alone (one torch thread, as each rank), cached per case."""
    key = (name, packing, dropout)
    if key not in _one_process:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _one_process[key] = _train(0, 1, name, packing, dropout)
        finally:
            torch.set_num_threads(threads)
    return _one_process[key]


def _assert_matches(results, reference, tol):
    """Every rank's losses, gradients and final weights within `tol` (max_rel per tensor) of
    the one-process run; every rank holds the same all-reduced numbers."""
    for r in range(1, len(results)):
        for a, b in zip(results[0][1][-1] + results[0][2], results[r][1][-1] + results[r][2]):
            assert np.array_equal(a, b), f"rank {r} holds other gradients or weights than rank 0"
    losses, grads, weights = results[0]
    want_losses, want_grads, want_weights = reference
    for step in range(STEPS):
        rel = abs(losses[step] - want_losses[step]) / abs(want_losses[step])
        assert rel <= tol, f"step {step}: loss {losses[step]} vs {want_losses[step]} (rel {rel})"
        worst = max(max_rel(g, w) for g, w in zip(grads[step], want_grads[step]))
        assert worst <= tol, f"step {step}: gradient rel {worst}"
    worst = max(max_rel(a, b) for a, b in zip(weights, want_weights))
    assert worst <= tol, f"final weights rel {worst}"


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_cp_training_with_dropout_and_checkpointing_matches_one_process(name, world):
    """Two SGD steps at CP=world (zigzag shards, attention dropout 0.1, gradient checkpointing)
    give one process's losses, summed gradients and weights within 1e-5: the same dropout masks
    for every CP size, also in the recompute; qwen2's second layer slides (window 8 of 48)."""
    results = run_processes(world, _train, name, None, timeout=300, start="forkserver")
    _assert_matches(results, _reference(name, None), CP_TOL)


def test_the_dropout_of_the_cp_tests_is_on():
    """The reference of the CP tests draws dropout: without it every step's loss and
    gradients differ, far beyond the tolerance (else the CP tests would compare dropout-free
    runs only)."""
    with_dropout, without = _reference("llama", None), _reference("llama", None, dropout=0.0)
    for step in range(STEPS):
        assert abs(with_dropout[0][step] - without[0][step]) / abs(without[0][step]) > 1e-3
        assert max(max_rel(a, b) for a, b in zip(with_dropout[1][step], without[1][step])) > 0.1


@pytest.mark.parametrize("packing,world", [("positions", 4), ("cu_seqlens", 2)])
def test_cp_training_of_packed_sequences_matches_one_process(packing, world):
    """Packed documents (4 per sequence) under CP, as restarting position ids (a buffer of the
    context, the whole sequence's documents) or as the whole sequence's cu_seq_lens: two SGD
    steps with dropout and checkpointing give one process's numbers within 1e-5."""
    results = run_processes(world, _train, "llama", packing, timeout=300, start="forkserver")
    _assert_matches(results, _reference("llama", packing), CP_TOL)


def _loss_and_grads(model, packing=None, **extra):
    """(loss, gradients) of one forward and backward of batch 0 (mean token loss), numpy."""
    ids, pos, labels = _batch(0, packing)
    logits = model(input_ids=ids, position_ids=pos, use_cache=False, **extra).logits
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
    model.zero_grad(set_to_none=True)
    loss.backward()
    return float(loss.detach()), [p.grad.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("packing", [None, "positions"])
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_one_process_equals_eager_and_sdpa(name, packing):
    """One process, no dropout: cpattn's loss and gradients are transformers' eager and sdpa
    attention's within 1e-5 (causal GQA; qwen2's sliding window; packed documents from
    restarting position ids, which transformers turns into its own block-diagonal masks)."""
    loss, grads = _loss_and_grads(_model(name), packing)
    for impl in ("eager", "sdpa"):
        want_loss, want_grads = _loss_and_grads(_model(name, impl), packing)
        assert abs(loss - want_loss) / abs(want_loss) <= IMPL_TOL, impl
        assert max(max_rel(g, w) for g, w in zip(grads, want_grads)) <= IMPL_TOL, impl


def test_cu_seqlens_give_the_packed_documents():
    """cu_seq_lens_q/k with positions numbered through the sequence give the documents of
    restarting position ids (RoPE scores depend on position differences only, so the same
    attention to rounding), as transformers' eager attention computes them (1e-5); and they are
    used: without them the sequence is one document."""
    loss, grads = _loss_and_grads(_model("llama"), "cu_seqlens", cu_seq_lens_q=_cu_seqlens(),
                                  cu_seq_lens_k=_cu_seqlens())
    want_loss, want_grads = _loss_and_grads(_model("llama", "eager"), "positions")
    assert abs(loss - want_loss) / abs(want_loss) <= IMPL_TOL
    assert max(max_rel(g, w) for g, w in zip(grads, want_grads)) <= IMPL_TOL
    one_document, _ = _loss_and_grads(_model("llama"), "cu_seqlens")
    assert abs(one_document - loss) / abs(loss) > 1e-4


def test_an_all_true_attention_mask_is_no_mask():
    """A 2-D attention_mask without padding (what tokenizers return) is accepted: bitwise the
    logits of no mask."""
    model = _model("llama")
    ids, pos, _ = _batch(0)
    with torch.no_grad():
        want = model(ids, position_ids=pos, use_cache=False).logits
        got = model(ids, position_ids=pos, attention_mask=torch.ones_like(ids),
                    use_cache=False).logits
    assert torch.equal(got, want)


def _refusal(model, match, **kwargs):
    """Runs model(batch 0, **kwargs) and checks that it raises cpattn.Error invalid_argument
    whose message matches `match`."""
    ids, pos, _ = _batch(0)
    kwargs.setdefault("use_cache", False)
    with pytest.raises(cpattn.Error, match=match) as info:
        model(ids, position_ids=pos, **kwargs)
    assert info.value.code == "invalid_argument"


def test_a_padding_attention_mask_is_refused():
    """A 2-D mask with padding, and a ready-made 4-D mask: refused (pack instead), never
    attention over the padding."""
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    mask[1, -5:] = 0
    _refusal(_model("llama"), "padding", attention_mask=mask)
    _refusal(_model("qwen2"), "padding", attention_mask=mask)
    _refusal(_model("llama"), "4-D", attention_mask=torch.zeros(BATCH, 1, SEQ, SEQ))


def test_output_attentions_is_refused():
    """output_attentions=True, as a call's argument or the config's: refused (cpattn never
    forms the attention matrix), never an empty tuple of attentions."""
    _refusal(_model("llama"), "output_attentions", output_attentions=True)
    _refusal(_model("llama", output_attentions=True), "output_attentions")


def test_a_kv_cache_with_past_tokens_is_refused():
    """Keys beyond the queries (the second chunk of a cached generation): refused, training
    only. The first chunk (an empty cache) runs."""
    model = _model("llama").eval()
    ids, _, _ = _batch(0)
    with torch.no_grad():
        first = model(ids[:, :SEQ // 2], use_cache=True)
        with pytest.raises(cpattn.Error, match="KV cache") as info:
            model(ids[:, SEQ // 2:], cache=first.cache, use_cache=True)
    assert info.value.code == "invalid_argument"


def test_packed_positions_that_differ_between_rows_are_refused():
    """Packed position ids must have their documents at the same positions in every batch row
    (cpattn's documents are per sequence position): other rows are refused, not packed like row
    0."""
    ids, pos, _ = _batch(0)
    pos = _packed_positions()
    pos[1] = torch.arange(SEQ)
    with pytest.raises(cpattn.Error, match="every batch row") as info:
        _model("llama")(ids, position_ids=pos, use_cache=False)
    assert info.value.code == "invalid_argument"


def test_rows_numbered_from_different_offsets_are_alike():
    """Rows whose position ids differ by an offset have their documents at the same positions
    (one each here): accepted, transformers' eager attention's loss and gradients."""
    ids, _, labels = _batch(0)
    pos = torch.stack([torch.arange(SEQ), torch.arange(SEQ) + 5])
    results = []
    for impl in ("cpattn", "eager"):
        model = _model("llama", impl)
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
        results.append([p.grad for p in model.parameters()])
    assert max(max_rel(g.numpy(), w.numpy()) for g, w in zip(*results)) <= IMPL_TOL


@pytest.mark.parametrize("packing", [None, "positions"])
def test_compiled_with_fullgraph_equals_eager(packing):
    """torch.compile(fullgraph=True) of a model with attn_implementation="cpattn" compiles
    without a graph break (the documents of the position ids take no data-dependent branch) and
    gives eager's loss and gradients within 1e-5 (inductor fuses the other layers' arithmetic
    in another order)."""
    loss, grads = _loss_and_grads(_model("qwen2"), packing)
    model = _model("qwen2")
    compiled = torch.compile(lambda **kw: model(**kw).logits, fullgraph=True)
    ids, pos, labels = _batch(0, packing)
    logits = compiled(input_ids=ids, position_ids=pos, use_cache=False)
    got = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
    got.backward()
    assert abs(float(got.detach()) - loss) / abs(loss) <= IMPL_TOL
    assert max(max_rel(p.grad.numpy(), w) for p, w in zip(model.parameters(), grads)) <= IMPL_TOL


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss"])
def test_softcap_and_sinks_equal_eager(name):
    """Gemma 2's logit softcap and gpt-oss's attention sinks (s_aux, with their gradient), each
    model with a sliding-window layer: one process, no dropout, cpattn's loss and gradients
    (the sinks' included) are transformers' eager attention's within 1e-5."""
    model = _model(name)
    loss, grads = _loss_and_grads(model)
    want_loss, want_grads = _loss_and_grads(_model(name, "eager"))
    assert abs(loss - want_loss) / abs(want_loss) <= IMPL_TOL
    assert max(max_rel(g, w) for g, w in zip(grads, want_grads)) <= IMPL_TOL
    if name == "gpt_oss":
        sinks = [p for n, p in model.named_parameters() if n.endswith("sinks")]
        assert sinks and all(torch.count_nonzero(p.grad) > 0 for p in sinks)


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss"])
def test_cp_training_with_softcap_and_sinks_matches_one_process(name):
    """Two SGD steps at CP=2 with dropout and checkpointing: one process's numbers within 1e-5,
    the sinks' gradients (each rank's share, summed with the other parameters') included."""
    results = run_processes(2, _train, name, None, timeout=300, start="forkserver")
    _assert_matches(results, _reference(name, None), CP_TOL)


def test_a_position_bias_is_refused():
    """T5's relative position bias (passed to the attention as position_bias): refused."""
    cpattn_hf.register()
    config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=32, num_layers=1,
                                   num_heads=4)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config, attn_implementation="cpattn")
    ids, _, _ = _batch(0)
    with pytest.raises(cpattn.Error, match="position_bias"):
        model(input_ids=ids, decoder_input_ids=ids, use_cache=False)


def test_mask_patterns_cpattn_cannot_express_are_refused():
    """Masks transformers builds from other patterns than causal / window / documents: a
    model's own and_mask_function / or_mask_function, blockwise and chunked attention: refused
    when the mask is made (the layers would otherwise run plain causal attention)."""
    from transformers import masking_utils
    config = _model("llama").config
    embeds = torch.zeros(BATCH, SEQ, 32)
    args = dict(config=config, inputs_embeds=embeds, attention_mask=None, cache=None,
                position_ids=torch.arange(SEQ).expand(BATCH, SEQ))
    assert masking_utils.create_causal_mask(**args) is None
    every_other = lambda b, h, q, kv: kv % 2 == 0  # noqa: E731
    with pytest.raises(cpattn.Error, match="own mask function"):
        masking_utils.create_causal_mask(**args, and_mask_function=every_other)
    with pytest.raises(cpattn.Error, match="own mask function"):
        masking_utils.create_causal_mask(**args, or_mask_function=every_other)
    with pytest.raises(cpattn.Error, match="or_mask"):
        masking_utils.create_causal_mask(**args, block_sequence_ids=torch.zeros(BATCH, SEQ,
                                                                                dtype=torch.long))
    config.attention_chunk_size = 16
    with pytest.raises(cpattn.Error, match="chunked_overlay"):
        masking_utils.create_chunked_causal_mask(**args)


def _cp_refusal(rank, world, case):
    """One forward under CP that the integration refuses: ("error", code, message, seconds)."""
    model = _model("llama")
    ids, pos, _ = _batch(0)
    start = time.monotonic()
    try:
        if case == "no_position_ids":  # the model numbers this rank's tokens 0..S_r-1
            with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                         timeout=CP_TIMEOUT):
                model(ids, use_cache=False)
        elif case == "positions_sharded_by_hand":  # the right positions, but not a buffer
            with cpattn.context_parallel(dist.group.WORLD, buffers=[ids], seq_dims=[1],
                                         timeout=CP_TIMEOUT):
                model(ids, position_ids=cpattn.shard(pos), use_cache=False)
        elif case == "backward_after_the_block":  # reentrant checkpointing recomputes there
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": True})
            with cpattn.context_parallel(dist.group.WORLD, buffers=[ids, pos], seq_dims=[1, 1],
                                         timeout=CP_TIMEOUT):
                logits = model(ids, position_ids=pos, use_cache=False).logits
            logits.sum().backward()
        else:  # padding in the shard of the last rank only (zigzag: the middle of the sequence)
            mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
            mask[0, SEQ // 2] = 0
            with cpattn.context_parallel(dist.group.WORLD, buffers=[ids, pos, mask],
                                         seq_dims=[1, 1, 1], timeout=CP_TIMEOUT):
                model(ids, position_ids=pos, attention_mask=mask, use_cache=False)
    except cpattn.Error as e:
        return ("error", e.code, str(e), time.monotonic() - start)
    return ("ok", None, None, time.monotonic() - start)


@pytest.mark.parametrize("case", ["no_position_ids", "positions_sharded_by_hand"])
def test_under_cp_position_ids_must_be_a_buffer(case):
    """Under CP, position ids that are not among the context's buffers (none: the model gives
    this rank's tokens the positions 0..S_r-1; or this rank's shard of them, whose documents
    the integration cannot see): every rank raises invalid_argument naming the buffers."""
    for outcome in run_processes(2, _cp_refusal, case, start="forkserver"):
        assert outcome[:2] == ("error", "invalid_argument")
        assert "buffers" in outcome[2]


def test_a_backward_after_the_block_is_refused():
    """With use_reentrant=True checkpointing, a backward after the context_parallel block
    recomputes each layer of this rank's shard outside the context, where the position ids
    buffer is the whole sequence again: refused on every rank (invalid_argument, naming the
    block), never one rank's attention of its own shard."""
    for outcome in run_processes(2, _cp_refusal, "backward_after_the_block", start="forkserver"):
        assert outcome[:2] == ("error", "invalid_argument")
        assert "run the backward inside the block" in outcome[2]


def _sdpa_model_under_cp(rank, world):
    """qwen2 with transformers' own sdpa attention: under CP (its sliding window of 8 keys is
    more than each rank's 24 keys would need masked, so transformers would drop the window)
    the refusal's (code, message); then, outside the context, its logits against eager's."""
    model = _model("qwen2", "sdpa")
    ids, pos, _ = _batch(0)
    try:
        with cpattn.context_parallel(dist.group.WORLD, buffers=[ids, pos], seq_dims=[1, 1],
                                     timeout=CP_TIMEOUT):
            model(ids, position_ids=pos, use_cache=False)
        refusal = None
    except cpattn.Error as e:
        refusal = (e.code, str(e))
    ids, pos, _ = _batch(0)
    with torch.no_grad():
        got = model(ids, position_ids=pos, use_cache=False).logits
        want = _model("qwen2", "eager")(ids, position_ids=pos, use_cache=False).logits
    return refusal, max_rel(got.numpy(), want.numpy())


def test_transformers_sdpa_attention_is_refused_under_cp():
    """transformers' "sdpa" attention decides its masks from the shard it sees (here it would
    drop qwen2's sliding window): under a context_parallel over a group it raises
    invalid_argument on every rank, naming attn_implementation="cpattn"; outside the context it
    is transformers' own again (eager's logits within 1e-5)."""
    for refusal, outside in run_processes(2, _sdpa_model_under_cp, start="forkserver"):
        assert refusal is not None and refusal[0] == "invalid_argument"
        assert 'attn_implementation="cpattn"' in refusal[1]
        assert outside <= IMPL_TOL


def test_under_cp_a_rank_refusing_alone_fails_every_rank_at_once():
    """Padding in one rank's shard only: that rank refuses the call (invalid_argument,
    padding), the other raises rank_disagreement quoting it, both long before the deadline
    (the refusing rank joins the call agreement instead of leaving the other waiting)."""
    outcomes = run_processes(2, _cp_refusal, "padding_in_one_shard", start="forkserver")
    assert outcomes[1][:2] == ("error", "invalid_argument") and "padding" in outcomes[1][2]
    assert outcomes[0][:2] == ("error", "rank_disagreement") and "padding" in outcomes[0][2]
    assert all(outcome[3] < CP_TIMEOUT / 4 for outcome in outcomes)
