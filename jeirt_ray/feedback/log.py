"""The decision log: one row per routed query, written off the request path as Parquet files
partitioned by day and hour, on local disk or any filesystem pyarrow reaches (s3://, gs://, ...),
which Ray Data reads (`ray.data.read_parquet(root)`).

    root/day=2026-12-03/hour=14/<first ms>-<last ms>-<writer>-<seq>.parquet

A request appends its rows to a buffer (a lock and a list append); a thread writes the buffer
every `flush_s` seconds or `flush_rows` rows. So a writer that dies loses at most its unflushed
buffer: at most `flush_s` seconds of decisions, at most `flush_rows` rows (`stats()` counts what
is pending). A buffer that a failing filesystem lets grow past `max_pending` rows or
`max_pending_mb` drops the newest and counts them, rather than taking the replica's memory.
Once an hour is over, each writer compacts its files of that hour into one (a replica writes
one file per hour, not one per second), and so does one that closes; a writer that dies leaves
its last hour's files as they are. Files name the span of decision ids (milliseconds) they hold,
so one id is found by listing its hour and reading the few files whose span holds it. A file is written under a hidden
temporary name and moved into place whole; temporary files a crash left are deleted an hour on.

An id is 28 hex digits: the decision's time in milliseconds (12) and 64 random bits, so ids sort
by time and say how old they are (`id_time`).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..core import paths

log = logging.getLogger("jeirt.decisions")

ID_PATTERN = r"^[0-9a-f]{28}$"
QUERY_MODES = ("none", "embedding", "text")  # what of a query is kept: nothing, its encoder vector, both
ANSWER_MODES = ("none", "text")
DAY = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")
ORPHAN_S = 3600  # a temporary file this old was left by a writer that died mid-write
COMPACT_EVERY_S = 60  # how often a writer looks for hours that are over
FILE = re.compile(r"^(\d+)-(\d+)-([0-9a-f]+)-\d+\.parquet$")  # first ms, last ms, writer

SCHEMA = pa.schema([
    ("id", pa.string()), ("query_index", pa.int32()), ("time", pa.timestamp("ms", tz="UTC")),
    ("route", pa.string()),  # route (POST /v1/route) or chat (/v1/chat/completions)
    ("key_id", pa.string()),  # the calling key's id, never the key
    ("space", pa.string()), ("registry_version", pa.string()), ("policy", pa.string()),
    ("candidates", pa.list_(pa.string())), ("p_correct", pa.list_(pa.float32())),
    ("expected_cost", pa.list_(pa.float64())),  # USD per candidate; null without prices
    ("chosen", pa.string()), ("propensity", pa.float32()),
    ("answered_by", pa.string()), ("tried", pa.list_(pa.string())),  # chat: after fallbacks; null when none answered
    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("cost_usd", pa.float64()),
    ("latency_s", pa.float32()), ("status", pa.int32()),
    ("encoder", pa.string()), ("embedding", pa.list_(pa.float32())), ("query", pa.string()), ("answer", pa.string())])


def new_id(now: float | None = None) -> str:
    return f"{int((time.time() if now is None else now) * 1000):012x}{secrets.token_hex(8)}"


def id_time(decision_id: str) -> float:
    """The decision's time (seconds since the epoch) that its id carries."""
    return int(decision_id[:12], 16) / 1000


def in_share(decision_id: str, share: float) -> bool:
    """Whether a decision falls in a share of all decisions, fixed by its id's random bits (the same
    decisions at every run)."""
    return int(decision_id[-8:], 16) < share * 2**32


