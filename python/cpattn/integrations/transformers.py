"""cpattn as a Hugging Face transformers attention implementation.

    import cpattn.integrations.transformers as cpattn_hf
    cpattn_hf.register()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="cpattn")
    with cpattn.context_parallel(group, buffers=[ids, position_ids], seq_dims=[1, 1]):
        logits = model(ids, position_ids=position_ids).logits   # this rank's tokens

Every attention layer of the model then runs cpattn: inside cpattn.context_parallel, the CP
attention of this rank's shard over the context's group (its layout and strategy); outside one,
on one rank. What the layer passes is honoured, and what cannot be is refused with cpattn.Error
naming it (never a silent fallback):
  - causal (module.is_causal / is_causal=), GQA / MQA (no repeat of k/v), the layer's scaling;
  - sliding_window=W (Mistral, Qwen2, Gemma...: key j visible from query i when i - W < j <= i):
    window_size (W - 1, 0);
  - dropout (the config's attention_dropout in training): cpattn's dropout, its masks
    bit-identical for every CP size, exact under model.gradient_checkpointing_enable();
  - packed sequences: position_ids that restart at 0 for each document (HF's convention; the
    whole sequence's, also under CP, where they must be among the context's buffers) or the
    whole sequence's cu_seq_lens_q / cu_seq_lens_k (flash-attn's convention) become document
    ids: no token attends across a document boundary.
Refused: a padding attention_mask (pack the sequences instead), softcap, output_attentions, a
KV cache with past tokens (training only), and under CP position_ids that are not a buffer of
the context (the model would number this rank's tokens from 0: wrong RoPE positions).
"""

import torch

from .._errors import error
from .._ops import attention, ring_attention
from .._sdpa import active_context

NAME = "cpattn"


def _doc_ids_from_positions(position_ids):
    """Document ids of the whole sequence, int64 [S], from position ids [B or 1, S] that restart
    for each document (a new document wherever a position is not its predecessor's + 1); None
    when the sequence is one document. Every row must be alike (cpattn's document ids are one
    per sequence position)."""
    if position_ids.dim() == 1:
        position_ids = position_ids.unsqueeze(0)
    if position_ids.shape[0] > 1 and not bool((position_ids == position_ids[:1]).all()):
        raise error("invalid_argument", "cpattn (transformers): packed sequences need the same "
                    "position_ids in every batch row (document ids are per sequence position)")
    row = position_ids[0].to(torch.int64)
    starts = torch.ones_like(row, dtype=torch.bool)
    starts[1:] = row[1:] != row[:-1] + 1
    docs = torch.cumsum(starts.to(torch.int64), 0) - 1
    return docs if int(docs[-1]) > 0 else None


def _doc_ids_from_cu_seqlens(cu_q, cu_k, seq_len):
    """Document ids int64 [S] from flash-attn's cumulative lengths of the whole sequence."""
    if cu_k is not None and not torch.equal(cu_q.to(torch.int64), cu_k.to(torch.int64)):
        raise error("invalid_argument", "cpattn (transformers): cu_seq_lens_q and cu_seq_lens_k "
                    "differ (self-attention over packed documents needs one split)")
    cu = cu_q.to(torch.int64)
    if cu.dim() != 1 or int(cu[0]) != 0 or int(cu[-1]) != seq_len or bool((cu.diff() < 0).any()):
        raise error("invalid_argument", f"cpattn (transformers): cu_seq_lens_q must rise from 0 "
                    f"to the whole sequence's length {seq_len}, got {cu.tolist()}")
    return torch.bucketize(torch.arange(seq_len), cu[1:], right=True)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, sliding_window=None, softcap=None, position_ids=None,
                      cu_seq_lens_q=None, cu_seq_lens_k=None, output_attentions=False, **kwargs):
    """The attention function transformers calls (AttentionInterface): query [B, Hq, S, D],
    key / value [B, Hkv, S, D] (BHSD); returns (out [B, S, Hq, Dv] (BSHD, what the layer
    reshapes), None)."""
    if softcap is not None:
        raise error("invalid_argument", "cpattn (transformers): softcap is not supported")
    if output_attentions:
        raise error("invalid_argument", "cpattn (transformers): output_attentions is not "
                    "supported (cpattn never forms the attention matrix)")
    if attention_mask is not None:
        raise error("invalid_argument", "cpattn (transformers): an attention_mask with padding "
                    "is not supported: pack the sequences (position_ids restarting at 0, or "
                    "cu_seq_lens_q) instead of padding them")
    if key.shape[2] != query.shape[2]:
        raise error("invalid_argument", f"cpattn (transformers): {key.shape[2]} keys for "
                    f"{query.shape[2]} queries (a KV cache with past tokens): cpattn serves "
                    "training, use_cache=False")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    window = (int(sliding_window) - 1, 0 if causal else int(sliding_window) - 1) \
        if sliding_window else (-1, -1)
    site = f"layer {getattr(module, 'layer_idx', '?')}"
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    cp = active_context()
    grouped = cp is not None and cp.group is not None
    if cu_seq_lens_q is not None:
        whole_len = cp.seq_len if grouped else q.shape[1]
        doc_ids = _doc_ids_from_cu_seqlens(cu_seq_lens_q, cu_seq_lens_k, whole_len)
    elif position_ids is not None:
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
    if grouped:
        out = ring_attention(q, k, v, group=cp.group, layout=cp.layout, strategy=cp.strategy,
                             dropout_p=dropout, softmax_scale=scaling, causal=causal,
                             window_size=window, doc_ids=doc_ids, seq_len=cp.seq_len,
                             timeout=cp.timeout, workspace=cp.workspace, call_site=site)
    else:
        out = attention(q, k, v, dropout_p=dropout, softmax_scale=scaling, causal=causal,
                        window_size=window, doc_ids=doc_ids, call_site=site)
    return out, None


def attention_mask(*args, attention_mask=None, **kwargs):
    """The mask function transformers builds masks with for "cpattn" (AttentionMaskInterface):
    none, since cpattn takes causal, the window and the documents as parameters; a 2-D padding
    mask with any masked token is refused (attention_forward's error)."""
    if attention_mask is not None and not bool(attention_mask.all()):
        raise error("invalid_argument", "cpattn (transformers): an attention_mask with padding "
                    "is not supported: pack the sequences (position_ids restarting at 0, or "
                    "cu_seq_lens_q) instead of padding them")
    return None


def register(name=NAME):
    """Registers cpattn with transformers' AttentionInterface and AttentionMaskInterface under
    `name`, so that models made with attn_implementation=name run cpattn. Idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)

