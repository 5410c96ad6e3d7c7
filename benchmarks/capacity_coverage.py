"""The capacity interval's coverage, checked by simulation against a server's steady-state capacity.

    python -m benchmarks.capacity_coverage [--trials 200] [--repeats 5] [--stem capacity_coverage]
        [--truths-from benchmarks/results/capacity_coverage_before.json]

The search under test is selector's own (selector.measure.capacity.search_capacity, its judge and
its over-saturation rule), unchanged; only the server is simulated. Every probe is what the load
driver sends a real server (selector.measure.traffic.capacity): its length comes from the capacity
module as it stands (`probe_plan`: selector.measure.steady.ProbeLength where it exists, else a burst
of requests_per_step requests), a rate probe is that many Poisson arrivals (the driver's own,
seed base_seed + run), a concurrency probe a closed loop that stops sending when the driver would,
and an open-loop probe is cut off where the driver's over-saturation rule would cut it.

The truth is the server's steady-state capacity, defined without the search:
- M/M/1 (exponential service, rate mu): the sojourn time is exponential with rate mu - lambda, so
  the q-quantile meets the limit L up to lambda* = mu - ln(1 / (1 - q)) / L (q = 0.95: ln 20 / L);
- a FIFO server with fixed (M/D/1) or lognormal (M/G/1) service times: per rate, a run of
  `--truth-requests` requests (Lindley's recursion, vectorised), its p95 over all but the first 10%
  (warm-up), bisected over the rate to the limit; the same random numbers at every rate (gaps
  scaled by 1 / rate), so the p95 rises with the rate and the bisection is exact for that run;
- a batch server (up to B requests a batch, a batch of k taking base * (1 + growth * (k - 1)); the
  server starts a batch as soon as it is free and a request waits, taking everything waiting, up
  to B: static batching, not continuous): the same, by a discrete-event run;
- a closed loop (concurrency c, zero think time, one FIFO server): a run of `--truth-requests`
  requests per concurrency, and the search's own `crossing` of the margins log(p95 / limit) over
  c = 1, 2, ... (interpolated in (log c, margin) between the last level within and the first over).
Each truth is the mean over `--truth-seeds` independent runs (their standard error is reported).
The service rate (the most requests per second the server completes) is 1 / mean service time,
and B / batch_time(B) for the batch server: no rate above it is sustainable.

Per scenario, over `--trials` searches with fresh seeds: how often the interval held the truth, how
often its lower bound was above it (the side that over-promises; a 95% two-sided interval should
do so in at most 2.5%), the median log(estimate / truth), the share of estimates and of lower
bounds above the service rate, the probes spent, and the simulated seconds of load a search sends
(the sum of its probes' spans: its time on a real server). Then the over-saturation rule alone.
Results: benchmarks/results/<stem>.{json,md}; truths are kept in the JSON so a rerun can take
them back (`--truths-from`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.capacity_truth import Scenario, true_capacity
from benchmarks.simulated_servers import BatchServer, Queue, Server
import selector.measure.capacity as capacity_module
from selector.config import LoadConfig
from selector.trace import RequestTrace
from selector.measure.capacity import ProbeAt, search_capacity
from selector.measure.capacity_axis import requests_per_step
from selector.measure.capacity_judge import judge, percentile_limits
from selector.measure.load_driver import LevelOutcome, poisson_arrivals, summarize_level
from selector.measure.saturation import SaturationWatch, first_saturation

try:  # steady-state probes (a probe's length and its judged part); absent: burst probes
    from selector.measure.steady import ProbeLength
except ImportError:  # the capacity module from before steady-state probes
    ProbeLength = None  # type: ignore[assignment,misc]

TOKENS = 16  # output tokens a simulated request reports


# ---- the probe: what the load driver would send -------------------------------------------------
@dataclass(frozen=True)
class ProbePlan:
    """One probe's length, as selector.measure.traffic.capacity sets it: an open-loop probe sends
    `requests` Poisson arrivals; a closed-loop one sends `requests` (until is None) or, with
    `until`, stops sending once until(send times so far) says it has sent enough."""

    requests: int | None = None
    until: Callable[[Sequence[float]], bool] | None = None
    warmup_s: float = 0.0  # the start of the judged part (0: all of it)


def probe_plan(cfg: LoadConfig, on: str, level: float) -> ProbePlan:
    """The probe's length from the capacity module as it stands (mirrors traffic.capacity)."""
    if ProbeLength is None:  # burst probes: requests_per_step requests from an idle server
        return ProbePlan(requests=requests_per_step(cfg))
    length = ProbeLength.of(cfg)
    if on == "rate":
        return ProbePlan(requests=length.requests_at(level), warmup_s=length.warmup_s)
    return ProbePlan(until=length.closed_done, warmup_s=length.warmup_s)


