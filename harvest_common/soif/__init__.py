"""SOIF, the Summary Object Interchange Format: records, their encoding, update streams (pure).

``transport`` carries a SOIF stream over HTTP, compressed; import it from there."""

from __future__ import annotations

from harvest_common.soif.codec import (
    Decoder,
    decode,
    encode,
    encode_delete,
    encode_refresh,
    encode_update,
)
from harvest_common.soif.record import Record
from harvest_common.soif.stream import Delete, Item, Refresh, Update

__all__ = [
    "Decoder",
    "Delete",
    "Item",
    "Record",
    "Refresh",
    "Update",
    "decode",
    "encode",
    "encode_delete",
    "encode_refresh",
    "encode_update",
]