def _day(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d")


def _hour(seconds: float) -> str:
    """The folder, under the root, of the decisions made in this second's hour."""
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("day=%Y-%m-%d/hour=%H")


def filesystem(root: str | None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a log root: a local folder (default $JEIRT_HOME/decisions) or
    a URI pyarrow reaches (s3://bucket/prefix, gs://..., file:///...)."""
    if root is None:
        root = str(paths.home() / "decisions")
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    from pathlib import Path
    return pafs.LocalFileSystem(), str(Path(root).absolute())


def shadow_root(root: str | None) -> str:
    """Where a shadow's decisions are logged, beside the log at `root`: `<root>-shadow`."""
    return (root or str(paths.home() / "decisions")).rstrip("/") + "-shadow"


@dataclass(frozen=True)
class LogSettings:
    root: str | None = None
    log_queries: str = "embedding"
    log_answers: str = "none"
    flush_s: float = 1.0
    flush_rows: int = 1000
    max_pending: int = 100_000
    max_pending_mb: float = 256.0
    retention_days: float = 30.0


class DecisionLog:
    """The writer of one process (a Router replica). `append(rows)` never blocks on I/O."""

    def __init__(self, settings: LogSettings = LogSettings()):
        if settings.log_queries not in QUERY_MODES or settings.log_answers not in ANSWER_MODES:
            raise ValueError(f"log_queries must be one of {QUERY_MODES} and log_answers one of {ANSWER_MODES}")
        self.settings = settings
        self.fs, self.root = filesystem(settings.root)
        self.writer = secrets.token_hex(4)
        self._rows: list[dict] = []
        self._bytes = 0  # what the buffered rows hold, about
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._seq = 0
        self._pruned = 0.0
        self._hours: set[str] = set()  # the hour folders this writer has written files to, not yet compacted
        self.counts = {"logged": 0, "written": 0, "dropped": 0, "failed_writes": 0}
        self._thread = threading.Thread(target=self._run, name="jeirt-decision-log", daemon=True)
        self._thread.start()

    def append(self, rows: list[dict]) -> tuple[int, int]:
        """Rows as SCHEMA's columns (missing ones null); the query text and the answer are kept
        only as the settings allow, the embedding only unless log_queries is none. (rows
        buffered, rows dropped because the buffer is full)."""
        s = self.settings
        for r in rows:
            if s.log_queries != "text":
                r.pop("query", None)
            if s.log_queries == "none":
                r.pop("embedding", None)
            if s.log_answers == "none":
                r.pop("answer", None)
        sizes = [_size(r) for r in rows]
        with self._lock:
            kept = 0
            while (kept < len(rows) and len(self._rows) + kept < s.max_pending
                   and self._bytes + sizes[kept] <= s.max_pending_mb * 2**20):
                self._bytes += sizes[kept]
                kept += 1
            self._rows.extend(rows[:kept])
            self.counts["logged"] += kept
            self.counts["dropped"] += len(rows) - kept
            full = len(self._rows) >= s.flush_rows
        if full:
            self._wake.set()
        return kept, len(rows) - kept

    def pending(self, decision_id: str) -> list[dict]:
        """The buffered rows of one decision (not yet written)."""
        with self._lock:
            return [dict(r) for r in self._rows if r["id"] == decision_id]

    def lookup(self, decision_id: str, columns: list[str] | None = None) -> list[dict]:
        """A decision's rows, buffered here or written by any writer."""
        return self.pending(decision_id) or find(self.fs, self.root, decision_id, columns)

    def stats(self) -> dict:
        with self._lock:
            return {**self.counts, "pending": len(self._rows), "pending_mb": round(self._bytes / 2**20, 3)}

    def flush(self) -> int:
        """Write what is buffered now; the rows written (on a failure they stay buffered)."""
        with self._lock:
            rows, self._rows = self._rows, []
            held, self._bytes = self._bytes, 0
        if not rows:
            return 0
        try:
            for hour, part in _by_hour(rows).items():
                self._write(hour, part)
        except Exception as e:  # the filesystem: keep the rows for the next try
            with self._lock:
                self._rows[:0] = rows
                self._bytes += held
                self.counts["failed_writes"] += 1
            log.warning("decision log: writing %d rows to %s failed (%s: %s); kept for the next flush",
                        len(rows), self.root, type(e).__name__, str(e)[:200])
            return 0
        with self._lock:
            self.counts["written"] += len(rows)
        self._prune_daily()
        return len(rows)

    def compact(self, now: float | None = None) -> int:
        """Merge this writer's files of each hour that is over into one; the hours compacted (an
        hour that fails stays listed for the next try)."""
        current = _hour(time.time() if now is None else now)
        done = 0
        for hour in sorted(h for h in self._hours if h < current):
            try:
                done += merge_hour(self.fs, f"{self.root}/{hour}", self.writer, self._next_name)
            except Exception as e:
                log.warning("decision log: compacting %s/%s failed (%s: %s); the files stay as they are",
                            self.root, hour, type(e).__name__, str(e)[:200])
                continue
            self._hours.discard(hour)
        return done

    def close(self) -> None:
        """Flush, compact the hours that are over, and stop the thread."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=30)
        self.flush()
        self.compact()

    def _next_name(self, first_ms: int, last_ms: int) -> str:
        self._seq += 1
        return f"{first_ms}-{last_ms}-{self.writer}-{self._seq}.parquet"

    def _write(self, hour: str, rows: list[dict]) -> None:
        ms = [int(r["id"][:12], 16) for r in rows]
        folder = f"{self.root}/{hour}"
        self.fs.create_dir(folder, recursive=True)
        table = _table(rows)
        _write_whole(self.fs, folder, self._next_name(min(ms), max(ms)),
                     lambda tmp: pq.write_table(table, tmp, filesystem=self.fs, compression="zstd"))
        self._hours.add(hour)

    def _run(self) -> None:
        tried = 0.0
        while not self._closed:
            self._wake.wait(self.settings.flush_s)
            self._wake.clear()
            self.flush()
            if time.time() - tried >= COMPACT_EVERY_S:  # a failing filesystem is tried again a minute on
                tried = time.time()
                self.compact()

    def _prune_daily(self) -> None:
        if time.time() - self._pruned > 3600:
            self._pruned = time.time()
            prune(self.fs, self.root, self.settings.retention_days)


def _size(row: dict) -> int:
    """About how many bytes a buffered row holds."""
    e = row.get("embedding")
    vector = 0 if e is None else (e.nbytes if isinstance(e, np.ndarray) else 8 * len(e))
    return 512 + vector + 64 * len(row.get("candidates") or ()) + sum(
        len(row.get(k) or "") for k in ("query", "answer"))


def _write_whole(fs: pafs.FileSystem, folder: str, name: str, write) -> None:
    """`write(path)` a file under a hidden temporary name and move it into place: a reader never
    sees half of one, and a failed write leaves no temporary file."""
    tmp = f"{folder}/.{name}.tmp"
    try:
        write(tmp)
        fs.move(tmp, f"{folder}/{name}")
    except BaseException:
        try:
            fs.delete_file(tmp)
        except Exception:  # never written, or the filesystem is gone: nothing more to do here
            pass
        raise


def merge_hour(fs: pafs.FileSystem, folder: str, writer: str, name, row_group_rows: int = 65536) -> bool:
    """Merge one writer's files in an hour's folder into one file named `name(first ms, last ms)`,
    streamed (one small file in memory at a time), then delete them; and delete the temporary
    files any writer left there more than ORPHAN_S ago. Whether a merge happened. A reader between
    the move and the deletes sees rows twice: find and read_log keep one of each."""
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    old = time.time() - ORPHAN_S
    for i in infos:
        if i.base_name.startswith(".") and i.base_name.endswith(".tmp") and i.mtime is not None \
                and i.mtime.timestamp() < old:
            fs.delete_file(i.path)
    mine = sorted((i.path, int(m.group(1)), int(m.group(2))) for i in infos
                  if (m := FILE.match(i.base_name)) and m.group(3) == writer)
    if len(mine) < 2:
        return False

    def write(tmp: str) -> None:
        with pq.ParquetWriter(tmp, SCHEMA, filesystem=fs, compression="zstd") as out:
            batch: list[pa.Table] = []
            for path, _, _ in mine:
                batch.append(pq.read_table(path, filesystem=fs).cast(SCHEMA))
                if sum(t.num_rows for t in batch) >= row_group_rows or path == mine[-1][0]:
                    out.write_table(pa.concat_tables(batch), row_group_size=row_group_rows)
                    batch = []

    _write_whole(fs, folder, name(min(m[1] for m in mine), max(m[2] for m in mine)), write)
    for path, _, _ in mine:  # only once the merged file is in place
        fs.delete_file(path)
    return True


def _table(rows: list[dict]) -> pa.Table:
    """Rows as a table of SCHEMA; the embeddings (numpy vectors) column-wise, as one buffer."""
    embeddings = [r.pop("embedding", None) for r in rows]
    table = pa.Table.from_pylist(rows, schema=SCHEMA.remove(SCHEMA.get_field_index("embedding")))
    for r, e in zip(rows, embeddings):
        if e is not None:
            r["embedding"] = e
    have = [e is not None for e in embeddings]
    if all(have) and len({len(e) for e in embeddings}) == 1:
        flat = np.asarray(np.stack(embeddings), dtype=np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), flat.shape[1]).cast(pa.list_(pa.float32()))
    else:  # none logged (log_queries: none), or vectors of several sizes
        column = pa.array([None if e is None else np.asarray(e, np.float32) for e in embeddings],
                          pa.list_(pa.float32()))
    return table.add_column(SCHEMA.get_field_index("embedding"), SCHEMA.field("embedding"), column)


def _by_hour(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        r.setdefault("time", dt.datetime.fromtimestamp(id_time(r["id"]), dt.timezone.utc))
        out.setdefault(_hour(id_time(r["id"])), []).append(r)
    return out


def days(fs: pafs.FileSystem, root: str) -> list[str]:
    """The day partitions under root, oldest first."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except OSError:
        return []
    return sorted(m.group(1) for i in infos if i.type == pafs.FileType.Directory
                  and (m := DAY.match(i.base_name)))


def prune(fs: pafs.FileSystem, root: str, retention_days: float, now: float | None = None) -> list[str]:
    """Delete the day partitions older than the retention; the days deleted."""
    oldest = _day((time.time() if now is None else now) - retention_days * 86400)
    gone = [d for d in days(fs, root) if d < oldest]
    for d in gone:
        fs.delete_dir(f"{root}/day={d}")
    if gone:
        log.info("decision log: deleted %d day(s) older than %g days: %s..%s", len(gone), retention_days,
                 gone[0], gone[-1])
    return gone


def find(fs: pafs.FileSystem, root: str, decision_id: str, columns: list[str] | None = None) -> list[dict]:
    """The logged rows of one decision (one per query of its request), read from the files whose
    span of ids holds it; [] when none (unknown, expired, or not yet written). A storage that
    cannot be read raises (OSError): an outage is not "no such decision", which clients would not
    retry (POST /v1/feedback answers 503)."""
    ms = int(decision_id[:12], 16)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/{_hour(ms / 1000)}", allow_not_found=True))
    if not infos:  # a log written before hours had folders of their own keeps its files in the day's
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/day={_day(ms / 1000)}", allow_not_found=True))
    read = None if columns is None else list(dict.fromkeys([*columns, "query_index"]))
    out: dict[int, dict] = {}  # by query index: a file being compacted can be seen twice
    for info in infos:
        m = FILE.match(info.base_name)
        if m and int(m.group(1)) <= ms <= int(m.group(2)):
            table = pq.read_table(info.path, filesystem=fs, columns=read, filters=[("id", "=", decision_id)])
            for r in table.to_pylist():
                out.setdefault(r["query_index"] or 0, r)
    rows = [out[k] for k in sorted(out)]
    if columns is not None and "query_index" not in columns:
        for r in rows:
            del r["query_index"]
    return rows


def embedding_of(row: dict) -> np.ndarray | None:
    e = row.get("embedding")
    return None if e is None else np.asarray(e, dtype=np.float32)
