"""An independent float64 statement of cpattn's contracts (docs/design.md sections 1 and 4).

Used by tests/data/generate_vectors.py (the known-answer vectors) and by the PyTorch package's
tests (python/tests/). It shares no code with cpattn's C++; it is written from the spec:

* Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11): 10
  rounds, multipliers 0xD2511F53 / 0xCD9E8D57, Weyl key increments 0x9E3779B9 / 0xBB67AE85,
  checked against the three Random123 known answers of PHILOX_KATS (external constants).
* Dropout mask of element (b, h, i, j) (i, j: global q and k positions) under RngState
  {seed, offset}: key = {lo32(seed), hi32(seed) ^ hi32(offset)},
  counter = {lo32(j // 4), lo32(i), b * Hq + h, lo32(offset)},
  r = Philox4x32_10(counter, key)[j % 4], u = (r >> 8) * 2^-24, keep = u >= dropout_p, where
  dropout_p is the float32 value the kernel holds (u is a multiple of 2^-24, so for the p used
  here this is the same as comparing with the float64 p); Z = keep / (1 - p) in float64.
* Attention, per (b, h): s_ij = scale * <q_i, k_j> with kv head h // (Hq / Hkv) (GQA/MQA);
  with a logit softcap c > 0 (Gemma 2) s_ij becomes c * tanh(s_ij / c); with ALiBi slopes
  (Press et al. 2022, one per q head) s_ij -= slope_h * |i - j| after that;
  visible(i, j) = same document and (not causal or j <= i) and (window_left < 0 or
  i - j <= window_left) and (window_right < 0 or j - i <= window_right), on global positions;
  with mask slices, also inside some slice's visible part (below);
  lse_i = logsumexp over visible j (natural log), and with attention sinks (gpt-oss, one logit
  per q head) over the sink logit sink_h too: lse_i = log(exp(sink_h) + sum_visible exp(s_ij));
  P_ij = exp(s_ij - lse_i) on visible j, else 0; out_i = sum_j Z_ij P_ij v_j. A row with no
  visible key has out 0, lse -inf (sink_h with sinks) and no gradient. The gradients (of the
  sink logits too) are autograd's of these formulas.
* Mask slices (MagiAttention's AttnSlice on global positions): a slice is a rectangle of query
  positions [q_begin, q_end) and key positions [k_begin, k_end); with r = i - q_begin of its
  Lq = q_end - q_begin rows and c = j - k_begin of its Lk = k_end - k_begin columns, the pair is
  visible through it when "full": always; "causal": c <= r + (Lk - Lq) (the lower triangle
  aligned to the rectangle's bottom-right corner); "inv_causal": c >= r (the upper triangle
  aligned to its top-left corner); "bi_causal": both. No pair may be visible through two slices.

Everything is vectorised over numpy uint64 arrays (Philox) and float64 torch tensors (attention).
"""

import numpy as np
import torch

MASK32 = 0xFFFFFFFF
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85

