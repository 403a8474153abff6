"""cpattn as a Hugging Face transformers attention implementation.

    import cpattn.integrations.transformers as cpattn_hf
    cpattn_hf.register()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="cpattn")
    with cpattn.context_parallel(group, buffers=[ids, position_ids], seq_dims=[1, 1]):
        logits = model(ids, position_ids=position_ids, use_cache=False).logits  # this rank's

Every attention layer of the model then runs cpattn: inside cpattn.context_parallel, the CP
attention of this rank's shard over the context's group (its layout and strategy); outside one,
on one rank. What the layer passes is honoured, and what cannot be is refused with cpattn.Error
naming it (never a silent fallback):
  - causal (module.is_causal / is_causal=), GQA / MQA (no repeat of k/v), the layer's scaling;
  - sliding_window=W (Mistral, Qwen2, Gemma...: key j visible from query i when i - W < j <= i):
    window_size (W - 1, 0); bidirectional layers (W - 1, W - 1), transformers' flash-attn rule;
  - dropout (the config's attention_dropout in training): cpattn's dropout, its masks
    bit-identical for every CP size, exact under model.gradient_checkpointing_enable();
  - logit softcapping (Gemma 2's softcap=) and attention sinks (gpt-oss's s_aux=, a learnable
    logit per head; its gradient is each rank's share under CP, summed over the group with
    every other parameter's);
  - packed sequences: position_ids that restart at 0 for each document (HF's convention; the
    whole sequence's, also under CP, where they must be among the context's buffers) or the
    whole sequence's cu_seq_lens_q / cu_seq_lens_k (flash-attn's convention) become document
    ids: no token attends across a document boundary.
Refused: a padding attention_mask or a ready-made 4-D mask (pack the sequences instead), a mask
pattern that is not causal / bidirectional, sliding window or packed documents (transformers'
or_mask_function / and_mask_function, chunked or blockwise attention), a position_bias, sparse
attention indices, output_attentions, keys of another
length than the queries (a KV cache with past tokens: training only; cross-attention), packed
position_ids whose documents sit at other positions in another batch row, under CP
position_ids that are not a buffer of the context (the model would number this rank's tokens
from 0: wrong RoPE positions), and outside a context position_ids longer than the queries (a
backward after the block, recomputing a checkpointed layer of this rank's shard). Under CP
a rank that refuses a call still joins the group's call agreement as refusing, so the other
ranks raise cpattn.Error (rank_disagreement, quoting the reason) at once instead of waiting.
Inside a context_parallel over a group, transformers' own "sdpa" attention is refused
(guard_sdpa): it decides its masks from this rank's shard.
"""

import inspect
import threading

import torch

from .._errors import error
from .._ops import attention, refuse_grouped_call, ring_attention
from .._sdpa import active_context

NAME = "cpattn"

# Keyword arguments some models pass to the attention function that change its mathematics and
# that cpattn does not compute: refused when not None (T5-style relative position biases,
# DeepSeek's sparse attention indices).
_UNSUPPORTED_KWARGS = {
    "position_bias": "an additive position_bias",
    "indices": "sparse attention indices",
    "block_indices": "block-sparse attention indices",
}

_PADDING = ("cpattn (transformers): an attention_mask with padding, or a ready-made 4-D mask, "
            "is not supported: pack the sequences (position_ids restarting at 0, or "
            "cu_seq_lens_q) instead of padding them")


