"""The search for the fastest model inside the budget, over pruning rates per channel group,
quantization and fusion.

Why this shape: accuracy evaluations are the expensive part (each builds a model, with least-squares
reconstruction or a quantizer's calibration, and scores it on the data) and they are independent, so
every stage proposes a batch of candidates that the executor builds and scores in parallel; the driver
then times the ones inside the budget side by side on this machine.

1. **Quantization of the original**, in each mode the ops call for. Which nodes stay in float for speed
   is timed whole, not node by node (MobileNetV2's four depthwise convolutions, slower quantized alone,
   left in float made the model 1.47x where quantizing them too made it 2.16x): up to three forms (the
   nodes slower alone on this machine in float, none, those with the ones barely faster alone) are built
   without the budget's search and timed side by side; the fastest form is then searched inside the
   budget, and the pruned models are quantized in it too. First, since it is often the largest single
   gain and the probes below grow with the model: on a YOLO11n with 73 channel groups they spent a
   3-minute budget before any quantized candidate was tried (then int8 alone ran 1.24x, inside the
   budget). The original fused is built beside them (lossless; its build time is what fusing the best
   will take, see **Time**).
2. **Sensitivity**: each prunable group pruned alone at ``PROBE_RATE``, once. A group whose pruning
   alone spends the whole budget is never pruned.
3. **Global rate**: the other groups pruned together at each rate of ``GLOBAL_RATES``; the fastest pruned
   models inside the budget then quantized as the original was, with what the budget has left after
   pruning.
4. **Greedy refinement with backtracking**: from the fastest so far, raise one group's rate a step at a
   time, least sensitive groups first, in parallel batches; a group whose step breaks the budget is not
   raised again, one whose step is not faster by ``MARGIN`` is not tried again until the best changes;
   stop when no group is left to try. Here and in stage 3, a rate whose kept channel counts round to a
   lower rate's (16 of 32 channels kept at 50% and at 62.5%, in multiples of 8) is skipped: it would build
   the same model under another name.
5. **Fusion**: ONNXSat's lossless optimization appended to the best so far (always: the search kept the
   time for it), kept when it is faster by ``MARGIN``, as is the fused original of stage 1.
6. **Final**: the ``FINALISTS`` fastest timed again in one run.

**Time.** ``--budget-minutes`` is a limit, not a hint: a candidate starts only if, at the pace its stage's
candidates have run so far, it ends before the deadline less what finishing takes (fusing the best, which
the fused original's build time foretells, and the final timings, which the timings so far foretell).
Checking between batches only let a 2-minute budget on a 3-D ResNet run 4 minutes (a batch of four
sensitivity probes, one of them 52 s, started just before the deadline). Candidates still running when finishing
must begin are stopped (the executor's ``deadline``), since nothing foretells how long the first ones take: two
int8 forms of a YOLOv8-seg model, 160 s each, made a 2-minute search take almost 6 (now 110 s, the two named as
unfinished in the report).

Wherever speeds are compared, the best so far is timed in the same run, and candidates that cannot be
told apart (within ``MARGIN``, or inside each other's bootstrap interval) are settled by file size, the
secondary objective: timing noise then rarely steers the search, and a local run and a Ray run of the
same search choose the same recipe.

A global bisection alone misses that groups differ (measured on the digits ResNet: the last stage's
groups cost a tenth of the stem's accuracy per channel removed); an evolutionary search spends many
more evaluations than a 20-minute budget on 2 cores allows. Every decision that compares speeds needs
``MARGIN``, so timing noise does not steer the search.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import onnx

from onnxsat.compression.evaluate import Outcome, Problem, Task, evaluate
from onnxsat.compression.executor import Executor
from onnxsat.compression.recipe import Recipe
from onnxsat.compression.timing import SideBySide, Timed
from onnxsat.pruning.importance import channels_to_prune

PROBE_RATE = 0.5
LADDER = (0.25, 0.375, 0.5, 0.625, 0.75, 0.875)
GLOBAL_RATES = LADDER[:5]
QUANTIZE_BASES = 3
"""Pruned models (the fastest inside the budget) quantized in stage 3, beside the original."""
FINALISTS = 4
"""The fastest candidates timed again together before one is chosen."""
MARGIN = 1.02
"""A candidate must be this much faster than the best so far to replace it (ratio noise here: about 1%)."""
SEARCH_SHARE = 0.75
"""Share of the search's time left that a candidate's own search (quantization's nodes) gets as it starts: the
candidate still builds and scores what it found before the time is out, when a candidate still running is
stopped."""
FUSED_ORIGINAL = Recipe(fuse=True)
"""The original, fused: lossless, so a candidate of every search that fuses."""
FUSE_RESERVE = 1.25
"""Fusing the best takes about the fused original's build time scaled by their node counts (quantize-dequantize
pairs add nodes: a 3-D ResNet fused in 16 s, its int8 form in 37 s), and this much more for safety."""
FINISH_RUNS = (2, FINALISTS, 3)
"""Models in each timing run after the search: the fused best beside the best, the finalists, the chosen recipe's
steps (at most three). A model takes as long as a timed model has taken so far, a run no longer than the timer's
limit."""
FINISH_SCORING = 2
"""The held-out scoring and the verification after the search, in timed models' lengths (on a 3-D ResNet)."""


