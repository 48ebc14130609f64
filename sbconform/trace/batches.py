"""Arrow record batches as the checker reads them: decoded column-wise into row tuples
(``FIELD_NAMES`` order), grouped by piece, cut into runs of rows of one piece.

numpy and pyarrow are imported when a function runs (the JSON Lines half of the kit needs
neither), and nothing here goes through ``Array.to_numpy`` or ``pa.scalar``, which
import pandas (most of a second) on first use."""

from __future__ import annotations

import gc
from itertools import repeat

from .checker import piece_key
from .schema import FIELD_NAMES


#: String fields with few distinct values (clients, operations, phases, entities, argument
#: texts, ...): read from Parquet dictionary-encoded, so each distinct value is decoded once
#: per batch and every row holding it shares one string object (comparisons by identity).
DICTIONARY_FIELDS = ("client", "conn", "op", "phase", "entity", "session", "partition_key", "args", "error")


def _indices(array):
    """The values of an integer Arrow array without nulls, as a numpy view of its buffer (no
    copy; ``Array.to_numpy`` would import pandas, most of a second, for nothing)."""
    import numpy as np
    import pyarrow as pa

    kind = "i" if pa.types.is_signed_integer(array.type) else "u"
    dtype = np.dtype(f"{kind}{array.type.bit_width // 8}")
    if not len(array):
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=array.offset + len(array))[array.offset:]


def _dictionary(column):
    """A string column dictionary-encoded (as read from Parquet, or encoded here): the
    decoded dictionary (None last, standing for null) and the indices without nulls."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    values = column.dictionary.to_pylist() + [None]  # the last one stands for null
    indices = column.indices
    out = _indices(indices)
    if indices.null_count:
        n, offset = len(indices), indices.offset
        valid = np.unpackbits(np.frombuffer(indices.buffers()[0], dtype=np.uint8), count=offset + n, bitorder="little")
        out = np.where(valid[offset:].astype(bool), out, len(values) - 1)
    return values, out


def column_values(column) -> list:
    """One Arrow column as a Python list, converted column-wise (no per-value Arrow scalars):
    a dictionary-encoded column decodes its dictionary once and indexes it."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        values, indices = _dictionary(column)
        return np.array(values, dtype=object)[indices].tolist()
    return column.to_pylist()


#: Fields the checker never reads: not decoded (None in every row). The error text of a
#: ``fail`` event: a failed operation did not happen, whatever its error.
UNREAD = ("trace", "error")


def rows_of(batch, order=None) -> list[tuple]:
    """Row tuples (FIELD_NAMES order) of an Arrow record batch, converted column-wise; in
    ``order`` (``by_piece``'s), if given.

    The cyclic GC is paused meanwhile: each row tuple allocated would count towards its next
    collection, and each of those collections would walk the column lists (a batch's worth
    of references each) again; the tuples hold only strings and numbers, so the first
    collection after this leaves them untracked, and nothing here can form a cycle."""
    names = batch.schema.names
    n = batch.num_rows
    if not n:
        return []
    enabled = gc.isenabled()
    gc.disable()
    try:
        cols = []
        for name in FIELD_NAMES:
            if name in names and name not in UNREAD:
                cols.append(column_values(batch.column(names.index(name))))
            else:
                cols.append(repeat(None, n))
        rows = list(zip(*cols))
        del cols
        return rows if order is None else list(map(rows.__getitem__, order.tolist()))
    finally:
        if enabled:
            gc.enable()


def by_piece(batch) -> tuple[object, list[tuple[int, int]], int]:
    """The order that puts the rows of each piece together (a stable sort by piece key, pieces
    in the order they first appear: each piece's own rows keep their order, and pieces are
    independent; a numpy array of row indices, None when they are together already); the runs, in that order, of rows of
    one piece as (start, end) index pairs, a run also starting at the first row of each
    entity in the batch (where ``check_batches`` looks the entity up: a queue and its
    dead-letter subqueue are one piece but two entities); and the index, in that order, of
    the batch's last row. The rows are reordered once decoded (cheaper than ``take``)."""
    import numpy as np

    n = batch.num_rows
    names = batch.schema.names
    if "entity" not in names or n == 0:
        return None, [(0, n)] if n else [], n - 1
    values, indices = _dictionary(batch.column(names.index("entity")))
    used, first = np.unique(indices, return_index=True)
    last, rows_order = n - 1, None
    if len(used) > 1:
        # piece ids numbered by first appearance in the batch
        pieces: dict[str, int] = {}
        piece_of = np.zeros(len(values), dtype=np.int64)
        for value in used[np.argsort(first)].tolist():
            piece_of[value] = pieces.setdefault(piece_key(values[value]), len(pieces))
        ids = piece_of[indices]
        if len(pieces) > 1 and bool((ids[1:] < ids[:-1]).any()):
            order = np.argsort(ids, kind="stable")
            last = int(np.flatnonzero(order == n - 1)[0])
            rows_order = order
            indices, ids = indices[order], ids[order]
            _, first = np.unique(indices, return_index=True)
        cuts = np.union1d(np.flatnonzero(ids[1:] != ids[:-1]) + 1, first)
    else:
        cuts = first
    cuts = cuts[cuts > 0].tolist()
    return rows_order, list(zip([0] + cuts, cuts + [n])), last


def going_back(batch, order) -> list[int]:
    """The indices, in ``order`` (``by_piece``'s), of the rows whose ``pos`` is not above the
    previous row's: inside a piece's rows, events out of position order (or a ``pos`` twice);
    at the first row of a piece, nothing. Vectorised: a few microseconds a batch."""
    import numpy as np

    names = batch.schema.names
    if "pos" not in names or batch.num_rows < 2:
        return []
    column = batch.column(names.index("pos"))
    if column.null_count:  # validate_batch refuses it first in replay; here a bare batch
        return []
    pos = _indices(column)
    if order is not None:
        pos = pos[order]
    return (np.flatnonzero(pos[1:] <= pos[:-1]) + 1).tolist()


#: The operations whose arguments may set auto-forwarding (``forward_to``: SETTLE-FWD-*).
CONFIGURING = ("create-entity", "update-entity")


def configuring(batch, order) -> list[int]:
    """The indices, in ``order`` (``by_piece``'s), of the batch's create-entity and update-entity
    events, found column-wise: the op column's dictionary names every operation of its row
    group, so it names a creation in every batch of a file that creates an entity, and
    looking at each row (in Python) cost a tenth of a second a million events."""
    import numpy as np

    names = batch.schema.names
    if "op" not in names:
        return list(range(batch.num_rows))
    values, indices = _dictionary(batch.column(names.index("op")))
    wanted = [i for i, op in enumerate(values) if op in CONFIGURING]
    if not wanted:
        return []
    hits = np.isin(indices, wanted)
    if order is not None:
        hits = hits[order]
    return np.flatnonzero(hits).tolist()