def _doc_ids_from_positions(position_ids):
    """Document ids of the whole sequence, int64 [S], from position ids [B or 1, S] that restart
    for each document (a new document wherever a position is not its predecessor's + 1, the
    rule of transformers' find_packed_sequence_indices); None when the sequence is one
    document. Every row must have its documents at the same positions (cpattn's document ids
    are one per sequence position; rows numbered from different offsets are alike). Under
    torch.compile the ids are returned also for one document (all 0: the same mask), and rows
    that differ fail torch's runtime assertion, so that no branch depends on the values."""
    if position_ids.dim() == 1:
        position_ids = position_ids.unsqueeze(0)
    rows = position_ids.to(torch.int64)
    starts = torch.ones_like(rows, dtype=torch.bool)
    starts[:, 1:] = rows[:, 1:] != rows[:, :-1] + 1
    alike = (starts == starts[:1]).all()
    message = ("cpattn (transformers): packed sequences need their documents at the same "
               "positions in every batch row (document ids are per sequence position)")
    docs = torch.cumsum(starts[0].to(torch.int64), 0) - 1
    if torch.compiler.is_compiling():
        torch._assert_async(alike, message)
        return docs
    if not bool(alike):
        raise error("invalid_argument", message)
    return docs if int(docs[-1]) > 0 else None


def _doc_ids_from_cu_seqlens(cu_q, cu_k, seq_len):
    """Document ids int64 [S] from flash-attn's cumulative lengths of the whole sequence."""
    if cu_k is not None and not torch.equal(cu_q.to(torch.int64), cu_k.to(torch.int64)):
        raise error("invalid_argument", "cpattn (transformers): cu_seq_lens_q and cu_seq_lens_k "
                    "differ (self-attention over packed documents needs one split)")
    cu = cu_q.to(torch.int64)
    if cu.dim() != 1 or cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != seq_len or \
            bool((cu.diff() < 0).any()):
        raise error("invalid_argument", f"cpattn (transformers): cu_seq_lens_q must rise from 0 "
                    f"to the whole sequence's length {seq_len}, got {cu.tolist()}")
    return torch.bucketize(torch.arange(seq_len), cu[1:], right=True)