def describe_probes(cfg: LoadConfig) -> str:
    if ProbeLength is None:
        return f"bursts of {requests_per_step(cfg)} requests from an idle server, all of them judged"
    length = ProbeLength.of(cfg)
    return (f"steady-state: {length.warmup_s:g} s warm-up, then a {length.window_s:g} s judged window (at least "
            f"{length.min_requests} requests)")


def margin_of(traces: Sequence[RequestTrace], cfg: LoadConfig) -> float:
    """The probe's margin as the search judges it."""
    if ProbeLength is None:
        return judge(traces, percentile_limits(cfg.slo))[0]
    return judge(traces, percentile_limits(cfg.slo), ProbeLength.of(cfg).warmup_s)[0]


def closed_loop_probe(server: Server, concurrency: int, plan: ProbePlan, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A closed-loop probe as drive_level runs it: the first `concurrency` requests at once, then
    each finished request's client sends the next unless the probe has sent enough (plan.until,
    asked with the send times so far; once it says so it keeps saying so)."""
    if plan.until is None:
        return server.closed_loop_ends(concurrency, plan.requests or 1, seed)
    n = max(2 * concurrency, 256)
    while True:
        sent, ends = server.closed_loop_ends(concurrency, n, seed)
        if plan.until(sent.tolist()):
            break
        n *= 2
    c = min(concurrency, n)
    lo, hi = c, n  # the first i >= c with until(sent[:i]): request i is not sent
    while lo < hi:
        mid = (lo + hi) // 2
        if plan.until(sent[:mid].tolist()):
            hi = mid
        else:
            lo = mid + 1
    return sent[:lo], ends[:lo]


def outcome(sent: np.ndarray, ends: np.ndarray, slo: dict[str, float], stop_saturated: bool,
            rate: float | None = None, concurrency: int | None = None) -> LevelOutcome:
    """The probe as the load driver would have measured it: cut off where over-saturated."""
    traces = [RequestTrace(sent=float(s), end=float(e), token_times=[float(e)], output_tokens=TOKENS)
              for s, e in zip(sent, ends)]
    stopped = ""
    if stop_saturated and rate is not None:
        watch = first_saturation(list(sent), list(ends), SaturationWatch.for_rate(rate).window_s)
        if watch.at is not None:
            stopped = watch.reason
            traces = [t if t.end <= watch.at else RequestTrace(sent=t.sent, end=watch.at, error="cut off")
                      for t in traces if t.sent <= watch.at]
    duration = max(t.end for t in traces) - min(t.sent for t in traces)
    level = summarize_level(traces, duration, slo, concurrency, rate)
    return LevelOutcome(level, traces, 0.0, stopped)


def probe_times(server: Server, cfg: LoadConfig, on: str, level: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(send, finish) times of one probe at `level` with arrivals from `seed`."""
    plan = probe_plan(cfg, on, level)
    if on == "rate":
        sent = np.asarray(poisson_arrivals(plan.requests or 1, level, seed))
        return sent, server.ends(sent, seed)
    return closed_loop_probe(server, int(level), plan, seed)


def simulated_probe(server: Server, cfg: LoadConfig, on: str, base_seed: int) -> ProbeAt:
    """What search_capacity calls: run `run` of a level, with run k's seed base_seed + k."""

    async def probe(level: float, run: int) -> LevelOutcome:
        sent, ends = probe_times(server, cfg, on, level, base_seed + run)
        if on == "rate":
            return outcome(sent, ends, cfg.slo, cfg.capacity_stop_saturated, rate=level)
        return outcome(sent, ends, cfg.slo, False, concurrency=int(level))

    return probe


