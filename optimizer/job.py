"""An optimize job: a workload, an output folder, a study in a storage, and N workers.

The folder holds ``job.json`` (the workload as validated, the storage URL with its password
hidden, and the study name), the study's journal file ``study.journal`` (unless ``--storage`` names
a database; a folder written by an older servopt keeps its SQLite ``study.db``), and the results.
Running the same job again resumes it: finished trials are read back and the budget
counts them. The storage URL comes from ``--storage``, else the ``SERVOPT_STORAGE`` environment
variable, else the workload's ``storage:``, else the journal file in the folder; a command that reopens a job
whose URL had a password needs the URL again from one of the first two (see
:mod:`servopt.optimizer._storage`).

Every file is written atomically through :mod:`servopt.costmodels.outfiles`, so a killed run leaves
the old ``job.json`` or the new one. A ``job.json`` that is unreadable all the same (truncated by an
older version, edited by hand) is recovered: ``servopt optimize`` rewrites it once the study has
confirmed the workload is the same (the study keeps its own copy of the workload), and
``servopt report`` / ``export`` rebuild it from the folder's own study.

Example:
    >>> from servopt.optimizer.job import Job
    >>> from servopt.optimizer.defaults import default_workload
    >>> job = Job(default_workload(), "/tmp/servopt-doc-job")
    >>> job.storage_url.endswith("/tmp/servopt-doc-job/study.journal"), job.study_name
    (True, 'default')
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import multiprocessing.pool
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from joblib import Parallel, delayed

from ..costmodels.errors import InputError, one_line
from ..costmodels.outfiles import output_folder, read_text, within, write_text
from ..costmodels.physics import Fleet, Load, check_memory, check_rate, check_summary
from ..costmodels.userfiles import parse_json, shown
from ..results import Recheck, TrialRecord, TrialResult
from ._evaluate import Evaluator
from ._inputs import INPUTS_ATTR, changed_inputs, study_inputs
from ._lifeline import exit_with_parent
from ._problem import Problem, build_problem
from ._progress import Progress, RecheckProgress, poll_progress
from ._storage import (
    STORAGE_ENV, has_hidden_password, journal_url, masked_url, open_storage, storage_file, storage_from_env,
)
from .study import (
    DIRECTIONS,
    RECORD_ATTR,
    SCREEN_ATTR,
    RecheckRound,
    TrialBudget,
    WorkerResult,
    evaluated_trials,
    fail_dead_workers_trials,
    final_front,
    front_candidates,
    front_equivalents,
    make_sampler,
    prepare_study,
    next_rechecks,
    recheck,
    recheck_statement,
    run_worker,
    save_recheck,
    screen_space,
    stored_rechecks,
)
from .workload import Workload, parse_workload

JOB_FILE = "job.json"
JOURNAL_FILE = "study.journal"
# The SQLite study of a folder written before the journal became the default.
LEGACY_DATABASE = "study.db"
WORKLOAD_HASH_ATTR = "workload_sha256"
# What the front's re-check established (:func:`~servopt.optimizer.study.recheck_statement`).
RECHECK_STATEMENT_ATTR = "recheck_statement"
JOB_ATTR = "job"
RESTART_HINT = "start afresh in this folder with servopt optimize --restart (its trials are deleted)"


def folder_storage(out_dir: Path) -> str | None:
    """The URL of the study a job folder holds itself (its journal, or an older SQLite database), or
    None when it holds neither."""
    if (out_dir / JOURNAL_FILE).is_file():
        return journal_url(out_dir / JOURNAL_FILE)
    if (out_dir / LEGACY_DATABASE).is_file():
        return f"sqlite:///{(out_dir / LEGACY_DATABASE).resolve()}"
    return None


class _BrokenJobFile(Exception):
    """job.json exists but does not hold a job (truncated, not JSON, keys missing)."""


def _read_job_file(path: Path) -> dict[str, Any]:
    """job.json's content. FileNotFoundError when there is none; _BrokenJobFile when unreadable
    (not JSON, nested absurdly deep, a key twice, keys missing or of the wrong type)."""
    text = read_text(path, "job file")
    try:
        data = parse_json(text, "it")
    except InputError as err:
        raise _BrokenJobFile(re.sub(r"^it (is )?", "", str(err))) from None
    if not isinstance(data, dict) or not {"study", "storage", "workload"} <= set(data):
        raise _BrokenJobFile("study, storage or workload missing")
    hardware = data.get("hardware")
    text_keys = [data["study"], data["storage"], data.get("name", ""), "" if hardware is None else hardware]
    if not (all(isinstance(v, str) for v in text_keys) and isinstance(data["workload"], dict)):
        raise _BrokenJobFile("study, storage, name and hardware must be text, workload a mapping")
    return data


# Keys a rerun may change without starting another study: how long to search and where it is stored.
RESUMABLE_KEYS = {"budget", "storage"}


def workload_identity(workload: Workload) -> dict[str, Any]:
    """The workload without :data:`RESUMABLE_KEYS`: what must match for a study to be resumed."""
    return {k: v for k, v in workload.model_dump(mode="json").items() if k not in RESUMABLE_KEYS}


def workload_hash(workload: Workload) -> str:
    return hashlib.sha256(json.dumps(workload_identity(workload), sort_keys=True).encode()).hexdigest()


@dataclass
class JobOutcome:
    """What a run did: finished trials in the study (every worker's, this run's and earlier ones),
    the trials each of this run's workers finished, and the final front's trial numbers."""

    trials: int
    workers: list[WorkerResult]
    front: list[int]
    elapsed_s: float
    simulations: int
    rechecked: int = 0
    notes: tuple[str, ...] = ()

    @property
    def new_trials(self) -> int:
        """Trials this run's workers finished (other processes on the same study not counted)."""
        return sum(w.trials_run for w in self.workers)

    @property
    def stale_failed(self) -> int:
        return sum(w.stale_failed for w in self.workers)