def _call(module, query, key, value, attention_mask, dropout, scaling, is_causal,
          sliding_window, softcap, position_ids, cu_seq_lens_q, cu_seq_lens_k,
          output_attentions, kwargs, cp, grouped):
    """The checked arguments of one call: (q, k, v, causal, window, doc_ids, softcap, sink) in
    BSHD, or cpattn.Error naming what cannot be honoured."""
    if attention_mask is not None:
        raise error("invalid_argument", _PADDING)
    # gpt-oss passes its sinks as s_aux (the layer's parameter [Hq], in the model's dtype: the
    # float32 cast is differentiable, so the parameter gets its gradient).
    sink = kwargs.get("s_aux", kwargs.get("sinks"))
    if sink is not None:
        sink = sink.float()
    for name, what in _UNSUPPORTED_KWARGS.items():
        if kwargs.get(name) is not None:
            raise error("invalid_argument", f"cpattn (transformers): {what} is not supported")
    if output_attentions is None:  # the kwarg takes precedence over the config, as in HF
        output_attentions = getattr(getattr(module, "config", None), "output_attentions", False)
    if output_attentions:
        raise error("invalid_argument", "cpattn (transformers): output_attentions is not "
                    "supported (cpattn never forms the attention matrix)")
    if key.shape[2] != query.shape[2]:
        raise error("invalid_argument", f"cpattn (transformers): {key.shape[2]} keys for "
                    f"{query.shape[2]} queries (a KV cache with past tokens, or "
                    "cross-attention): cpattn serves self-attention training, use_cache=False")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    window = (int(sliding_window) - 1, 0 if causal else int(sliding_window) - 1) \
        if sliding_window else (-1, -1)
    if cu_seq_lens_q is not None:
        whole_len = cp.seq_len if grouped else query.shape[2]
        doc_ids = _doc_ids_from_cu_seqlens(cu_seq_lens_q, cu_seq_lens_k,
                                           int(cu_seq_lens_q[-1]) if whole_len is None
                                           else whole_len)
    elif position_ids is not None:
        if not grouped and position_ids.shape[-1] != query.shape[2]:
            raise error("invalid_argument", f"cpattn (transformers): position_ids hold "
                        f"{position_ids.shape[-1]} positions for {query.shape[2]} queries (a "
                        "backward outside cpattn.context_parallel recomputing a checkpointed "
                        "layer of this rank's shard with the buffers whole again? run the "
                        "backward inside the block)")
        whole = cp.whole_of(position_ids) if grouped else position_ids
        if whole is None:
            raise error("invalid_argument", "cpattn (transformers): under context_parallel the "
                        "model's position_ids must be one of the context's buffers (pass "
                        "position_ids=... to the model and to context_parallel's buffers): "
                        "otherwise the model numbers this rank's tokens from 0")
        doc_ids = _doc_ids_from_positions(whole)
    elif grouped:
        raise error("invalid_argument", "cpattn (transformers): under context_parallel pass "
                    "position_ids to the model and among the context's buffers")
    else:
        doc_ids = None
    return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal, window, \
        doc_ids, float(softcap or 0.0), sink


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, sliding_window=None, softcap=None, position_ids=None,
                      cu_seq_lens_q=None, cu_seq_lens_k=None, output_attentions=None, **kwargs):
    """The attention function transformers calls (AttentionInterface): query [B, Hq, S, D],
    key / value [B, Hkv, S, D] (BHSD); returns (out [B, S, Hq, Dv] (BSHD, what the layer
    reshapes), None). output_attentions None: the model config's."""
    site = f"layer {getattr(module, 'layer_idx', '?')}"
    cp = active_context()
    grouped = cp is not None and cp.group is not None
    try:
        q, k, v, causal, window, doc_ids, cap, sink = _call(
            module, query, key, value, attention_mask, dropout, scaling, is_causal,
            sliding_window, softcap, position_ids, cu_seq_lens_q, cu_seq_lens_k,
            output_attentions, kwargs, cp, grouped)
    except Exception as reason:  # whatever a bad argument raises: the rank still takes part
        if not grouped:
            raise
        # As ring_attention's own refusals: join the group's call agreement as refusing, so
        # that a rank refusing alone (a padding mask in its shard only) fails every rank now.
        return refuse_grouped_call(cp.group, cp.timeout, reason, site,
                                   _bshd_views(query, value)), None
    if grouped:
        out = ring_attention(q, k, v, group=cp.group, layout=cp.layout, strategy=cp.strategy,
                             dropout_p=dropout, softmax_scale=scaling, causal=causal,
                             window_size=window, doc_ids=doc_ids, softcap=cap, sink=sink,
                             seq_len=cp.seq_len, timeout=cp.timeout, workspace=cp.workspace,
                             call_site=site)
    else:
        out = attention(q, k, v, dropout_p=dropout, softmax_scale=scaling, causal=causal,
                        window_size=window, doc_ids=doc_ids, softcap=cap, sink=sink,
                        call_site=site)
    return out, None


# The pieces of transformers' own mask functions (transformers.masking_utils) whose pattern
# cpattn's parameters express: causal or bidirectional, a sliding window (the layer's
# sliding_window), packed documents (from the position ids). Anything else in a mask function
# (a union, a chunked or blockwise overlay, a model's own function) is refused.
_EXPRESSIBLE = {"causal_mask_function", "bidirectional_mask_function",
                "and_masks.<locals>.and_mask",
                "sliding_window_overlay.<locals>.inner_mask",
                "sliding_window_bidirectional_overlay.<locals>.inner_mask",
                "remap_positions_for_packed_sequence.<locals>.inner_mask",
                "packed_sequence_mask_function.<locals>.inner_mask"}