@dataclass
class Evaluated:
    """A candidate: the stage that proposed it, its outcome, and its speed when it was timed."""

    stage: str
    outcome: Outcome
    timed: Timed | None = None
    requested: Recipe = field(default_factory=Recipe)
    """The recipe as proposed (before the quantizer's node search filled in ``keep_float``)."""

    @property
    def recipe(self) -> Recipe:
        return self.outcome.recipe

    @property
    def speedup(self) -> float:
        """Against the original (which is 1 and never timed against itself)."""
        return self.timed.speedup if self.timed is not None else 1.0


@dataclass
class SearchSettings:
    max_drop: float
    groups: dict[str, tuple[int, int]]
    """Prunable groups, each named by its first root node, with their channel counts and the multiple kept
    counts round to (empty: no pruning)."""
    modes: list[str]
    """Quantization modes to try (empty: no quantization)."""
    fuse: bool
    deadline: float
    """``time.monotonic()`` after which no new batch of candidates starts (see ``Search.batch``)."""
    width: int = 2
    """Candidates per refinement batch (the executor's workers)."""


@dataclass
class Search:
    problem: Problem
    settings: SearchSettings
    executor: Executor
    timer: SideBySide
    float_sets: Callable[[bytes, str], dict[str, tuple[str, ...]]]
    """The sets of nodes worth leaving in float when a model is quantized in a mode, by what they hold (nodes
    slower quantized alone, none...), the default first: each a form to build and time (``NodeTimes``)."""
    on_progress: Callable[[Evaluated | None, int], None] = lambda best, count: None
    evaluated: list[Evaluated] = field(default_factory=list)
    sensitivity: dict[str, float] = field(default_factory=dict)
    unprobed: set[str] = field(default_factory=set)
    finalists: list[Evaluated] = field(default_factory=list)
    """The fastest candidates timed again together at the end (their ``timed`` is that run's), one of which is
    chosen: what decided, for the report."""
    """Groups whose sensitivity probe never ran (the time budget ran out first): never pruned, not failed."""
    stopped_early: bool = False
    cut: list[Recipe] = field(default_factory=list)
    """Candidates started but stopped unfinished when the search's time ran out (``batch``)."""
    _cache: dict[Recipe, Evaluated] = field(default_factory=dict)
    _slow: dict[Recipe, tuple[str, ...]] = field(default_factory=dict)
    """Per quantized recipe as proposed: the nodes it leaves in float for their speed."""
    _form: dict[str, str] = field(default_factory=dict)
    """Per mode, the float set (by what it holds) whose form ran fastest on the first model quantized: the one
    the models quantized in that mode leave in float."""
    _node_counts: dict[int, int] = field(default_factory=dict)
    _timing_seconds: float = 0.0
    """The longest time one model's side-by-side timing has taken so far (with its share of the original's)."""
    _timing_prior: float = 0.0
    """What one model's timing is foretold to take until one has run (``SideBySide.expected_seconds``)."""

    # ------------------------------------------------------------------------------------ the stages

    def run(self, original: Outcome) -> Evaluated:
        """The fastest candidate inside the budget (the original when nothing is faster)."""
        best = Evaluated("original", original)
        self._best = best
        self._timing_prior = self.timer.expected_seconds()
        settings = self.settings
        # the fused original early, though lossless: its build time says how long fusing the best will take at
        # the end, and it runs beside the quantized candidates (often one or two, fewer than the workers)
        fused = [FUSED_ORIGINAL] if settings.fuse else []
        if (settings.modes or fused) and self._time_left():
            self._quantized([best] if settings.modes else [], also=fused)
        if settings.groups and self._time_left():
            self._sensitivity()
        allowed = [g for g in settings.groups if self.sensitivity.get(g, float("inf")) <= settings.max_drop]
        pruned: list[Evaluated] = []
        if allowed and self._time_left():
            rates = self._distinct_rates(allowed)
            pruned = self.batch("prune", [Recipe.pruned(dict.fromkeys(allowed, rate)) for rate in rates])
            self._time(pruned)
        if settings.modes and pruned and self._time_left():
            self._quantized(sorted(self._inside(pruned), key=lambda e: -e.speedup)[:QUANTIZE_BASES])
        if settings.groups and self._time_left():
            self._refine(list(settings.groups))
        if settings.fuse:
            # The original fused too (lossless, inside any budget, it beats a best so far that is slower). The
            # best so far is fused whatever the time: the search kept time for it (``_reserve``), and a search
            # whose candidates all missed the budget then writes at least the fused original.
            recipes = [replace(self._best.recipe, fuse=True), FUSED_ORIGINAL]
            fused = self.batch("fuse", recipes, bounded=False)
            self._time(fused)
        self._final()
        return self._best

    def _final(self) -> None:
        """The fastest few, timed again together: one run's lucky ratio does not pick the model. A lone finalist
        has nothing to be picked against, and keeps the figure it was timed at (a ViT's one candidate was timed
        three times over after its search, 43 s of a 3-minute budget)."""
        timed = sorted(self._inside(self.evaluated), key=lambda e: -e.speedup)
        finalists = list({e.recipe: e for e in reversed(timed[:FINALISTS])}.values())
        if not finalists:
            return
        if len(finalists) > 1:
            figures = self._measure([self._model(e) for e in finalists])
            for result, figure in zip(finalists, figures, strict=True):
                result.timed = figure
        self.finalists = finalists
        self._best = _pick(finalists)

    def _quantized(self, bases: Sequence[Evaluated], also: Sequence[Recipe] = ()) -> None:
        """Each of ``bases`` quantized in each mode the ops call for, with what the budget has left after it,
        its nodes left in float for speed as the mode's form says (``_form_of``). ``also``: recipes built in
        the same batch."""
        recipes = list(also)
        for number, base in enumerate(bases):
            if number and not self._time_left():  # timing a base's nodes takes a while on a big model
                break
            for mode in self.settings.modes:
                sets = self.float_sets(self._model(base), mode)
                if not sets:
                    continue  # nothing in this mode is worth quantizing here
                keep = self._form_of(base, mode, sets)
                if keep is None:
                    continue  # its form, unsearched, is already a candidate inside the budget
                recipe = base.recipe.with_quantize(mode, self.settings.max_drop, keep)
                self._slow[recipe] = keep
                recipes.append(recipe)
        if recipes:
            self._time(self.batch("quantize", recipes))

    def _form_of(self, base: Evaluated, mode: str, sets: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
        """The nodes ``base`` leaves in float for speed in ``mode``: those of the float set whose form won on
        the first model quantized. Timings alone do not add up (a node left in float costs its neighbours a
        quantize and a dequantize; one quantized may cost them a fused activation), so there each set's form
        is built whole, without the budget's search (the cheap part of a candidate), and all are timed side by
        side: the fastest, or of those not slower beyond noise the one leaving the most in float, sets the form.
        None when that form fits the budget as it is: it is then the candidate."""
        if mode not in self._form:
            self._form[mode] = next(iter(sets))
            if len(sets) > 1:
                probes = {label: base.recipe.with_quantize(mode, None, keep) for label, keep in sets.items()}
                built = [b for b in self.batch("form", list(probes.values())) if b.outcome.model is not None]
                for result in built:
                    self._slow[result.requested] = sets[next(k for k, r in probes.items() if r == result.requested)]
                if built:
                    label_of = {id(b): next(k for k, r in probes.items() if r == b.requested) for b in built}
                    self._measure_with_best(built, contenders=())
                    fastest = max(built, key=lambda b: b.speedup)
                    # forms that cannot be told apart differ in a few nodes: the one with more in float keeps
                    # more accuracy (the digits ResNet's 1-channel stem and head, quantized for no measurable
                    # speed, cost a held-out digit)
                    ties = [b for b in built if not _faster(fastest, b)]
                    pick = max(ties, key=lambda b: (len(sets[label_of[id(b)]]), b.speedup))
                    self._form[mode] = label_of[id(pick)]
                    if self._within(pick):
                        if _beats(pick, self._best):
                            self._best = pick
                        return None
        label = self._form[mode]
        return sets[label] if label in sets else next(iter(sets.values()))

    def _sensitivity(self) -> None:
        probes = {group: Recipe.pruned({group: PROBE_RATE}) for group in self.settings.groups}
        self.batch("sensitivity", list(probes.values()))
        for group, probe in probes.items():
            result = self._cache.get(probe)
            self.sensitivity[group] = result.outcome.bound if result is not None else float("inf")
            if result is None:  # its batch was never sent: the time budget ran out first
                self.unprobed.add(group)

    def _refine(self, groups: list[str]) -> None:
        """Greedy steps from the best so far, with backtracking: a group whose step breaks the budget is not
        raised again, one whose step is not faster is not tried again until the best changes."""
        saturated: set[str] = set()
        order = sorted(groups, key=lambda g: self.sensitivity.get(g, float("inf")))
        tried: set[str] = set()
        while self._time_left():
            current = self._best
            rates = current.recipe.rates
            steps = []
            for group in order:
                higher = self._higher(group, rates.get(group, 0.0))
                if group not in saturated and group not in tried and higher is not None:
                    steps.append((group, higher))
            if not steps:
                return
            steps = steps[: max(2, self.settings.width)]
            recipes = []
            for group, rate in steps:
                recipe = Recipe.pruned({**rates, group: rate})
                if current.recipe.quantize:
                    slow = self._slow.get(current.requested, ())
                    recipe = recipe.with_quantize(current.recipe.quantize, self.settings.max_drop, slow)
                    self._slow[recipe] = slow
                recipes.append(recipe)
            results = self.batch("refine", recipes)
            for (group, _), recipe in zip(steps, recipes, strict=True):
                if recipe in self._cache:
                    (tried if self._within(self._cache[recipe]) else saturated).add(group)
            self._time(results)
            if self._best is not current:
                tried = set()

    # ------------------------------------------------------------------------------------ the parts

    def _removed(self, group: str, rate: float) -> int:
        channels, multiple = self.settings.groups[group]
        return channels_to_prune(channels, rate, multiple) if rate > 0 else 0

    def _distinct_rates(self, groups: Sequence[str]) -> list[float]:
        """The rates of ``GLOBAL_RATES`` that prune ``groups`` differently from every lower one."""
        seen: set[tuple[int, ...]] = set()
        rates = []
        for rate in GLOBAL_RATES:
            counts = tuple(self._removed(group, rate) for group in groups)
            if counts not in seen:
                seen.add(counts)
                rates.append(rate)
        return rates

    def _higher(self, group: str, rate: float) -> float | None:
        """The next rate of ``LADDER`` above ``rate`` that removes more of ``group``'s channels (a step that
        rounds to the same count builds the same model under another name), or None."""
        removed = self._removed(group, rate)
        return next((r for r in LADDER if r > rate and self._removed(group, r) > removed), None)

    def batch(self, stage: str, recipes: Sequence[Recipe], bounded: bool = True) -> list[Evaluated]:
        """Build and score ``recipes`` (cached ones reused) on the executor; in a ``bounded`` batch each starts
        only if ``_admits`` it when a worker is free. Returns the ones evaluated, in order."""
        fresh = [r for r in dict.fromkeys(recipes) if r not in self._cache]
        count = len(self.evaluated)
        finished = 0

        def done(index: int, outcome: Outcome) -> None:
            nonlocal finished
            finished += 1
            self.on_progress(self._best, count + finished)

        tasks = [Task(self.problem, recipe, self._minutes_left()) for recipe in fresh]
        started: set[int] = set()

        def admit(index: int) -> bool:
            """Whether the candidate starts; if so, its own search gets the time left as it starts, not as the
            batch was formed (a third candidate of two workers started two minutes late with as long)."""
            if not self._admits(stage):
                return False
            tasks[index] = replace(tasks[index], minutes=self._minutes_left())
            started.add(index)
            return True

        if bounded:
            outcomes = self.executor.map(evaluate, tasks, on_result=done, admit=admit, deadline=self._soft_deadline())
        else:
            outcomes = self.executor.map(evaluate, tasks, on_result=done)
        for index, (recipe, outcome) in enumerate(zip(fresh, outcomes, strict=True)):
            if outcome is None:  # never started, or stopped unfinished: the time ran out
                if index in started:
                    self.cut.append(recipe)
                    self.stopped_early = True
                continue
            result = Evaluated("fuse" if recipe == FUSED_ORIGINAL else stage, outcome, requested=recipe)
            self._cache[recipe] = result
            self._cache.setdefault(outcome.recipe, result)  # as built: a quantizer's search filled in its nodes
            self.evaluated.append(result)
        return [self._cache[r] for r in recipes if r in self._cache]

    def _admits(self, stage: str) -> bool:
        """Whether a candidate of ``stage`` starting now ends in time, at the pace of this stage's candidates so
        far (of all candidates, before the stage's first has finished)."""
        if not self._time_left():
            return False
        own = [e.outcome.seconds for e in self.evaluated if e.stage == stage]
        pace = own or [e.outcome.seconds for e in self.evaluated]
        expected = statistics.median(pace) if pace else 0.0
        if time.monotonic() + expected < self._soft_deadline():
            return True
        # the search is over: the stages after this one build candidates no quicker, and a refinement loop
        # asking again would spin until the deadline starting nothing
        self.stopped_early = True
        return False

    def _reserve(self) -> float:
        """Seconds kept after the search for finishing: fusing the best and the final timings."""
        fused = self._cache.get(FUSED_ORIGINAL)
        fusing = 0.0
        if self.settings.fuse and fused is not None:
            growth = max(1.0, self._node_count(self._model(self._best)) / self._node_count(self.problem.model))
            fusing = FUSE_RESERVE * growth * fused.outcome.seconds
        per_model = self._timing_seconds or self._timing_prior
        limit = self.timer.run_limit()
        runs = [
            count * per_model if limit is None else min(count * per_model, max(limit, per_model))
            for count in FINISH_RUNS
        ]
        return fusing + sum(runs) + FINISH_SCORING * per_model

    def _node_count(self, model: bytes) -> int:
        """Nodes of a candidate's main graph (at least 1): what an optimize run's time grows with. Counted once
        per model (the models live as long as the search, so their ids do)."""
        if id(model) not in self._node_counts:
            self._node_counts[id(model)] = max(1, len(onnx.load_from_string(model).graph.node))
        return self._node_counts[id(model)]

    def _soft_deadline(self) -> float:
        """When the search stops starting candidates, so that finishing ends near the deadline."""
        return self.settings.deadline - self._reserve()

    def _time(self, results: Sequence[Evaluated]) -> None:
        """Time the results inside the budget in one run with the best so far (``_measure_with_best``)."""
        unique = list({id(r): r for r in results}.values())
        inside = [r for r in unique if self._within(r) and r.timed is None]
        if inside:
            self._measure_with_best(inside)

    def _measure_with_best(self, results: Sequence[Evaluated], contenders: Sequence[Evaluated] | None = None) -> None:
        """Time ``results`` in one run with the best so far; of those inside the budget (of ``contenders``, when
        given), the one ``_pick`` picks replaces the best when it ``_beats`` it."""
        best = self._best
        extra = [best] if best.outcome.model is not None else []
        timed = self._measure([self._model(r) for r in [*results, *extra]])
        for result, figure in zip([*results, *extra], timed, strict=True):
            result.timed = figure
        inside = [r for r in (results if contenders is None else contenders) if self._within(r)]
        if inside and _beats(pick := _pick(inside), best):
            self._best = pick
        self.on_progress(self._best, len(self.evaluated))

    def _within(self, result: Evaluated) -> bool:
        return result.outcome.fits(self.settings.max_drop)

    def _inside(self, results: Sequence[Evaluated]) -> list[Evaluated]:
        return [r for r in results if self._within(r) and r.timed is not None]

    def _model(self, result: Evaluated) -> bytes:
        return result.outcome.model if result.outcome.model is not None else self.problem.model

    def _measure(self, models: list[bytes]) -> list[Timed]:
        """``timer.measure``, noting how long a model's timing takes (what finishing needs per timed model)."""
        clock = time.monotonic()
        figures = self.timer.measure(models)
        if models:
            self._timing_seconds = max(self._timing_seconds, (time.monotonic() - clock) / len(models))
        return figures

    def _minutes_left(self) -> float:
        """The time a candidate's own search may take: ``SEARCH_SHARE`` of what is left before the search stops
        starting candidates, when running ones are stopped too; the rest is for building and scoring what that
        search found."""
        return max(1 / 60, SEARCH_SHARE * (self._soft_deadline() - time.monotonic()) / 60)  # a limit must be positive

    def _time_left(self) -> bool:
        if not self.stopped_early and time.monotonic() < self._soft_deadline():
            return True
        self.stopped_early = True
        return False

    @property
    def best(self) -> Evaluated:
        return self._best


def _faster(a: Evaluated, b: Evaluated) -> bool:
    """``a`` is faster than ``b`` beyond noise: by ``MARGIN``, and its interval's low end above ``b``."""
    low = a.timed.low if a.timed is not None else a.speedup
    return a.speedup > b.speedup * MARGIN and low > b.speedup


def _beats(new: Evaluated, old: Evaluated) -> bool:
    """Latency first, file size second: faster beyond noise, or not slower beyond noise and smaller."""
    if _faster(new, old):
        return True
    return not _faster(old, new) and new.outcome.size < old.outcome.size


def _pick(results: Sequence[Evaluated]) -> Evaluated:
    """The fastest of results timed in one run, or among those not slower than it beyond noise, the
    smallest file. Close calls are settled by size, which does not vary from run to run, so two runs
    (local and on Ray) choose alike."""
    fastest = max(results, key=lambda r: r.speedup)
    return min((r for r in results if not _faster(fastest, r)), key=lambda r: (r.outcome.size, -r.speedup))
