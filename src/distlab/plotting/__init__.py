"""Plotting: one style, one interval and one provenance rule for every figure of the project.

Each paper's ``figures.py`` (the atlas's and the baseline's, :mod:`distlab.baseline.figures`,
among them) draws from its summary tables only, through this package, so that
every figure of the project reads the same way:

* :mod:`~distlab.plotting.plots` is the seaborn style (Agg backend, one DPI, PNG/PDF/SVG by
  suffix) and the drawing helpers: a line or a bar with the mean over seeds and a 95 %
  Student-t band (:func:`distlab.scoring.stats.t_interval`, the interval of the tables and the
  scorecard; deterministic, no resampling), curves that coincide named in a note instead of
  hidden under each other, log ticks.  :func:`~distlab.plotting.plots.save` applies the
  legibility rules where it can (a provenance box goes to the first corner where it covers
  no data and no legend, a legend to where it covers no data, the suptitle above the axes'
  titles) and :func:`~distlab.plotting.plots.legibility_problems` reports what is left;
  ``tests/test_figures_legible.py`` holds every figure of the tiny run to it.
* :mod:`~distlab.plotting.plotclock` says which clock a figure's times are on.  Every
  figure states whether its times are simulated (the virtual clock of the simulated
  cluster), measured (wall clock, with the backend) or extrapolated (from measurements):
  :func:`~distlab.plotting.plots.label_provenance` writes the box from
  :func:`~distlab.plotting.plotclock.provenance_text`, and
  :func:`~distlab.plotting.plotclock.carry_clock` adds its clock to a title that names none.
* :mod:`~distlab.plotting.plottext` finds where a figure's texts sit (titles, axis labels,
  text boxes, legends) and which of them print over each other or over another axes' tick
  labels; :mod:`~distlab.plotting.plots` moves what it can and reports the rest.
* :mod:`~distlab.plotting.util` holds the small table helpers the figure modules share:
  :func:`~distlab.plotting.util.ci_cell` (a mean and its 95 % t interval as a table cell and
  as numbers) and :func:`~distlab.plotting.util.on_grid` (each run's curve interpolated onto a
  common grid over the span all runs of a group cover, so curves over a continuous x such as
  time can be averaged across seeds; nothing is extrapolated).

A figure module calls :func:`~distlab.plotting.plots.set_style` once, draws with these
helpers, labels its provenance and saves with :func:`~distlab.plotting.plots.save`
(atomically, through :mod:`distlab.results.tables`).  Below this package:
:mod:`distlab.scoring.stats` and :mod:`distlab.results.tables`.  Code outside this package
uses only the public names of its modules (no leading underscore).
"""
