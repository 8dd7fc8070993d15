"""Replay of a measured acceptance trace as an AcceptanceSource (see docs/acceptance-trace.md).

Each simulated request walks one recorded sequence round by round; the engine applies
min(accepted, l) when a policy verifies l < gamma. Everything is precomputed into flat arrays
so `draw` is a few fancy-indexing operations whatever the number of running requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dsim.acceptance.calibration import apply_temperatures, parse_temperatures, read_calibration
from dsim.acceptance.trace import conf_columns, read_acceptance_trace, sidecar_path, trace_gamma
from dsim.errors import InputError

RAW = "raw"  # the calibration value that forces raw confidences despite a calibrated sidecar


class TraceAcceptance:
    """Confidences and accepted prefixes replayed from an acceptance-trace file.

    calibration: None -> the sidecar's "calibration" temperatures if it has them, else raw;
    "raw" -> raw confidences; a dict or a path to a calibration JSON -> those temperatures
    (an explicit calibration always wins over the sidecar's).
    """

    def __init__(
        self, path: str | Path, gamma: int, calibration: str | Path | dict[str, Any] | None = None
    ) -> None:
        self.path = Path(path)
        df, meta = read_acceptance_trace(self.path)
        recorded = trace_gamma(df)
        if gamma > recorded:
            raise InputError(
                self.path, None, f"trace was recorded with gamma {recorded}, cannot replay {gamma}"
            )
        self.gamma = gamma
        self.meta = meta
        self.temperatures, self.calibration_source = self._temperatures(calibration, meta)
        conf = df[conf_columns(gamma)].to_numpy(np.float64)
        if self.temperatures is not None:
            conf = apply_temperatures(conf, self.temperatures)
        self._conf = conf
        self._accepted = np.minimum(df["accepted"].to_numpy(np.int64), gamma)

        # rows are sorted by (seq_id, round): sequence s owns rows start[s] .. start[s]+length[s]-1
        seq = df["seq_id"].to_numpy()
        self._start = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        self._length = np.diff(np.r_[self._start, len(seq)])
        self._names, seq_domain = np.unique(
            df["domain"].to_numpy(str)[self._start], return_inverse=True
        )
        self._seq_domain = seq_domain
        # sequences grouped by domain, for continuing a request within its own domain
        self._by_domain = np.argsort(seq_domain, kind="stable")
        self._domain_count = np.bincount(seq_domain, minlength=len(self._names))
        self._domain_start = np.r_[0, np.cumsum(self._domain_count)[:-1]]

    def _temperatures(
        self, calibration: str | Path | dict[str, Any] | None, meta: dict[str, Any]
    ) -> tuple[np.ndarray | None, str]:
        if isinstance(calibration, str) and calibration == RAW:
            return None, RAW
        if isinstance(calibration, dict):
            return parse_temperatures(calibration, self.path, self.gamma), "given"
        if calibration is not None:
            obj = read_calibration(calibration)
            return parse_temperatures(obj, calibration, self.gamma), str(calibration)
        if "calibration" in meta:
            side = sidecar_path(self.path)
            return parse_temperatures(meta["calibration"], side, self.gamma), "sidecar"
        return None, RAW

    @property
    def n_sequences(self) -> int:
        return len(self._start)

    @property
    def domain_names(self) -> np.ndarray:
        """Domain of each bound request (it keeps it when continuing on another sequence)."""
        return self._names[self._seq_domain[self._seq]]

    def bind(self, n_requests: int, rng: np.random.Generator) -> None:
        """Give each request a recorded sequence, uniformly over sequences, at its round 0.

        Uniform over sequences keeps the trace's domain mix (by sequence count).
        """
        self._seq = rng.integers(0, self.n_sequences, size=n_requests)
        self._cursor = np.zeros(n_requests, dtype=np.int64)

    def draw(self, idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The next recorded round of each request in `idx`: (confidences R x gamma, accepted).

        A request past its sequence's last round continues at round 0 of another sequence of
        the same domain, drawn uniformly with `rng`.
        """
        seq = self._seq[idx]
        cursor = self._cursor[idx]
        done = cursor >= self._length[seq]
        if done.any():
            dom = self._seq_domain[seq[done]]
            pick = self._domain_start[dom] + rng.integers(0, self._domain_count[dom])
            seq[done] = self._by_domain[pick]
            cursor[done] = 0
            self._seq[idx] = seq
        row = self._start[seq] + cursor
        self._cursor[idx] = cursor + 1
        return self._conf[row], self._accepted[row]
