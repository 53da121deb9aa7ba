"""Read the history rows of an offline W&B run file (`run-<id>.wandb`), for tests.

The file is wandb's transaction log: a 7-byte header (`:W&B`, magic, version)
followed by LevelDB-log records (32 KiB blocks; each chunk has a 7-byte header:
crc32c, length, type full/first/middle/last) holding `wandb_internal_pb2.Record`
protobufs. wandb ships no reader for it in Python any more (its core is in Go),
so the test decodes the container itself and the records with wandb's own
protobuf classes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _chunks(data: bytes) -> list[bytes]:
    if data[:4] != b":W&B":
        raise ValueError("not a wandb transaction log")
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == _FULL:
            records.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            records.append(pending + chunk)
    return records


def history_rows(path: Path) -> tuple[str, list[dict]]:
    """(run id, one dict per logged step with `_step` and the metrics)."""
    from wandb.proto import wandb_internal_pb2 as pb

    run_id, rows = "", []
    for raw in _chunks(Path(path).read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id = record.run.run_id
        elif kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            rows.append(row)
    return run_id, rows