# Random123's known-answer vectors for Philox4x32-10 (kat_vectors: philox4x32 10 rounds).
# External constants: not computed here, only checked.
PHILOX_KATS = [
    {"counter": [0x00000000, 0x00000000, 0x00000000, 0x00000000],
     "key": [0x00000000, 0x00000000],
     "output": [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]},
    {"counter": [0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF],
     "key": [0xFFFFFFFF, 0xFFFFFFFF],
     "output": [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]},
    {"counter": [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
     "key": [0xA4093822, 0x299F31D0],
     "output": [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]},
]


def philox4x32_10_arrays(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 elementwise over numpy arrays (any broadcastable shapes) of uint32 values
    held in uint64; returns the four output words as uint64 arrays."""
    m32 = np.uint64(MASK32)
    c0, c1, c2, c3, k0, k1 = (np.asarray(x, dtype=np.uint64) & m32 for x in (c0, c1, c2, c3, k0, k1))
    for _ in range(10):
        p0 = np.uint64(PHILOX_M0) * c0  # exact 64-bit products: the high halves mix in
        p1 = np.uint64(PHILOX_M1) * c2
        c0, c1, c2, c3 = (((p1 >> np.uint64(32)) ^ c1 ^ k0) & m32, p1 & m32,
                          ((p0 >> np.uint64(32)) ^ c3 ^ k1) & m32, p0 & m32)
        k0 = (k0 + np.uint64(PHILOX_W0)) & m32
        k1 = (k1 + np.uint64(PHILOX_W1)) & m32
    return c0, c1, c2, c3


def philox4x32_10(counter, key):
    """Philox4x32-10 of one 4-word counter under a 2-word key: 4 Python ints."""
    out = philox4x32_10_arrays(*(int(x) & MASK32 for x in counter),
                               *(int(x) & MASK32 for x in key))
    return [int(w) for w in out]


def check_philox_kats():
    """Raises AssertionError unless philox4x32_10 reproduces the Random123 known answers."""
    for kat in PHILOX_KATS:
        got = philox4x32_10(kat["counter"], kat["key"])
        assert got == kat["output"], (
            "Philox4x32-10 fails the Random123 known answer "
            f"counter={kat['counter']} key={kat['key']}: got {got}, want {kat['output']}")


def dropout_bits_arrays(seed, offset, b, h, num_heads_q, i, j):
    """The contract's uint32 r of elements (b, h, i, j) (numpy int arrays, broadcast)."""
    seed, offset = int(seed), int(offset)
    k0 = seed & MASK32
    k1 = ((seed >> 32) ^ (offset >> 32)) & MASK32
    i = np.asarray(i, dtype=np.uint64)
    j = np.asarray(j, dtype=np.uint64)
    bh = np.asarray(b, dtype=np.uint64) * np.uint64(num_heads_q) + np.asarray(h, dtype=np.uint64)
    words = philox4x32_10_arrays(j // np.uint64(4), i, bh, offset & MASK32, k0, k1)
    lane = (j % np.uint64(4)).astype(np.int64)
    return np.choose(lane, words)


def dropout_bits(seed, offset, b, h, num_heads_q, i, j):
    """The contract's uint32 r of one element (b, h, global q position i, global k pos j)."""
    return int(dropout_bits_arrays(seed, offset, b, h, num_heads_q, i, j))


def dropout_keep(r, dropout_p):
    """keep = (r >> 8) * 2^-24 >= float32(dropout_p), elementwise for arrays."""
    u = (np.asarray(r, dtype=np.uint64) >> np.uint64(8)).astype(np.float64) * 2.0 ** -24
    keep = u >= float(np.float32(dropout_p))
    return bool(keep) if keep.ndim == 0 else keep


def slice_mask(q_pos, k_pos, slices):
    """[Sq, Sk] bool numpy array: the pairs some slice makes visible. `slices`: dicts with
    q_begin, q_end, k_begin, k_end (ints) and type ("full", "causal", "inv_causal",
    "bi_causal"). Raises AssertionError when two slices make one pair visible."""
    i = np.asarray(q_pos, dtype=np.int64)[:, None]
    j = np.asarray(k_pos, dtype=np.int64)[None, :]
    covered = np.zeros((i.shape[0], j.shape[1]), dtype=np.int64)
    for sl in slices:
        lq, lk = sl["q_end"] - sl["q_begin"], sl["k_end"] - sl["k_begin"]
        r, c = i - sl["q_begin"], j - sl["k_begin"]
        inside = (r >= 0) & (r < lq) & (c >= 0) & (c < lk)
        lower = c <= r + (lk - lq)  # causal: bottom-right aligned
        upper = c >= r              # inv_causal: top-left aligned
        shape = {"full": np.ones_like(inside), "causal": lower, "inv_causal": upper,
                 "bi_causal": lower & upper}[sl["type"]]
        covered += inside & shape
    assert covered.max(initial=0) <= 1, "two mask slices make one pair visible"
    return covered == 1


def visible_mask(q_pos, k_pos, q_doc=None, k_doc=None, causal=False, window_left=-1,
                 window_right=-1, slices=None):
    """[Sq, Sk] bool numpy array: which keys each query row sees (global positions, documents,
    mask slices when given)."""
    i = np.asarray(q_pos, dtype=np.int64)[:, None]
    j = np.asarray(k_pos, dtype=np.int64)[None, :]
    vis = np.ones((i.shape[0], j.shape[1]), dtype=bool)
    if q_doc is not None:
        vis &= np.asarray(q_doc, dtype=np.int64)[:, None] == np.asarray(k_doc, dtype=np.int64)[None]
    if causal:
        vis &= j <= i
    if window_left >= 0:
        vis &= i - j <= window_left
    if window_right >= 0:
        vis &= j - i <= window_right
    if slices is not None:
        vis &= slice_mask(q_pos, k_pos, slices)
    return vis


def dropout_factors(B, Hq, q_pos, k_pos, dropout_p, seed, offset):
    """[B, Hq, Sq, Sk] float64 numpy array: Z = keep / (1 - p) (all ones when dropout_p is 0)."""
    Sq, Sk = len(q_pos), len(k_pos)
    if dropout_p == 0.0:
        return np.ones((B, Hq, Sq, Sk), dtype=np.float64)
    b = np.arange(B, dtype=np.int64)[:, None, None, None]
    h = np.arange(Hq, dtype=np.int64)[None, :, None, None]
    i = np.asarray(q_pos, dtype=np.int64)[None, None, :, None]
    j = np.asarray(k_pos, dtype=np.int64)[None, None, None, :]
    keep = dropout_keep(dropout_bits_arrays(seed, offset, b, h, Hq, i, j), dropout_p)
    return np.where(keep, 1.0 / (1.0 - dropout_p), 0.0)


def attention(q, k, v, scale, q_pos=None, k_pos=None, q_doc=None, k_doc=None, causal=False,
              window_left=-1, window_right=-1, dropout_p=0.0, seed=0, offset=0, *, softcap=0.0,
              alibi_slopes=None, sink=None, slices=None):
    """float64 attention of BSHD torch tensors q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk],
    v [B, Sk, Hkv, Dv] (float64; may require grad: the result is differentiable by autograd).
    Positions default to 0..S-1; documents to one. softcap > 0 caps the scores; alibi_slopes
    (Hq floats) adds ALiBi; sink (a float64 torch tensor [Hq], may require grad) adds the sink
    logits to the softmax denominators; slices (slice_mask's dicts) restrict the mask. Returns
    (out [B, Sq, Hq, Dv], lse [B, Hq, Sq] with -inf for rows that see no key, or sink_h with
    sinks)."""
    B, Sq, Hq, _ = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    q_pos = list(range(Sq)) if q_pos is None else q_pos
    k_pos = list(range(Sk)) if k_pos is None else k_pos
    group = Hq // Hkv
    # q head h reads kv head h // group.
    k_e = k.repeat_interleave(group, dim=2)
    v_e = v.repeat_interleave(group, dim=2)
    s = scale * torch.einsum("bihd,bjhd->bhij", q, k_e)  # [B, Hq, Sq, Sk]
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        distance = np.abs(np.asarray(q_pos, dtype=np.float64)[:, None] -
                          np.asarray(k_pos, dtype=np.float64)[None, :])  # |i - j|, [Sq, Sk]
        slopes = np.asarray(alibi_slopes, dtype=np.float64)[:, None, None]  # [Hq, 1, 1]
        s = s - torch.from_numpy(slopes * distance)[None]
    vis = torch.from_numpy(visible_mask(q_pos, k_pos, q_doc, k_doc, causal, window_left,
                                        window_right, slices))[None, None]
    z = torch.from_numpy(dropout_factors(B, Hq, q_pos, k_pos, dropout_p, seed, offset))
    s_masked = s.masked_fill(~vis, float("-inf"))
    if sink is not None:
        # The sink logit is one more term of every row's denominator (no value vector): every
        # row's lse is finite, and a row with no visible key gets lse = sink_h and P = 0.
        sink_col = sink.reshape(1, Hq, 1, 1).expand(B, Hq, Sq, 1)
        lse = torch.logsumexp(torch.cat([s_masked, sink_col], dim=-1), dim=-1)  # [B, Hq, Sq]
        p = torch.exp(s_masked - lse[..., None])
        out = torch.einsum("bhij,bjhd->bihd", z * p, v_e)  # [B, Sq, Hq, Dv]
        return out, lse
    row_has_key = vis.any(dim=-1, keepdim=True)  # [1, 1, Sq, 1]
    # Masked scores are -inf; rows without any visible key are replaced by constant zeros so
    # that neither their lse nor their softmax produces NaN (forward or backward); their P is
    # then multiplied by 0, so they contribute nothing and receive no gradient.
    s_safe = torch.where(row_has_key, s_masked, torch.zeros_like(s))
    lse_safe = torch.logsumexp(s_safe, dim=-1)  # [B, Hq, Sq]
    p = torch.exp(s_safe - lse_safe[..., None]) * row_has_key.to(torch.float64)
    out = torch.einsum("bhij,bjhd->bihd", z * p, v_e)  # [B, Sq, Hq, Dv]
    lse = torch.where(row_has_key[..., 0], lse_safe, torch.full_like(lse_safe, float("-inf")))
    return out, lse