@dataclass
class Job:
    """One optimize job. ``storage`` defaults to a journal file in ``out_dir``; ``study`` to the workload name."""

    workload: Workload
    out_dir: str | Path
    study: str | None = None
    storage: str | None = None
    jobs: int = 1
    cores: int | None = None  # processes for the re-check's simulations (default: every core available)
    hardware: str | None = None
    name: str = "default"
    restart: bool = False  # delete what the study holds and start afresh (inputs that changed are then no error)
    notes: list[str] = field(default_factory=list, repr=False)  # what opening the study repaired
    _problem: Problem | None = field(default=None, repr=False)
    _evaluator: Evaluator | None = field(default=None, repr=False)
    _inputs: dict[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)

    @property
    def study_name(self) -> str:
        return self.study or self.name

    @property
    def storage_url(self) -> str:
        """The URL to connect with (it may hold a password: never print or save it; see
        :attr:`shown_storage`)."""
        explicit = self.storage or storage_from_env() or self.workload.storage
        return explicit or folder_storage(self.out_dir) or journal_url(self.out_dir / JOURNAL_FILE)

    @property
    def shown_storage(self) -> str:
        """The storage URL with its password hidden: what is printed and saved."""
        return masked_url(self.storage_url)

    def saved_workload(self) -> dict[str, Any]:
        """The workload as saved (job.json, the study, front.json): its storage URL masked."""
        data = self.workload.model_dump(mode="json")
        if data.get("storage"):
            data["storage"] = masked_url(data["storage"])
        return data

    @property
    def problem(self) -> Problem:
        if self._problem is None:
            self._problem = build_problem(self.workload, self.hardware)
        return self._problem

    @property
    def evaluator(self) -> Evaluator:
        """This process's scorer: its caches serve the sampler, every trial and the re-checks."""
        if self._evaluator is None:
            self._evaluator = Evaluator(self.problem)
        return self._evaluator

    # --- the study --------------------------------------------------------------------------
    def open_study(self, create: bool = True) -> optuna.Study:
        storage = open_storage(self.storage_url, self.out_dir)
        repaired = getattr(storage, "repaired", "")  # a journal's torn last line, cut off
        if repaired and repaired not in self.notes:
            self.notes.append(repaired)
        expected = workload_hash(self.workload)
        w = self.workload
        sampler = make_sampler(w.sampler, w.seed, w.budget.trials, self.evaluator)
        if create:
            study = optuna.create_study(study_name=self.study_name, storage=storage, directions=list(DIRECTIONS),
                                        sampler=sampler, load_if_exists=True)
        else:
            try:
                study = optuna.load_study(study_name=self.study_name, storage=storage, sampler=sampler)
            except KeyError:
                raise InputError(f"no study '{self.study_name}' in {self.shown_storage}") from None
        stored = study.user_attrs.get(WORKLOAD_HASH_ATTR)
        if self._inputs is None:
            self._inputs = study_inputs(self.problem)
        inputs = self._inputs
        if stored is None:
            study.set_user_attr(WORKLOAD_HASH_ATTR, expected)
            study.set_user_attr("workload", self.saved_workload())
            study.set_user_attr(JOB_ATTR, {"hardware": self.hardware, "name": self.name})
        elif stored != expected:
            raise InputError(
                f"study '{one_line(self.study_name)}' in {self.shown_storage} was started with a different workload; "
                f"use the same workload file, another --study name or --out folder, or {RESTART_HINT}"
            )
        recorded = study.user_attrs.get(INPUTS_ATTR)
        if recorded is None:  # a new study, or one an older servopt started (it recorded no inputs)
            study.set_user_attr(INPUTS_ATTR, inputs)
        else:
            changed = changed_inputs(recorded, inputs)
            if changed:
                raise InputError(
                    f"study '{one_line(self.study_name)}' in {self.shown_storage} was started from other inputs, and "
                    f"its trials were scored with them: {'; '.join(changed)} changed since; run with the inputs it "
                    f"was started from, or {RESTART_HINT}")
        prepare_study(study, w.objective.model_dump())
        return study

    def delete_study(self) -> int:
        """``--restart``: delete the job's study from its storage, and the study the folder's job.json
        names when it lives in the same storage (a workload renamed since); returns the finished
        trials deleted. Nothing else in the storage is touched."""
        storage = open_storage(self.storage_url, self.out_dir)
        names = {self.study_name}
        try:
            old = _read_job_file(self.out_dir / JOB_FILE)
        except (FileNotFoundError, _BrokenJobFile):
            old = {}
        if old.get("storage") == self.shown_storage:
            names.add(old["study"])
        deleted = 0
        for summary in optuna.get_all_study_summaries(storage):
            if summary.study_name in names:
                deleted += summary.n_trials
                optuna.delete_study(study_name=summary.study_name, storage=storage)
        return deleted

    def job_data(self) -> dict[str, Any]:
        """What job.json holds: the storage URL without its password."""
        return {
            "study": self.study_name,
            "storage": self.shown_storage,
            "hardware": self.hardware,
            "name": self.name,
            "workload": self.saved_workload(),
        }

    def check_folder(self) -> str | None:
        """Refuse a folder that holds another job; returns a note when its job.json was unreadable
        (the study, opened first, has then confirmed the workload)."""
        path = self.out_dir / JOB_FILE
        try:
            old = _read_job_file(path)
        except FileNotFoundError:
            return None
        except _BrokenJobFile as err:
            return f"{path} was unreadable ({err}; a run killed mid-write by an older servopt?): rewritten"
        old_identity = {k: v for k, v in old.get("workload", {}).items() if k not in RESUMABLE_KEYS}
        new_identity = workload_identity(self.workload)
        if self.restart and old.get("storage") == self.shown_storage:
            return None  # its study is deleted and this job starts afresh in the folder
        if old.get("study") != self.study_name:
            differs = f"study '{old.get('study')}', not '{self.study_name}'"
        elif old.get("storage") != self.shown_storage:  # a copied folder keeps its first storage URL
            differs = f"study '{self.study_name}' in {old.get('storage')}, not {self.shown_storage}"
        elif old_identity != new_identity:
            keys = sorted(k for k in {*old_identity, *new_identity} if old_identity.get(k) != new_identity.get(k))
            differs = f"study '{self.study_name}' of another workload: {', '.join(keys)} differ"
        else:
            return None
        raise InputError(f"{self.out_dir} holds another job ({differs}); use another --out folder, or {RESTART_HINT}")

    def write_job_file(self) -> Path:
        return write_text(self.out_dir / JOB_FILE, json.dumps(self.job_data(), indent=2) + "\n")

    @classmethod
    def load(cls, out_dir: str | Path, storage: str | None = None) -> Job:
        """The job a folder holds (for ``servopt report`` and ``servopt export``). ``storage`` (else
        ``SERVOPT_STORAGE``) gives the URL again when job.json keeps it without its password; an
        unreadable job.json is rebuilt from the folder's own study."""
        path = Path(out_dir) / JOB_FILE
        try:
            data = _read_job_file(path)
        except FileNotFoundError:
            raise InputError(f"{out_dir} is not an optimize job folder (no {JOB_FILE}); run servopt optimize first") from None
        except _BrokenJobFile as err:
            job = cls._recover(Path(out_dir), str(err))
            job.write_job_file()
            return job
        saved = data["storage"]
        given = storage or storage_from_env()
        if given is None:
            if has_hidden_password(saved):
                raise InputError(f"{path} keeps the storage URL without its password ({saved}): pass it again "
                                 f"with --storage URL or set {STORAGE_ENV}")
            given = cls._own_storage(Path(out_dir), saved)
        elif masked_url(given) != saved:
            raise InputError(f"the storage URL given ({masked_url(given)}) is not this job's ({saved})")
        workload = parse_workload(data["workload"], f"job file '{shown(path)}': workload")
        return cls(workload, out_dir, study=data["study"], storage=given, hardware=data.get("hardware"),
                   name=data.get("name", "default"))

    @staticmethod
    def _own_storage(out_dir: Path, saved: str) -> str:
        """The storage job.json names, when it is a file inside the job folder. Any other (another
        folder's file, a database server) is the user's to name again: a job's files are anyone's to
        edit, and servopt creates or rewrites nothing outside the folder on their word."""
        try:
            database = storage_file(saved)
        except InputError:
            database = None
        if database is not None and within(database, out_dir):
            return saved
        own = folder_storage(out_dir)
        hint = f"; this folder's own study is {masked_url(own)}" if own else ""
        raise InputError(f"{out_dir / JOB_FILE} names the storage {saved}, outside the job folder: servopt opens no "
                         f"storage outside it on a job file's word (an edited job.json could have it create or "
                         f"rewrite any file); pass it with --storage URL or set {STORAGE_ENV}{hint}")

    @classmethod
    def _recover(cls, out_dir: Path, problem: str) -> Job:
        """Rebuild a job from the one study in the folder's own storage."""
        fix = "rerun servopt optimize with the same workload file and --out to rewrite it"
        url = folder_storage(out_dir)
        if url is None:
            raise InputError(f"{out_dir / JOB_FILE} is unreadable ({problem}) and the folder has no {JOURNAL_FILE} to "
                             f"rebuild it from; {fix}")
        database = out_dir / (JOURNAL_FILE if url.startswith("journal:") else LEGACY_DATABASE)
        summaries = [s for s in optuna.get_all_study_summaries(open_storage(url, out_dir))
                     if "workload" in s.user_attrs]
        if len(summaries) != 1:
            raise InputError(f"{out_dir / JOB_FILE} is unreadable ({problem}) and {database.name} holds {len(summaries)} "
                             f"studies with a workload; {fix}")
        summary = summaries[0]
        extra = summary.user_attrs.get(JOB_ATTR) or {}
        workload = parse_workload(summary.user_attrs["workload"], f"study '{summary.study_name}' in {database}")
        return cls(workload, out_dir, study=summary.study_name, storage=url, hardware=extra.get("hardware"),
                   name=extra.get("name", summary.study_name))

    # --- running ----------------------------------------------------------------------------
    def run(self, progress: bool = True) -> JobOutcome:
        """Search (resuming what the study holds), re-check the front, and return the outcome."""
        start = time.perf_counter()
        problem = self.problem  # resolve names before anything is written
        output_folder(self.out_dir, "--out", (JOB_FILE, JOURNAL_FILE, LEGACY_DATABASE))
        note = self.check_folder()
        if self.restart:
            deleted = self.delete_study()
            if deleted:
                self.notes.append(f"--restart: the {deleted} trial(s) the study held were deleted")
        # A storage that cannot be opened, or a study of another workload, fails before job.json is touched.
        study = self.open_study()
        self.write_job_file()
        before = len(evaluated_trials(study))
        budget = self.workload.budget
        bar = Progress(total=budget.trials, initial=before, time_s=budget.time_s, enabled=progress)
        screened = None
        if self.workload.sampler == "screen":
            screened, share = screen_space(problem, study, self.evaluator, TrialBudget(budget.trials), budget.time_s,
                                           callbacks=[bar.callback])
        if screened is not None and "fallback" not in screened:
            workers = [share]  # the screen left no deployment that could change the front, or spent the budget
        elif self.jobs <= 1:
            workers = [run_worker(problem, study, trials=budget.trials, timeout_s=budget.time_s,
                                  callbacks=[bar.callback], evaluator=self.evaluator)]
        else:
            config = self.config()
            with poll_progress(bar, lambda: self.open_study(create=False)):
                workers = Parallel(n_jobs=self.jobs, backend="loky")(
                    delayed(_worker)(config, index) for index in range(self.jobs)
                )
        bar.close()
        if budget.trials is not None:
            wait_for_other_workers(study)
        checking = RecheckProgress(enabled=progress)
        try:
            rechecked = self.recheck_front(study, on_round=checking.update)
        finally:
            checking.close()
        trials = evaluated_trials(study)
        simulations = sum(1 for t in trials if t.user_attrs.get(RECORD_ATTR, {}).get("fidelity") == "simulate")
        return JobOutcome(trials=len(trials), workers=workers, front=final_front(study),
                          elapsed_s=time.perf_counter() - start, simulations=simulations, rechecked=rechecked,
                          notes=(*self.notes, *((note,) if note else ())))

    def config(self) -> dict[str, Any]:
        """What a worker process needs to rebuild this job."""
        return {"workload": self.workload.model_dump(mode="json"), "out_dir": str(self.out_dir),
                "study": self.study_name, "storage": self.storage_url, "hardware": self.hardware, "name": self.name}

    def recheck_front(self, study: optuna.Study, on_round: Callable[[RecheckRound], None] | None = None) -> int:
        """Re-simulate the front's candidates with ``final_requests``, cheapest first, round by round
        until the front is settled (:func:`~servopt.optimizer.study.next_rechecks`); a round's
        re-checks run on this machine's cores (:attr:`cores`), with the results one core gives.
        ``on_round`` hears where it stands before each round, after each re-check and once the front
        is settled (its ``front`` then is the job's final front): a progress display
        (:class:`~servopt.optimizer._progress.RecheckProgress`). Returns how many ran; what the
        re-check established is stored with the study (:data:`RECHECK_STATEMENT_ATTR`)."""
        w = self.workload
        requests = w.fidelity.final_requests
        candidates = front_candidates(study, w.slo)
        ran = failed = rounds = 0

        def tell(left: int) -> None:
            if on_round is not None:
                on_round(RecheckRound(rounds, ran, failed, len(candidates), len(final_front(study)), left))

        while True:
            batch = next_rechecks(candidates, stored_rechecks(study), requests)
            tell(len(batch))
            if not batch:
                break
            for left, (candidate, result) in enumerate(
                    zip(batch, self._rechecks([c.record for c in batch]), strict=True), start=1):
                save_recheck(study, candidate.number, {**result, "equivalents": list(candidate.equivalents)})
                failed += not result["feasible"]
                ran += 1
                if left < len(batch):
                    tell(len(batch) - left)
            rounds += 1
        study.set_user_attr(RECHECK_STATEMENT_ATTR, recheck_statement(candidates, stored_rechecks(study), requests))
        return ran

    def _rechecks(self, records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Re-check simulations of one round, in the records' order as each finishes: in forked
        processes that share this one's caches when several cores and records are there (the
        simulations are seeded: any process gives the same result), else here."""
        processes = min(self.cores or available_cores(), len(records))
        if processes <= 1 or "fork" not in multiprocessing.get_all_start_methods():
            for record in records:
                yield recheck(self.problem, record, self.evaluator)
            return
        global _FORKED
        _FORKED = self
        try:
            # A pool of forked processes (joblib's multiprocessing backend, which forks too, hands a
            # round's results back only all at once): results come in the records' order, each as
            # soon as it and those before it are done.
            with recheck_pool(processes) as pool:
                yield from pool.imap(_forked_recheck, records)
        finally:
            _FORKED = None

    # --- reading back -----------------------------------------------------------------------
    def collect(self) -> dict[str, Any]:
        """Everything the results package needs: the trials and re-checks as typed records
        (:class:`servopt.results.TrialRecord`), the front, and the job's settings as plain data."""
        study = self.open_study(create=False)
        problem = self.problem
        trials = [
            TrialResult(t.number, list(t.values) if t.values else None,
                        self._current(TrialRecord.model_validate(t.user_attrs[RECORD_ATTR])),
                        t.duration.total_seconds() if t.duration else None)
            for t in evaluated_trials(study)
        ]
        gpus = {
            name: {"profile": problem.profile(name).source, "calibrated": problem.profile(name).calibrated,
                   "price_per_gpu_hour": gpu.price_per_gpu_hour, "price_per": gpu.price_per,
                   "gpus_per_node": problem.ctx.node_size(name), "vendor": gpu.vendor}
            for name, gpu in problem.ctx.gpus.items()
        }
        return {
            "job": {"study": self.study_name, "storage": self.shown_storage, "out_dir": str(self.out_dir),
                    "name": self.name},
            "workload": self.saved_workload(),
            "space": problem.space.describe(),
            "gpus": gpus,
            "trials": trials,
            "rechecks": {n: Recheck.model_validate(r) for n, r in stored_rechecks(study).items()},
            "front": final_front(study),
            "front_equivalents": front_equivalents(study),
            "recheck": study.user_attrs.get(RECHECK_STATEMENT_ATTR),
            "screen": study.user_attrs.get(SCREEN_ATTR),
            "max_model_len": {key: {"tokens": problem.ctx.max_model_len[key], "basis": basis}
                              for key, basis in problem.max_model_len_basis.items()},
        }


    def physics_breaches(self, data: dict[str, Any] | None = None) -> list[str]:
        """Every figure the job wrote that breaks the physics check (:mod:`servopt.costmodels.physics`):
        each trial's estimate, simulation and one-replica-down prediction, its replica capacity and
        memory, and each re-check, on the GPUs of the deployment they describe. Empty when all pass."""
        data = data or self.collect()
        problem = self.problem
        stats, traffic = problem.stats, self.workload.traffic
        out: list[str] = []

        def summaries(what: str, compiled, summary, n_minus_1) -> list[str]:
            load = Load.of(traffic, stats.mean_input_tokens, stats.mean_output_tokens,
                           compiled.deployment.enable_prefix_caching)
            found = check_summary(Fleet.of(compiled), load, summary, what) if summary else []
            if n_minus_1:
                fewer = compiled.with_replicas(compiled.deployment.replicas - 1)
                found += check_summary(Fleet.of(fewer), load, n_minus_1, f"{what}, one replica down")
            return found

        compiled_of = {}
        for trial in data["trials"]:
            r = trial.record
            if r.fidelity == "precheck" and not r.capacity:
                continue
            compiled = compiled_of[trial.number] = problem.ctx.compile(r.model, r.deployment.spec)
            what = f"trial {trial.number} ({r.deployment.spec.gpu} x {r.num_gpus})"
            out += check_memory(Fleet.of(compiled), what)
            out += summaries(f"{what} estimate", compiled, r.estimate, None)
            out += summaries(f"{what} simulation", compiled, r.simulation, r.n_minus_1)
            capacity = (r.capacity or {}).get("per_replica")
            if capacity:
                one = compiled.with_replicas(1)
                load = Load.of(traffic, stats.mean_input_tokens, stats.mean_output_tokens,
                               compiled.deployment.enable_prefix_caching)
                out += check_rate(Fleet.of(one), load, capacity["requests_per_s"], f"{what} requests/s per replica")
        for number, check in data["rechecks"].items():
            if number in compiled_of:
                out += summaries(f"trial {number} re-check", compiled_of[number], check.simulation, check.n_minus_1)
        return out

    def _current(self, record: TrialRecord) -> TrialRecord:
        """A simulated trial's record with its whole deployment record (studies written before
        records carried all of it are compiled again here, keeping the weights they recorded, so
        the export reads them like any)."""
        old = record.deployment
        if record.fidelity != "simulate" or (old.roles and old.gpus_per_node and old.moe is not None):
            return record
        fresh = self.problem.ctx.compile(record.model, old.spec).record()
        return record.model_copy(update={"deployment": fresh.model_copy(update={"weights": old.weights or fresh.weights})})