def _inexpressible(mask_function):
    """The name of the first part of a transformers mask function that cpattn's causal /
    window / documents cannot express, or None when every part is one of _EXPRESSIBLE (found by
    walking the closures of and_masks and the overlays)."""
    if not inspect.isfunction(mask_function):
        return type(mask_function).__name__
    name = mask_function.__qualname__
    if mask_function.__module__ != "transformers.masking_utils" or name not in _EXPRESSIBLE:
        return f"{mask_function.__module__}.{name}"
    for cell in mask_function.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        parts = contents if isinstance(contents, (tuple, list)) else (contents,)
        for part in parts:
            if callable(part) and not isinstance(part, torch.Tensor):
                found = _inexpressible(part)
                if found is not None:
                    return found
    return None


def attention_mask(*args, attention_mask=None, mask_function=None, use_vmap=False, **kwargs):
    """The mask function transformers builds masks with for "cpattn" (AttentionMaskInterface):
    None, since cpattn takes causal, the window and the documents as parameters. A mask pattern
    those cannot express (see _inexpressible; use_vmap marks a model's own or/and mask function)
    raises cpattn.Error naming it; a 2-D padding mask with any masked token is returned as it is,
    so that attention_forward refuses it (under CP inside the group's call agreement: a rank
    whose shard alone has padding fails every rank at once)."""
    if use_vmap:
        raise error("invalid_argument", "cpattn (transformers): the model adds its own mask "
                    "function (or_mask_function / and_mask_function): a mask pattern cpattn's "
                    "causal, window and documents cannot express")
    if mask_function is not None:
        part = _inexpressible(mask_function)
        if part is not None:
            raise error("invalid_argument", f"cpattn (transformers): the model's mask pattern "
                        f"({part}) is not causal / bidirectional, a sliding window or packed "
                        f"documents: cpattn cannot express it")
    if attention_mask is not None and not bool(attention_mask.all()):
        return attention_mask
    return None


_SDPA_UNDER_CP = (
    "transformers' sdpa attention under cpattn.context_parallel over a group: transformers "
    "decides its masks from this rank's shard (a sliding window, the causal mask of a one-token "
    "shard, a document boundary between shards would be lost silently); load the model with "
    "attn_implementation=\"cpattn\" after cpattn.integrations.transformers.register()")
def _bshd_views(query, value):
    """transformers' BHSD query and value as BSHD views (what this integration returns out in),
    which shape a refusal compiled into the graph (refuse_grouped_call's `like`)."""
    return tuple(t.transpose(1, 2) if isinstance(t, torch.Tensor) and t.dim() == 4 else t
                 for t in (query, value))


_sdpa_lock = threading.Lock()
_sdpa_original = []  # transformers' "sdpa" attention function, once guard_sdpa replaced it


def _sdpa_guarded(module, *args, **kwargs):
    """transformers' "sdpa" attention, refused (cpattn.Error invalid_argument, on every rank
    through the call agreement) inside a context_parallel over a group; itself elsewhere."""
    cp = active_context()
    if cp is None or cp.group is None:
        return _sdpa_original[0](module, *args, **kwargs)
    query = args[0] if len(args) > 0 else kwargs.get("query")
    value = args[2] if len(args) > 2 else kwargs.get("value")
    out = refuse_grouped_call(cp.group, cp.timeout, error("invalid_argument", _SDPA_UNDER_CP),
                              f"layer {getattr(module, 'layer_idx', '?')}",
                              _bshd_views(query, value))
    return out, None


def guard_sdpa():
    """Replaces transformers' "sdpa" attention implementation by _sdpa_guarded (once: a
    context_parallel over a group calls it on entry when transformers is imported). The
    replacement is transformers' own function outside such a context, so it stays."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    with _sdpa_lock:
        if not _sdpa_original and "sdpa" in ALL_ATTENTION_FUNCTIONS:
            _sdpa_original.append(ALL_ATTENTION_FUNCTIONS["sdpa"])
            ALL_ATTENTION_FUNCTIONS["sdpa"] = _sdpa_guarded


def register(name=NAME):
    """Registers cpattn with transformers' AttentionInterface and AttentionMaskInterface under
    `name`, so that models made with attn_implementation=name run cpattn. Idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
