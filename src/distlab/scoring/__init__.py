"""Scoring: every paper claim tested against our own results, and the write-up built from it.

The workflow ends here.  Each paper's summary tables (one row a run, built by
:mod:`distlab.results.summarize`) and the claims of ``config/claims.yaml`` go in; a
verdict a claim, with the numbers behind it, comes out.  Nothing here imports torch, and
nothing here runs a training job: a verdict is a pure function of the tables, the claims
and the ``stats:`` settings of the config, so the same tables always give the same
scorecard.

The modules, in the order a verdict is built:

* :mod:`~distlab.scoring.claims` reads and checks ``config/claims.yaml`` (torch- and
  pandas-free, so the config check and the rule files read the claims without the rest):
  each claim names its paper, source, statement, table, metric and test, and compares two
  settings ``a`` and ``b`` (or a ``chain``, a constant ``value``, a scalar ``value_from``);
  a mistake raises :class:`~distlab.scoring.claims.ClaimError` naming the claim and key.
* :mod:`~distlab.scoring.stats` holds the paired statistics for seed-replicated runs: runs
  of two settings are paired by seed (:func:`~distlab.scoring.stats.pair_by_seed`), and
  tested with the paired t test and its one-sided, non-inferiority and TOST forms, the
  Wilcoxon signed-rank cross-check, Holm's correction; :func:`~distlab.scoring.stats.t_interval`
  is the project's one confidence interval (tables, figure bands and the scorecard alike).
* :mod:`~distlab.scoring.scorecard_links` tests one a-vs-b comparison (a *link* of a claim):
  the test a claim names, its t interval, the seeds that would decide an inconclusive link.
* :mod:`~distlab.scoring.scorecard_conditions` evaluates the preconditions a claim is
  testable under (a model below its data's bigram floor, a learner ahead of its negative
  control): met, not met or not run, with what was measured.
* :mod:`~distlab.scoring.scorecard` turns links and conditions into a verdict a claim
  (reproduced, not reproduced, inconclusive, not testable here, by construction, not
  run), applies Holm's step-down levels across a paper's claims and writes the scorecard
  (``python -m distlab scorecard``; one part a paper, merged with ``--merge``).
* :mod:`~distlab.scoring.reported` labels the rows reported beside a test (``report_only``):
  an estimate and its interval shown, *reported (not a test)*, outside every Holm family
  and the verdict counts, so that one hypothesis is tested once.
* :mod:`~distlab.scoring.report` writes ``paper/README.md``, the reproduction write-up, from
  the scorecard and the figures and tables under ``paper/`` (``python -m distlab report``).
* :mod:`~distlab.scoring.stability` reruns the parts of the workflow that measure wall time
  on this machine and lists every verdict that flips between two runs of one commit
  (``python -m distlab stability``, ``make stability``); a flip of a claim not marked
  ``measured`` is a determinism bug.
* :mod:`~distlab.scoring.basis` names what each metric's verdict rests on (a measurement,
  training, trained steps times the simulated clock, the clock alone, arithmetic); the
  snapshot counts the decided rows by it in the README's verdict block.

What a verdict means (the tests, margins, ``expected``, ``preconditions``,
``by_construction``) is documented once, in :mod:`distlab.scoring.scorecard`.

Below this package: :mod:`distlab.results` (the tables it reads and writes).  Above it:
only the CLI dispatcher.  :mod:`distlab.plotting` draws its bands with
:func:`~distlab.scoring.stats.t_interval`.  Code outside this package uses only the public
names of its modules (no leading underscore); ``tests/test_shape.py`` holds the layers.
"""