# How long a worker that has run out of budget waits for other workers' last trials before it
# re-checks the front (their trials belong to the budget it reports on).
OTHER_WORKERS_WAIT_S = 600.0


def wait_for_other_workers(study: optuna.Study, timeout_s: float = OTHER_WORKERS_WAIT_S) -> None:
    """Wait until no trial of the study is running (a dead worker's is failed by
    :func:`~servopt.optimizer.study.fail_dead_workers_trials` or the storage's heartbeat)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fail_dead_workers_trials(study)
        with warnings.catch_warnings():  # other hosts' dead workers, through the heartbeat
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            return
        time.sleep(0.2)


def _job_from_config(config: dict[str, Any]) -> Job:
    workload = parse_workload(config["workload"], "job")
    return Job(workload, config["out_dir"], study=config["study"], storage=config["storage"],
               hardware=config["hardware"], name=config["name"])


def _worker(config: dict[str, Any], index: int) -> WorkerResult:
    """One of ``--jobs N`` processes: its own sampler seed, the shared study; it ends if the parent dies."""
    exit_with_parent()
    job = _job_from_config(config)
    w = job.workload
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = job.open_study(create=False)
    study.sampler = make_sampler(w.sampler, w.seed + 1000 * (index + 1), w.budget.trials, job.evaluator)
    return run_worker(job.problem, study, trials=w.budget.trials, timeout_s=w.budget.time_s, evaluator=job.evaluator)


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# The job whose re-checks forked processes run: they inherit it (its problem and caches) rather than
# rebuilding it from its workload.
_FORKED: Job | None = None


def recheck_pool(processes: int) -> multiprocessing.pool.Pool:
    """``processes`` forked processes for the re-check (they inherit :data:`_FORKED`)."""
    return multiprocessing.get_context("fork").Pool(processes)


def _forked_recheck(record: dict[str, Any]) -> dict[str, Any]:
    exit_with_parent()
    return recheck(_FORKED.problem, record, _FORKED.evaluator)
