"""Agreement points of the package's own collective steps (context_parallel's entry and exit,
unshard): the ranks compare a short description of what each is doing, inside cpattn's call
agreement, before any of them exchanges data."""

import re
import zlib

import torch

from ._errors import Error, error, over_the_group
from ._ops import ring_attention

# A rank's refusal in the call agreement's message, but for a disagreement it passed on (the
# token count's: "rank 1 refuses the call (rank_disagreement: the calls come from ...").
_REFUSAL = re.compile(r" refuses the call \((?!rank_disagreement)")

# The longest description the call agreement carries (its call-site field, less its NUL).
_SITE_CHARS = 55


def site_text(description):
    """`description` as a call site: itself when it fits the agreement's field, else its start
    and a CRC-32 of the whole, so that two descriptions that differ past the cut still differ."""
    if len(description) <= _SITE_CHARS:
        return description
    crc = zlib.crc32(description.encode())
    return f"{description[:_SITE_CHARS - 10]} #{crc:08x}"


@over_the_group
def agree(group, timeout, site, disagreement):
    """The agreement point named `site` (site_text of what this rank is doing: "context_parallel
    entry: 4096 tokens, ...", "unshard ..."): a tiny ring_attention call (one token per rank, no
    dropout, no autograd) whose call site is `site`, so cpattn's call agreement compares it on
    every rank. Ranks whose sites differ, or a rank that is at an attention call meanwhile,
    exchange the same fixed-size records as any call and all raise cpattn.Error
    rank_disagreement, its message `disagreement` followed by the agreement's (which names each
    rank's site; `site` instead of `disagreement` when a rank refused: the refusal says why); a
    collective of its own would cross the call's messages (gloo aborts the process on a message
    of another size). Under the deadline `timeout`. What it raises is known to the group."""
    x = torch.zeros(1, 1, 1, 1)
    try:
        with torch.no_grad():
            ring_attention(x, x, x, group=group, layout="contiguous", seq_len=group.size(),
                           timeout=timeout, strategy="ring", call_site=site)
    except Error as e:
        if getattr(e, "code", None) != "rank_disagreement":
            raise
        if _REFUSAL.search(str(e)):  # a rank refused (its arguments, or its block failed)
            raise error("rank_disagreement", f"{site}: {e}") from None
        raise error("rank_disagreement", f"{disagreement} (each rank's call site says where it "
                    f"is): {e}") from None