# ---- coverage -------------------------------------------------------------------------------
def coverage(server: Server, cfg: LoadConfig, on: str, truth: float, trials: int, first_seed: int = 0,
             service_rate: float | None = None) -> dict[str, Any]:
    """Searches with fresh seeds: how often the interval held `truth`, its lower bound above it, the
    estimate's log bias, estimates and lower bounds above the service rate, probes and seconds spent."""
    held = low_over = intervals = 0
    widths, probes, errors, seconds = [], [], [], []
    est_over = low_rate_over = estimates = lows = 0
    mu = service_rate if service_rate is not None else server.service_rate
    for trial in range(trials):
        seed = first_seed + 1000 * trial
        result = asyncio.run(search_capacity(simulated_probe(server, cfg, on, seed), cfg, on))
        probes.append(len(result.steps))
        seconds.append(sum(s.level.duration_s for s in result.steps))
        estimate = result.estimate
        if estimate is not None:
            errors.append(math.log(estimate / truth))
        if on == "rate":
            if result.capacity_rps is not None:
                estimates += 1
                est_over += result.capacity_rps > mu
            if result.low_rps is not None:
                lows += 1
                low_rate_over += result.low_rps > mu
        if result.low is not None and result.high is not None:
            intervals += 1
            held += result.low <= truth <= result.high
            low_over += result.low > truth
            widths.append(result.high / result.low)
    return {"repeats": cfg.capacity_repeats, "tolerance": cfg.capacity_tolerance, "trials": trials,
            "intervals": intervals,
            "coverage": held / intervals if intervals else None,
            "low_above_truth": low_over / intervals if intervals else None,
            "median_width": float(np.median(widths)) if widths else None,
            "mean_probes": float(np.mean(probes)), "max_probes": int(np.max(probes)),
            "mean_load_s": float(np.mean(seconds)), "max_load_s": float(np.max(seconds)),
            "median_log_error": float(np.median(errors)) if errors else None,
            "rmse_log": float(np.sqrt(np.mean(np.square(errors)))) if errors else None,
            "estimate_above_service_rate": est_over / estimates if on == "rate" and estimates else None,
            "low_above_service_rate": low_rate_over / lows if on == "rate" and lows else None}


FIXED, CV05 = Queue(0.1, 0.0), Queue(0.1, 0.5)
EXP = Queue(0.1, 1.0, "exponential")
BATCH = BatchServer(0.1, 0.25, 8)
SCENARIOS = {s.name: s for s in [
    Scenario("rate, fixed 100 ms service, p95 e2e <= 300 ms", FIXED, "rate", {"e2e_ms_p95": 300.0}),
    Scenario("rate, service cv 0.5, p95 e2e <= 600 ms", CV05, "rate", {"e2e_ms_p95": 600.0}),
    Scenario("rate, fixed 100 ms service, p95 e2e <= 1 s", FIXED, "rate", {"e2e_ms_p95": 1000.0}),
    Scenario("concurrency, service cv 0.5, p95 e2e <= 1 s", CV05, "concurrency", {"e2e_ms_p95": 1000.0}),
    Scenario("rate, fixed 100 ms service, p95 e2e <= 2 s", FIXED, "rate", {"e2e_ms_p95": 2000.0}),
    Scenario("rate, exponential 100 ms service (M/M/1), p95 e2e <= 2 s", EXP, "rate", {"e2e_ms_p95": 2000.0}),
    Scenario("rate, batches of up to 8 (100 ms + 25% a request), p95 e2e <= 1 s", BATCH, "rate",
             {"e2e_ms_p95": 1000.0}),
]}


