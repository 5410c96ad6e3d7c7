"""Simulated servers for the capacity benchmarks: a FIFO queue (exponential, fixed or lognormal
service times; Lindley's recursion, vectorised) and a static batch server (a discrete-event run),
each answering the same calls: finish times for requests sent at given times, and a closed loop's."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from selector.measure.load_driver import poisson_arrivals


def lindley_waits(services: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    """Waiting times in a FIFO single-server queue (Lindley: W_0 = 0, W_n = max(0, W_{n-1} +
    S_{n-1} - gap_n), gap_n = A_n - A_{n-1}), vectorised: W_n = X_n - min_{k<=n} X_k with X the
    cumulative sum of S_{n-1} - gap_n and X_0 = 0. gaps[0] is not used."""
    x = np.zeros(len(services))
    if len(services) > 1:
        np.cumsum(services[:-1] - gaps[1:], out=x[1:])
    return x - np.minimum.accumulate(x)


def fifo_ends(sent: np.ndarray, services: np.ndarray) -> np.ndarray:
    """Finish times of requests sent at `sent` (non-decreasing) to one FIFO server."""
    if len(sent) == 0:
        return np.asarray(sent, dtype=float)
    return sent + lindley_waits(services, np.diff(sent, prepend=sent[0])) + services


class Server(Protocol):
    @property
    def service_rate(self) -> float: ...
    @property
    def single_s(self) -> float: ...
    def describe(self) -> str: ...
    def unit_gaps(self, n: int, seed: int) -> np.ndarray: ...
    def ends(self, sent: np.ndarray, seed: int) -> np.ndarray: ...
    def closed_loop_ends(self, concurrency: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]: ...


def _unit_gaps(n: int, seed: int) -> np.ndarray:
    """What poisson_arrivals(n, rate, seed) draws, at rate 1: its gaps are these over the rate."""
    return np.concatenate([[0.0], np.random.default_rng(seed).exponential(1.0, size=n - 1)])


@dataclass(frozen=True)
class Queue:
    """One server, FIFO, one request at a time; service times with mean service_s: lognormal with
    coefficient of variation cv (cv 0: a fixed time), or exponential (dist="exponential")."""

    service_s: float = 0.1
    cv: float = 0.0
    dist: str = "lognormal"

    @property
    def service_rate(self) -> float:
        return 1.0 / self.service_s

    @property
    def single_s(self) -> float:
        return self.service_s

    def describe(self) -> str:
        if self.dist == "exponential":
            return f"M/M/1, exponential service, mean {self.service_s * 1e3:g} ms"
        if self.cv == 0:
            return f"M/D/1, fixed {self.service_s * 1e3:g} ms service"
        return f"M/G/1, lognormal service, mean {self.service_s * 1e3:g} ms, cv {self.cv:g}"

    def services(self, n: int, seed: int) -> np.ndarray:
        if self.dist == "exponential":
            return np.random.default_rng([seed, 7]).exponential(self.service_s, size=n)
        if self.cv == 0:
            return np.full(n, self.service_s)
        sigma = math.sqrt(math.log(1 + self.cv**2))
        rng = np.random.default_rng([seed, 7])
        return rng.lognormal(math.log(self.service_s) - sigma**2 / 2, sigma, size=n)

    unit_gaps = staticmethod(_unit_gaps)

    def ends(self, sent: np.ndarray, seed: int) -> np.ndarray:
        return fifo_ends(sent, self.services(len(sent), seed))

    def open_loop(self, rate: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(send, finish) times of n Poisson arrivals at `rate` (the load driver's own arrivals)."""
        sent = np.asarray(poisson_arrivals(n, rate, seed))
        return sent, self.ends(sent, seed)

    def closed_loop_ends(self, concurrency: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(send, finish) times of n requests, `concurrency` in flight, each finished one replaced at
        once: the server never idles, so request i finishes at the sum of the first i + 1 services
        and request i >= c is sent when request i - c finishes."""
        ends = np.cumsum(self.services(n, seed))
        c = min(concurrency, n)
        sent = np.concatenate([np.zeros(c), ends[: n - c]])
        return sent, ends

    def closed_loop(self, concurrency: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return self.closed_loop_ends(concurrency, n, seed)


@dataclass(frozen=True)
class BatchServer:
    """Static batching: when the server is free and a request waits, it starts a batch of
    everything waiting, up to max_batch; a batch of k takes base_s * (1 + growth * (k - 1)) and
    all its requests finish together. (A server like vLLM batches continuously; this is the
    simplest server whose service time grows with the batch.)"""

    base_s: float = 0.1
    growth: float = 0.25
    max_batch: int = 8
    seed_salt: int = 0  # no randomness of its own: service times are set by the batch

    def batch_s(self, k: int) -> float:
        return self.base_s * (1 + self.growth * (k - 1))

    @property
    def service_rate(self) -> float:
        return self.max_batch / self.batch_s(self.max_batch)

    @property
    def single_s(self) -> float:
        return self.batch_s(1)

    def describe(self) -> str:
        return (f"batch server, up to {self.max_batch} a batch of {self.base_s * 1e3:g} ms x (1 + "
                f"{self.growth:g} (k - 1))")

    unit_gaps = staticmethod(_unit_gaps)

    def ends(self, sent: np.ndarray, seed: int = 0) -> np.ndarray:
        """Finish times of requests sent at `sent` (non-decreasing): a discrete-event run."""
        arrivals = np.asarray(sent, dtype=float).tolist()
        n, b = len(arrivals), self.max_batch
        took = [0.0] + [self.batch_s(k) for k in range(1, b + 1)]
        ends = [0.0] * n
        i, free, right = 0, 0.0, bisect.bisect_right
        while i < n:
            start = arrivals[i] if arrivals[i] > free else free
            j = right(arrivals, start, i + 1, min(i + b, n))  # everything waiting at the start, up to b
            free = start + took[j - i]
            ends[i:j] = [free] * (j - i)
            i = j
        return np.asarray(ends)

    def open_loop(self, rate: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        sent = np.asarray(poisson_arrivals(n, rate, seed))
        return sent, self.ends(sent)

    def closed_loop_ends(self, concurrency: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("no closed-loop scenario runs on the batch server")
