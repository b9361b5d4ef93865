"""Variable-length slices of a byte buffer gathered with numpy, for decoding records in bulk.

`views` makes an Arrow binary_view array of slices without copying them (values of up to 12
bytes inline, longer ones pointing into the buffer); `gather_rows` copies a fixed-width row
from each of many positions.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

Bytes = npt.NDArray[np.uint8]
Int64s = npt.NDArray[np.int64]

_INLINE = 12  # an Arrow binary view holds a value of up to 12 bytes inline
# For each size up to 12, the mask of a value's bytes in its 12 inline bytes, as 3 words.
_INLINE_MASKS = np.where(np.arange(_INLINE) < np.arange(_INLINE + 1)[:, None], 0xFF, 0).astype(
    np.uint8).view("<u4")


def byte_rows(data: Bytes, width: int) -> Bytes:
    """Every `width` consecutive bytes of `data` as a row (a view; numpy's
    sliding_window_view, without its cost per call): rows[i] is data[i:i + width]."""
    return np.ndarray((len(data) - width + 1, width), dtype=np.uint8, buffer=data,
                      strides=(1, 1))


def gather_rows(data: Bytes, begins: Int64s, width: int) -> Bytes:
    """data[begin:begin + width] for each begin (a copy), zero-padded past the data's end."""
    last = len(data) - width  # a row that starts after it is copied on its own
    source = np.concatenate([data, np.zeros(width, np.uint8)]) if last < 0 else data
    rows = byte_rows(source, width)[np.clip(begins, 0, max(last, 0))]
    for row in np.flatnonzero(begins > last).tolist():
        begin = int(begins[row])
        rows[row] = 0
        rows[row, : len(data) - begin] = data[begin:]
    return rows


def views(data: Bytes, begins: Int64s, sizes: Int64s) -> pa.Array:
    """A binary_view array of the data's [begin, begin + size) slices, made without copying
    the values: those of up to 12 bytes are inline, the others point into `data`."""
    count = len(begins)
    result = np.empty((count, 4), dtype="<u4")
    result[:, 0] = sizes
    inline = sizes <= _INLINE
    if inline.all():
        result[:, 1:] = _inline_values(data, begins, sizes)
    else:
        last = len(data) - 4  # a value pointed at is longer than that: it fits
        prefixes = byte_rows(data, 4)[np.minimum(begins, last)]
        result[:, 1] = prefixes.view("<u4")[:, 0]  # its first 4 bytes, then ...
        result[:, 2] = 0  # ... buffer 0 ...
        result[:, 3] = begins  # ... at this offset
        if inline.any():
            result[inline, 1:] = _inline_values(data, begins[inline], sizes[inline])
    return pa.Array.from_buffers(pa.binary_view(), count,
                                 [None, pa.py_buffer(result), pa.py_buffer(data)])


def _inline_values(data: Bytes, begins: Int64s, sizes: Int64s) -> npt.NDArray[np.uint32]:
    """Values of up to 12 bytes, each padded with zeros to 12 bytes (3 words a row)."""
    words = gather_rows(data, begins, _INLINE).view("<u4")
    words &= _INLINE_MASKS[sizes]
    return words