# ---- over-saturation ------------------------------------------------------------------------
def saturation(server: Server, cfg: LoadConfig, rate: float, probes: int) -> dict[str, float]:
    """How often the over-saturation rule ends a probe at `rate`, how often such a probe would have
    met the SLO (as the search judges it) had it run to its end, and the share of the probe's time
    the early end saved."""
    stopped = flipped = 0
    saved = []
    for seed in range(probes):
        sent, ends = probe_times(server, cfg, "rate", rate, seed)
        watch = first_saturation(list(sent), list(ends), SaturationWatch.for_rate(rate).window_s)
        if watch.at is not None:
            stopped += 1
            whole = outcome(sent, ends, cfg.slo, False, rate=rate)
            flipped += margin_of(whole.traces, cfg) <= 0
            saved.append((ends.max() - watch.at) / (ends.max() - sent.min()))
    return {"rate_over_service_rate": rate / server.service_rate, "stopped": stopped / probes,
            "stopped_would_have_passed": flipped / probes, "time_saved": float(np.mean(saved)) if saved else 0.0}


# ---- the run ----------------------------------------------------------------------------------
def search_code() -> dict[str, Any]:
    """Which capacity search ran: the git blob id of the capacity module as imported, and of the modules
    split out of it (capacity_judge, capacity_axis, capacity_fit) where they exist."""
    def blob(path: Path) -> str:
        source = path.read_bytes()
        return hashlib.sha1(b"blob %d\0" % len(source) + source).hexdigest()

    module = Path(capacity_module.__file__)
    parts = {f"{name}.py": blob(module.with_name(f"{name}.py")) for name in ("capacity_judge", "capacity_axis", "capacity_fit")
             if module.with_name(f"{name}.py").exists()}
    return {"capacity_py_blob": blob(module), "capacity_parts_blobs": parts, "steady_state_probes": ProbeLength is not None}


