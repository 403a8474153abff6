"""The CP group of a call: a torch.distributed ProcessGroup, a DeviceMesh, or None, and the name
by which the ops (whose arguments are tensors, numbers and strings) find it again."""

import weakref

import torch.distributed as dist

from ._errors import error

# The names of a 2-D mesh's dims for the hybrid strategy.
RING_DIM = "ring"
ULYSSES_DIM = "ulysses"

# The flattened CP group of each 2-D mesh (DeviceMesh._flatten makes it once, collectively; a
# mesh keeps its groups for its lifetime, and so does this weak map). A group, not call state.
_flattened = weakref.WeakKeyDictionary()


def _world():
    if not dist.is_available() or not dist.is_initialized():
        raise error("invalid_argument", "ring attention needs torch.distributed: call "
                    "torch.distributed.init_process_group first, or pass group=")
    return dist.distributed_c10d._get_default_group()


def _hybrid_of_mesh(mesh, strategy):
    """(the flattened group, "hybrid:UxR") of a 2-D mesh with dims "ring" and "ulysses"."""
    names = tuple(mesh.mesh_dim_names or ())
    if sorted(names) != sorted((RING_DIM, ULYSSES_DIM)):
        raise error("invalid_argument", f"a 2-D DeviceMesh serves the hybrid strategy: its dims "
                    f"must be named ({RING_DIM!r}, {ULYSSES_DIM!r}), got {names}")
    ring_i, ulysses_i = names.index(RING_DIM), names.index(ULYSSES_DIM)
    u, r = mesh.size(ulysses_i), mesh.size(ring_i)
    want = f"hybrid:{u}x{r}"
    if strategy not in (None, "hybrid", want):
        raise error("invalid_argument", f"a DeviceMesh of dims {names} and shape "
                    f"{tuple(mesh.shape)} runs strategy {want!r} (Ulysses over the "
                    f"{ULYSSES_DIM!r} dim, the ring over {RING_DIM!r}), got strategy="
                    f"{strategy!r}")
    # The hybrid's rank i is row i // U, column i % U: the mesh's ranks, ring-major, must be
    # the flattened group's rank order (ascending global ranks).
    order = mesh.mesh.permute(ring_i, ulysses_i).reshape(-1).tolist()
    if order != sorted(order):
        raise error("invalid_argument", f"the DeviceMesh's {RING_DIM!r} dim must be the outer "
                    f"one in rank order (e.g. init_device_mesh('cpu', ({r}, {u}), "
                    f"mesh_dim_names=({RING_DIM!r}, {ULYSSES_DIM!r}))), got ranks {order} "
                    f"ring-major")
    group = _flattened.get(mesh)
    if group is None:
        group = mesh._flatten().get_group()
        _flattened[mesh] = group
    return group, want


def resolve_group(group, strategy=None):
    """(ProcessGroup, strategy) of a call: the world group for None, a 1-D DeviceMesh's group,
    a 2-D DeviceMesh's flattened group with the hybrid strategy its dims give (Ulysses over the
    dim named "ulysses", the ring over "ring"), or `group` itself. strategy None (not chosen)
    becomes "ring", or a 2-D mesh's hybrid; a 2-D mesh takes "hybrid" or its own "hybrid:UxR"
    only. Raises cpattn.Error (invalid_argument) for anything else."""
    if group is None:
        return _world(), strategy or "ring"
    if isinstance(group, dist.ProcessGroup):
        return group, strategy or "ring"
    try:
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError:  # a torch without DeviceMesh
        DeviceMesh = ()
    if isinstance(group, DeviceMesh):
        if group.ndim == 1:
            return group.get_group(), strategy or "ring"
        if group.ndim == 2:
            return _hybrid_of_mesh(group, strategy)
        raise error("invalid_argument", f"a DeviceMesh for CP has 1 or 2 dims, got {group.ndim}")
    raise error("invalid_argument", f"group must be a ProcessGroup, a DeviceMesh or None, got "
                f"{type(group).__name__}")


def group_name_of(group):
    """The name the ops carry for `group` ("" for None: one rank)."""
    return "" if group is None else group.group_name


def process_group(name):
    """The ProcessGroup named `name`, or None for "". cpattn.Error invalid_argument when no
    group has that name any more (destroyed between a forward and its backward)."""
    if not name:
        return None
    try:
        return dist.distributed_c10d._resolve_process_group(name)
    except RuntimeError:
        raise error("invalid_argument", f"the process group {name!r} of this call no longer "
                    "exists (destroyed before the backward of a call made over it?)") from None
