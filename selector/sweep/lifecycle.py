"""A sweep from start to end. Read this first.

    Sweep.start   preflight -> plan -> the parent run -> sweep.json        before any job
    Sweep.walk    the grid at once, or an adaptive search in waves          the jobs
    Sweep.finish  records -> selection -> report -> the parent run closed  after the last job

Hydra drives it: its callback (selector.sweep.callback) calls `start` and `finish`, its sweeper
(hydra/sweeper=selector, selector.sweep.sweeper) calls `walk` with the launcher, and each job
(selector.sweep.task.run_job, handing over to selector.variant.job) measures one variant wherever
the launcher runs it. The steps share one typed state, sweep.json in the sweep folder (selector.sweep.state): a launcher may run the jobs on
other machines, and the end must select with the sweep's own config whatever the jobs did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from selector.errors import UserError
from selector.sweep.state import FULL, SearchSummary, SearchVerdict, SweepState, Wave, read_state, write_state

log = logging.getLogger("selector.sweep")
Launch = Callable[[list[list[str]], int], Any]  # a batch of jobs' overrides and the first job's index -> results

last_sweep_dir: Path | None = None  # the folder of the newest sweep this process started (selector.api reads it)


class Sweep:
    """One sweep, by its folder: the state in sweep.json is all that passes between its steps."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)

    def start(self, config: DictConfig, multirun: bool) -> SweepState:
        """Check every job before anything loads (bad input stops here, exit code 2, nothing in MLflow),
        open the parent run and write the plan the jobs and the end read."""
        global last_sweep_dir
        from selector.compose import given_keys
        from selector.config import to_dict
        from selector.sweep import order_seed, preflight
        from selector.trackers import make_tracker
        from selector.variant.evaluation import load_tasks

        t0 = time.time()
        planned, skey = preflight.plan(config, multirun)
        if not any(p.available for p in planned):
            raise UserError(preflight.unavailable_message(planned))
        first = planned[0].cfg
        tracker = make_tracker(first.tracker, first.experiment, first.output_dir)
        parent = tracker.start_sweep(skey, _run_name(len(planned)), _sweep_params(planned, self.base),
                                     {"selector.status": "running"}, config=to_dict(first))
        stale = tracker.mark_interrupted(parent)
        if stale:
            log.info("marked %d interrupted variant run(s) of an earlier attempt as KILLED", stale)
        self.base.mkdir(parents=True, exist_ok=True)
        last_sweep_dir = self.base.resolve()
        reference = preflight.reference_variant(planned)
        _, ehash = load_tasks(first)
        seed, seed_source = order_seed.resolve(first.search.seed, first.seed, "seed" in given_keys(planned[0].overrides),
                                               first.output_dir, ehash)
        state = SweepState(
            config=to_dict(first), parent_run_id=parent, sweep_key=skey, tracking_uri=tracker.uri,
            started_at=t0, reference=reference,
            reference_evaluation_key=next((p.evaluation_key for p in planned if p.name == reference), None),
            variants=[p.describe() for p in planned], order_seed=seed, order_seed_source=seed_source,
            serving_knobs=list(planned[0].setting))
        write_state(self.base, state)
        log.info("sweep of %d variants; MLflow %s, parent run %s", len(planned), tracker.uri, parent)
        return state

    def walk(self, jobs: list[list[str]], search: Any, width: Callable[[], Any], launch: Launch) -> list[Any]:
        """Run the jobs (each a list of overrides, in the plan's order): all at once under
        search=grid, else in waves that an adaptive search chooses (docs/search.md), as many at a
        time as `width()` says (selector.sweep.width)."""
        state = read_state(self.base)
        t0 = time.time()
        if search.get("strategy", "adaptive") != "adaptive" or not state.variants:
            results = [launch(jobs, 0)]
            state.search = SearchSummary(strategy="grid", wall_s=time.time() - t0)
        else:
            results, state.search = self._search(state, jobs, search, width(), launch)
            state.search.wall_s = time.time() - t0
        write_state(self.base, state)
        return results

    def _search(self, state: SweepState, jobs: list[list[str]], search: Any, width: Any,
                launch: Launch) -> tuple[list[Any], SearchSummary]:
        """Waves of as many variants as run at once, smallest planned weight memory first; after each,
        the records are judged by the final selection and the variants that cannot win are pruned."""
        from selector.compose import config_from_dict
        from selector.search.driver import SearchDriver
        from selector.sweep.outcomes import candidates, fixed_sequence, outcomes

        by_name = {v.name: job for v, job in zip(state.variants, jobs)}
        cfg = config_from_dict(state.config or {})
        if width.hint:
            log.warning("%s: %s", width.source, width.hint)
        first = (state.reference,) if cfg.policy.rule == "non_inferiority" and state.reference else ()
        fixed = cfg.policy.winner_control == "fixed_sequence"
        siblings = search.get("sibling_margin", cfg.search.sibling_margin)
        driver = SearchDriver(candidates(state.variants), workers=width.workers, objective=cfg.policy.objective,
                              complete=bool(search.get("complete")), first=first,
                              prune_margin=float(search.get("prune_margin", 0.05)),
                              sequence=tuple(fixed_sequence(state.variants)) if fixed else (),
                              baseline_first=bool(cfg.measure.fidelity) or siblings is not None,
                              sibling_margin=None if siblings is None else float(siblings))
        log.info("adaptive search over %d variants, %d at a time (%s), in this order: %s", len(state.variants),
                 driver.workers, width.source, ", ".join(driver.order))
        results, index, waves = [], 0, []
        while not driver.done:
            wave = driver.next_wave()
            if wave is None:  # waves run to the end before the next starts, so this means done
                break
            batch = [by_name[name] + ([FULL] if wave.full else []) for name in wave.names]
            log.info("%s wave: %s", wave.kind, ", ".join(wave.names))
            started = time.time()
            results.append(launch(batch, index))
            waves.append(Wave(kind=wave.kind, names=list(wave.names), wall_s=round(time.time() - started, 1)))
            index += len(batch)
            for name, outcome in outcomes(self.base, cfg.policy, wave.names).items():
                driver.report(name, outcome)
        return results, SearchSummary(
            strategy="adaptive", order=list(driver.order), first=list(first), workers=driver.workers,
            width_source=width.source, waves=waves,
            verdicts=[SearchVerdict(name=n, status=s, reason=r) for n, s, r in driver.verdicts()],
            counts=driver.counts(), notes=driver.notes)

    def finish(self, wall_s: float) -> None:
        """Gather every variant's record, select under the sweep's own policy, write the report and
        close the parent run; the console gets the summary."""
        from selector.report.samples import load_samples
        from selector.sweep import comparison, end
        from selector.sweep.judging import gather_records, report_context, select_and_report
        from selector.sweep.searched import not_needed_records, savings

        state = read_state(self.base)
        if state.adaptive:
            not_needed_records(state, self.base)  # written to their job folders, gathered with the rest
        records = gather_records(self.base)
        if not records:
            log.warning("no variant records under %s: nothing to select from", self.base)
            return
        cfg = end.sweep_config(state, records)
        context = report_context(cfg, state, self.base, wall_s)
        saved = savings(records, state) if state.adaptive else None
        if saved:
            context["search"] = {**state.search.model_dump(), "savings": saved, "order_seed": state.order_seed,
                                 "order_seed_source": state.order_seed_source}
        if cfg.compare_to:
            this = comparison.this_sweep(self.base, records, state)
            context["comparison"] = comparison.compare_with_predecessor(cfg, this)
        selection, paths = select_and_report(records, cfg, context, self.base / "report", load_samples(self.base))
        end.close_parent_run(cfg, state, records, selection, paths, wall_s, saved)
        comparison.keep_comparison(context.get("comparison"), state, self.base)
        end.print_summary(cfg, state, records, selection, paths, saved)

    def abort(self, why: str) -> None:
        """Close the parent run as FAILED when the end of a sweep itself breaks."""
        from selector.sweep.end import abort_sweep

        abort_sweep(self.base, why)


def _run_name(variants: int) -> str:
    return f"sweep {time.strftime('%Y-%m-%d %H:%M')} ({variants} variants)"


def _sweep_params(planned: list[Any], base: Path) -> dict[str, Any]:
    """The parent run's params: what the sweep crosses, and under which policy."""
    first = planned[0].cfg
    return {
        "models": ",".join(dict.fromkeys(p.cfg.model.name for p in planned)),
        "precisions": ",".join(dict.fromkeys(p.cfg.precision.name for p in planned)),
        "evalset": first.evalset.path,
        "policy.rule": first.policy.rule,
        **{f"policy.floor.{k}": v for k, v in first.policy.floors.items()},
        "variants": len(planned),
        "sweep_dir": str(base),
    }