def cached_truths(path: str | None) -> dict[str, dict[str, Any]]:
    if not path:
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {t["key"]: t for t in data.get("truths", {}).values()}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common import write_results

    p = argparse.ArgumentParser(prog="python -m benchmarks.capacity_coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--repeats", type=int, nargs="+", default=[5])
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--truth-requests", type=int, default=1_000_000, help="requests in a truth run, per level")
    p.add_argument("--truth-seeds", type=int, default=2, help="independent truth runs, averaged")
    p.add_argument("--truths-from", default=None, help="a results JSON whose truths to take back where they match")
    p.add_argument("--scenarios", type=int, nargs="+", default=None, help="a subset, by index in SCENARIOS (0-based)")
    p.add_argument("--saturation-probes", type=int, default=None, help="probes per row of the over-saturation "
                   "table (default: --trials; 0: no table)")
    p.add_argument("--stem", default="capacity_coverage", help="benchmarks/results/<stem>.{json,md}")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    chosen = [s for i, s in enumerate(SCENARIOS.values()) if args.scenarios is None or i in args.scenarios]
    cache = cached_truths(args.truths_from)
    truths, rows = {}, []
    for sc in chosen:
        key = sc.key(args.truth_requests, args.truth_seeds)
        truth = cache.get(key) or true_capacity(sc, args.truth_requests, args.truth_seeds)
        truths[sc.name] = truth
        se = f" +- {truth['se']:.2g}" if truth.get("se") else ""
        print(f"{sc.name}: steady-state capacity {truth['capacity']:.4g}{se}, service rate "
              f"{sc.server.service_rate:.4g} req/s ({'cached' if key in cache else str(truth['seconds']) + ' s'})",
              flush=True)
        base = LoadConfig(slo=sc.slo, capacity_confidence=args.confidence, capacity_start_rps=1.0,
                          capacity_start_concurrency=1)
        for r in args.repeats:
            got = coverage(sc.server, replace(base, capacity_repeats=r), sc.on, truth["capacity"], args.trials)
            rows.append({"scenario": sc.name, "server": sc.server.describe(), "on": sc.on,
                         "truth": truth["capacity"], "service_rate": sc.server.service_rate, **got})
            print(f"  repeats {r}: coverage {got['coverage']}, low above truth {got['low_above_truth']}, "
                  f"median log error {got['median_log_error']}, {got['mean_probes']:.1f} probes, "
                  f"{got['mean_load_s']:.0f} s of load", flush=True)
    n_sat = args.trials if args.saturation_probes is None else args.saturation_probes
    saturated = [{"scenario": sc.name, **saturation(sc.server, LoadConfig(slo=sc.slo), x * sc.server.service_rate,
                                                    n_sat)}
                 for sc in chosen if sc.on == "rate" and n_sat > 0 for x in (0.5, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0)]
    probe_cfg = LoadConfig(slo={"e2e_ms_p95": 1000.0})
    data = {"args": vars(args), "search": search_code(), "probes": describe_probes(probe_cfg),
            "wall_s": round(time.monotonic() - t0, 1), "truths": truths, "rows": rows, "saturation": saturated}
    write_results(args.stem, data, markdown(data))
    return 0


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def markdown(data: dict[str, Any]) -> str:
    a = data["args"]
    cmd = (f"python -m benchmarks.capacity_coverage --trials {a['trials']} --truth-requests {a['truth_requests']} "
           f"--truth-seeds {a['truth_seeds']} --stem {a['stem']}")
    if a["repeats"] != [5]:
        cmd += " --repeats " + " ".join(map(str, a["repeats"]))
    if a.get("truths_from"):
        cmd += f" --truths-from {a['truths_from']}"
    lines = ["# The capacity interval's coverage against the steady state, by simulation", "",
             f"`{cmd}`: {a['trials']} searches per row, each with fresh seeds, against simulated servers whose "
             "steady-state capacity is known without the search; "
             f"{a['confidence']:.0%} intervals; the search, its judge and its over-saturation rule are selector's "
             "own "
             f"(capacity.py blob {data['search']['capacity_py_blob'][:10]}); probes: {data['probes']}. "
             f"Wall time {data['wall_s']:.0f} s.", "",
             "## The truths", "",
             "| scenario | server | steady-state capacity | +- (se) | service rate | how |",
             "|---|---|---|---|---|---|"]
    servers = {r["scenario"]: r["server"] for r in data["rows"]}
    for name, t in data["truths"].items():
        extra = f"; simulated {t['simulated']:.4g}" if "simulated" in t else ""
        lines.append(f"| {name} | {servers.get(name, '')} | {t['capacity']:.4g} | {_f(t.get('se'), '.2g')} | "
                     f"{t['service_rate']:.4g} req/s | {t['method']}, {t['seeds']} runs{extra} |")
    lines += ["", "## Coverage", "",
              "Truth and service rate in req/s (concurrency: in flight). Coverage: the interval held the truth; "
              "low > truth: its lower bound was above it (should be <= 2.5%); bias: median log(estimate / truth); "
              "> service rate: share of estimates, and of lower bounds, above the most the server can complete; "
              "load: the simulated seconds of traffic a search sends (its probes' spans summed), its time on a "
              "real server.", "",
              "| scenario | truth | service rate | runs | coverage | low > truth | bias (log) | median high/low "
              "| estimate > service rate | low > service rate | probes (mean / max) | load s (mean / max) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['scenario']} | {r['truth']:.4g} | {r['service_rate']:.4g} | {r['repeats']} | "
                     f"{_f(r['coverage'], '.3f')} | {_f(r['low_above_truth'], '.3f')} | "
                     f"{_f(r['median_log_error'], '+.3f')} | {_f(r['median_width'], '.2f')} | "
                     f"{_f(r['estimate_above_service_rate'], '.3f')} | {_f(r['low_above_service_rate'], '.3f')} | "
                     f"{r['mean_probes']:.1f} / {r['max_probes']} | {r['mean_load_s']:.0f} / {r['max_load_s']:.0f} |")
    if data["saturation"]:
        lines += ["", "## Over-saturation", "",
                  "The rule of selector/measure/saturation.py on probes as the search sends them: how often it ended "
                  "a probe, how often it ended one that would have met the SLO (as the search judges it) had it run "
                  "to its end (both shares of all probes), and the share of the probe's time the early end saved "
                  "(mean over ended probes).",
                  "", "| scenario | rate / service rate | ended early | ended, yet would have passed | time saved |",
                  "|---|---|---|---|---|"]
        for r in data["saturation"]:
            lines.append(f"| {r['scenario']} | {r['rate_over_service_rate']:g} | {r['stopped']:.1%} | "
                         f"{r['stopped_would_have_passed']:.1%} | {r['time_saved']:.0%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
